/* libgoblin/hub/hub.c - opening a hub directory: its settings, secret and store. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "hub_impl.h"
#include "net/crypto.h"

static goblin_err read_text(const char *dir, const char *file, uint8_t **buf, size_t *len, char *msg,
                            size_t cap) {
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "path %s/%s is too long", dir, file);
    return goblin__tls_read_file(path, file, buf, len, msg, cap);
}

goblin_err goblin_hub_open(const char *dir, goblin_hub **out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!dir || !*dir || !out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "a directory and out are required");
    if (strlen(dir) >= sizeof ((goblin_hub *)0)->dir)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "directory path too long");
    goblin_hub *h = goblin__calloc(1, sizeof *h);
    if (!h) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    uint8_t *buf = NULL;
    size_t len = 0;
    goblin_err e = read_text(dir, GOBLIN_HUB_CONFIG_FILE, &buf, &len, msg, cap);
    if (!e) e = goblin_hub_config_parse((const char *)buf, &h->cfg, err);
    goblin__free(buf);
    buf = NULL;
    if (!e) e = read_text(dir, GOBLIN_HUB_SECRET_FILE, &buf, &len, msg, cap);
    size_t full = len;
    if (!e) {
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) len--;
        if (len != 64 || !goblin__tls_from_hex((const char *)buf, 32, h->secret))
            e = goblin__errf(msg, cap, GOBLIN_EFORMAT, "%s/%s must hold 64 hex digits", dir, GOBLIN_HUB_SECRET_FILE);
    }
    if (buf) goblin__tls_wipe_free(buf, full);
    char path[4200];
    if (!e) {
        if (h->cfg.store[0]) snprintf(path, sizeof path, "%s", h->cfg.store);
        else snprintf(path, sizeof path, "%s/%s", dir, GOBLIN_HUB_DB_FILE);
        e = goblin_hub_store_open(path, &h->store, err);
    }
    if (e) {
        goblin_hub_free(h);
        return e;
    }
    *out = h;
    return GOBLIN_OK;
}

void goblin_hub_free(goblin_hub *h) {
    if (!h) return;
    goblin__hub_relay_stop(h);
    goblin__hub_web_stop(h);
    goblin_hub_store_close(h->store);
    memset(h->secret, 0, sizeof h->secret);
    goblin__free(h);
}

const char *goblin_hub_error(const goblin_hub *h) { return h ? h->error : "no hub"; }
const goblin_hub_config *goblin_hub_get_config(const goblin_hub *h) { return h ? &h->cfg : NULL; }
goblin_hub_store *goblin_hub_get_store(goblin_hub *h) { return h ? h->store : NULL; }

bool goblin_hub_is_admin(const goblin_hub *h, const char *email) {
    char low[GOBLIN_HUB_EMAIL_MAX + 1];
    if (!h || !goblin__hub_email_ok(email, low)) return false;
    bool yes = false;
    for (size_t i = 0; i < h->cfg.n_admins; i++) yes |= !strcmp(h->cfg.admins[i], low);
    return yes;
}
