/* libgoblin/hub/config.c - hub.conf: the operator's settings, and the making of a
 * hub directory (goblin-hub init). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "hub_impl.h"
#include "net/identity.h"
#include <goblin/tls.h>
#include <stddef.h>

void goblin_hub_config_default(goblin_hub_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    snprintf(c->listen, sizeof c->listen, "https://127.0.0.1:8443");
    snprintf(c->public_url, sizeof c->public_url, "https://localhost:8443");
    snprintf(c->smtp_url, sizeof c->smtp_url, "smtp://127.0.0.1:25");
    snprintf(c->mail_from, sizeof c->mail_from, "goblin-hub@localhost");
    c->code_ttl_s = 900;
    c->session_ttl_s = 7 * 24 * 3600;
    c->rate_window_s = 900;
    c->codes_per_address = 3;
    c->codes_per_client = 10;
    c->failures_per_code = 5;
    c->failures_per_address = 10;
    c->failures_per_client = 20;
    c->max_body_bytes = 16384;
    c->max_keys = 20;
    c->max_requests = 5;
    c->machines_max_workers = 4096;
    c->machines_max_nodes = 256;
}

typedef struct num_opt {
    const char *name;
    size_t off;
    uint32_t lo, hi;
} num_opt;

#define NUM(f, lo, hi) {#f, offsetof(goblin_hub_config, f), lo, hi}
static const num_opt nums[] = {
    NUM(code_ttl_s, 1, 86400),        NUM(session_ttl_s, 60, 90 * 86400),
    NUM(rate_window_s, 1, 86400),     NUM(codes_per_address, 1, 1000),
    NUM(codes_per_client, 1, 100000), NUM(failures_per_code, 1, 100),
    NUM(failures_per_address, 1, 1000), NUM(failures_per_client, 1, 100000),
    NUM(max_body_bytes, 1024, 1 << 20), NUM(max_keys, 1, 1000),
    NUM(max_requests, 1, 1000),     NUM(machines_max_workers, 1, 1 << 20),
    NUM(machines_max_nodes, 1, 100000),
};

typedef struct str_opt {
    const char *name;
    size_t off, cap;
} str_opt;

#define STR(f) {#f, offsetof(goblin_hub_config, f), sizeof ((goblin_hub_config *)0)->f}
static const str_opt strs[] = {STR(listen), STR(public_url), STR(smtp_url), STR(smtp_user),
                               STR(smtp_password), STR(mail_from), STR(store), STR(machines)};

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
    return s;
}

static goblin_err set(goblin_hub_config *c, const char *name, const char *val, int line, char *msg,
                      size_t cap) {
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if (strcmp(name, strs[i].name)) continue;
        if (strlen(val) >= strs[i].cap)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "hub.conf line %d: %s is longer than %zu bytes", line,
                                name, strs[i].cap - 1);
        memcpy((char *)c + strs[i].off, val, strlen(val) + 1);
        return GOBLIN_OK;
    }
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if (strcmp(name, nums[i].name)) continue;
        char *end;
        unsigned long long v = strtoull(val, &end, 10);
        if (!*val || *end || v < nums[i].lo || v > nums[i].hi)
            return goblin__errf(msg, cap, GOBLIN_ERANGE, "hub.conf line %d: %s must be %u .. %u", line, name,
                                (unsigned)nums[i].lo, (unsigned)nums[i].hi);
        *(uint32_t *)((char *)c + nums[i].off) = (uint32_t)v;
        return GOBLIN_OK;
    }
    if (!strcmp(name, "admin")) {
        if (c->n_admins >= GOBLIN_HUB_ADMINS_MAX)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "hub.conf line %d: more than %d admins", line,
                                GOBLIN_HUB_ADMINS_MAX);
        if (!goblin__hub_email_ok(val, c->admins[c->n_admins]))
            return goblin__errf(msg, cap, GOBLIN_ESYNTAX, "hub.conf line %d: admin '%s' is not an address", line, val);
        c->n_admins++;
        return GOBLIN_OK;
    }
    if (!strcmp(name, "lab_weight")) {
        if (c->n_lab_weights >= GOBLIN_HUB_LAB_WEIGHTS_MAX)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "hub.conf line %d: more than %d lab_weight lines", line,
                                GOBLIN_HUB_LAB_WEIGHTS_MAX);
        char email[GOBLIN_HUB_EMAIL_MAX + 2];
        const char *sp = strpbrk(val, " \t");
        size_t k = sp ? (size_t)(sp - val) : 0;
        char *end = NULL;
        unsigned long long w = sp ? strtoull(sp + strspn(sp, " \t"), &end, 10) : 0;
        if (!sp || k > GOBLIN_HUB_EMAIL_MAX || !end || *end || w < 1 || w > 1000)
            return goblin__errf(msg, cap, GOBLIN_ESYNTAX, "hub.conf line %d: lab_weight is 'EMAIL N' (N 1 .. 1000)", line);
        memcpy(email, val, k);
        email[k] = 0;
        if (!goblin__hub_email_ok(email, c->lab_weights[c->n_lab_weights].email))
            return goblin__errf(msg, cap, GOBLIN_ESYNTAX, "hub.conf line %d: lab_weight '%s' is not an address", line, email);
        c->lab_weights[c->n_lab_weights++].weight = (uint32_t)w;
        return GOBLIN_OK;
    }
    if (!strcmp(name, "trust_forwarded_for")) {
        if (strcmp(val, "yes") && strcmp(val, "no"))
            return goblin__errf(msg, cap, GOBLIN_ESYNTAX, "hub.conf line %d: trust_forwarded_for is yes or no", line);
        c->trust_forwarded_for = !strcmp(val, "yes");
        return GOBLIN_OK;
    }
    return goblin__errf(msg, cap, GOBLIN_ESYNTAX, "hub.conf line %d: unknown setting '%s'", line, name);
}

goblin_err goblin_hub_config_parse(const char *text, goblin_hub_config *out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!text || !out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "text and out are required");
    goblin_hub_config *c = goblin__alloc(sizeof *c);
    char *copy = goblin__strdup(text);
    goblin_err e = GOBLIN_OK;
    if (!c || !copy) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    goblin_hub_config_default(c);
    int line = 0;
    for (char *save = NULL, *l = copy; !e && l; l = save) {
        save = strchr(l, '\n');
        if (save) *save++ = 0;
        line++;
        char *t = trim(l);
        if (!*t || *t == '#') continue;
        char *eq = strchr(t, '=');
        if (!eq) {
            e = goblin__errf(msg, cap, GOBLIN_ESYNTAX, "hub.conf line %d: expected 'name = value'", line);
            break;
        }
        *eq = 0;
        e = set(c, trim(t), trim(eq + 1), line, msg, cap);
    }
    if (!e) {
        if (strncmp(c->listen, "https://", 8))
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "hub.conf: listen must be an https:// address");
        else if (strncmp(c->smtp_url, "smtp://", 7) && strncmp(c->smtp_url, "smtps://", 8))
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "hub.conf: smtp_url must be smtp:// or smtps://");
        else if (!goblin__hub_email_ok(c->mail_from, c->mail_from))
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "hub.conf: mail_from is not an address");
        else if (strpbrk(c->public_url, " \t\r\n<>\"'"))
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "hub.conf: public_url has a blank or a quote");
    }
    if (!e) *out = *c;
out:
    goblin__free(c);
    goblin__free(copy);
    return e;
}

static goblin_err join(char *out, size_t n, const char *dir, const char *file, char *msg, size_t cap) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, file) >= n)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "path %s/%s is too long", dir, file);
    return GOBLIN_OK;
}

goblin_err goblin_hub_init_dir(const char *dir, const char *admin, const char *dns_name,
                               char *fingerprint_out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!dir || !*dir) return goblin__errf(msg, cap, GOBLIN_EINVAL, "a directory is required");
    char low[GOBLIN_HUB_EMAIL_MAX + 1];
    if (admin && !goblin__hub_email_ok(admin, low))
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "admin '%s' is not an address", admin);
    char path[4096], hex[65];
    goblin_err e = goblin__tls_make_dirs(dir, msg, cap);
    if (e) return e;
    /* The secret and config first: both refuse to replace an existing file, so a
     * second init of a hub directory changes nothing. */
    if ((e = goblin__hub_random_hex(hex, 32, msg, cap)) || (e = join(path, sizeof path, dir, GOBLIN_HUB_SECRET_FILE, msg, cap)))
        return e;
    hex[64] = '\n';
    e = goblin__tls_write_file(path, hex, 65, 0600, false, msg, cap);
    memset(hex, 0, sizeof hex);
    if (e) return e;
    char conf[2048];
    goblin_hub_config d;
    goblin_hub_config_default(&d);
    snprintf(conf, sizeof conf,
             "# goblin-hub settings (docs/hub.md lists them all)\n"
             "listen = %s\npublic_url = %s\nsmtp_url = %s\nmail_from = %s\n"
             "# workers and lab nodes dial this (docs/hub.md, \"Machines\")\nmachines = %s\n%s%s%s",
             d.listen, d.public_url, d.smtp_url, d.mail_from, GOBLIN_HUB_MACHINES_DEFAULT,
             admin ? "admin = " : "", admin ? low : "",
             admin ? "\n" : "");
    if ((e = join(path, sizeof path, dir, GOBLIN_HUB_CONFIG_FILE, msg, cap)) ||
        (e = goblin__tls_write_file(path, conf, strlen(conf), 0600, false, msg, cap)))
        return e;
    goblin_tls_init_params tp;
    goblin_tls_init_params_default(&tp);
    const char *names[1] = {dns_name};
    if (dns_name) {
        tp.dns_names = names;
        tp.n_dns_names = 1;
    }
    goblin_tls_identity id;
    goblin_errbuf tls_err;
    if ((e = goblin_tls_init_dir(dir, &tp, &id, &tls_err)))
        return goblin__errf(msg, cap, e, "%s", tls_err.message);
    if ((e = join(path, sizeof path, dir, GOBLIN_HUB_DB_FILE, msg, cap))) return e;
    goblin_hub_store *s;
    goblin_errbuf serr;
    if ((e = goblin_hub_store_open(path, &s, &serr))) return goblin__errf(msg, cap, e, "%s", serr.message);
    goblin_hub_store_close(s);
    if (fingerprint_out) memcpy(fingerprint_out, id.fingerprint, GOBLIN_TLS_FINGERPRINT_SIZE);
    return GOBLIN_OK;
}
