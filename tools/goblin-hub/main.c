/* tools/goblin-hub/main.c - goblin-hub: parse the command line, call the library,
 * print goblin_strerror() and the detail, map errors to exit codes. */
#include <goblin/hub.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/tool_common.h"
#include "cli.h"

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = sig; }

static int fail(goblin_err e, const char *detail) {
    fprintf(stderr, "goblin-hub: %s: %s\n", goblin_strerror(e), detail && *detail ? detail : "-");
    return tool_exit_code(e);
}

/* A researcher's text on the operator's terminal: control characters (an escape
 * sequence could rewrite the screen) are shown as \xNN, never sent. */
static void put_text(const char *label, const char *s) {
    printf("  %s: ", label);
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u < 0x20 || *u == 0x7f) printf("\\x%02x", *u);
        else putchar(*u);
    }
    putchar('\n');
}

static goblin_err print_request(void *ctx, const goblin_hub_access_request *r) {
    (void)ctx;
    char when[32];
    time_t t = (time_t)r->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    printf("request %lld  %s  %s  %s\n", (long long)r->id, goblin_hub_request_status_name(r->status), when,
           r->email);
    put_text("name", r->name);
    put_text("institution", r->institution);
    put_text("purpose", r->purpose);
    put_text("expected use", r->expected_use);
    if (r->note[0]) put_text("note", r->note);
    return GOBLIN_OK;
}

static int serve(const char *dir) {
    goblin_hub *h;
    goblin_errbuf err;
    goblin_err e = goblin_hub_open(dir, &h, &err);
    if (e) return fail(e, err.message);
    if ((e = goblin_hub_serve(h))) {
        int rc = fail(e, goblin_hub_error(h));
        goblin_hub_free(h);
        return rc;
    }
    int port = 0;
    goblin_hub_port(h, &port);
    char fp[GOBLIN_TLS_FINGERPRINT_SIZE] = "?", cert[4200];
    snprintf(cert, sizeof cert, "%s/%s", dir, GOBLIN_TLS_CERT_FILE);
    goblin_tls_fingerprint_file(cert, fp, NULL);
    /* One line a script can read: the port (the listen address may say 0). */
    printf("goblin-hub: serving on port %d (%s), certificate sha256 %s\n", port, goblin_hub_get_config(h)->listen, fp);
    if (goblin_hub_get_config(h)->machines[0]) {
        if ((e = goblin_hub_serve_machines(h))) {
            int rc = fail(e, goblin_hub_error(h));
            goblin_hub_free(h);
            return rc;
        }
        int mport = 0;
        goblin_hub_machines_port(h, &mport);
        printf("goblin-hub: machines on port %d (%s)\n", mport, goblin_hub_get_config(h)->machines);
    }
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (!stop) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    goblin_hub_free(h);
    return TOOL_EXIT_OK;
}

static goblin_err print_quarantine(void *ctx, const goblin_hub_quarantine *q) {
    (void)ctx;
    printf("%lld\t%s\t%s\t%s\t%s\n", (long long)q->id, q->subject, q->lifted ? "lifted" : "in force",
           q->reported_by, q->reason);
    return GOBLIN_OK;
}

int main(int argc, char **argv) {
    tool_name = "goblin-hub";
    hub_cli c;
    int rc = hub_cli_parse(argc, argv, &c);
    if (rc) return rc;
    if (c.help) {
        hub_cli_usage(stdout);
        return TOOL_EXIT_OK;
    }
    if (c.version) {
        printf("goblin-hub %s\n", GOBLIN_VERSION_STRING);
        return TOOL_EXIT_OK;
    }
    goblin_errbuf err;
    goblin_err e;
    if (c.cmd == HUB_CMD_INIT) {
        char fp[GOBLIN_TLS_FINGERPRINT_SIZE];
        if ((e = goblin_hub_init_dir(c.dir, c.admin, c.dns_name, fp, &err))) return fail(e, err.message);
        printf("goblin-hub: made %s; edit %s/%s, then run goblin-hub serve %s\n"
               "certificate sha256 %s\n"
               "machines %s (workers: goblin-worker --connect %s --fingerprint %s;\n"
               "  lab nodes: goblin-node ... --hub %s --hub-key FILE --hub-fingerprint %s)\n",
               c.dir, c.dir, GOBLIN_HUB_CONFIG_FILE, c.dir, fp, GOBLIN_HUB_MACHINES_DEFAULT,
               GOBLIN_HUB_MACHINES_DEFAULT, fp, GOBLIN_HUB_MACHINES_DEFAULT, fp);
        return TOOL_EXIT_OK;
    }
    if (c.cmd == HUB_CMD_SERVE) return serve(c.dir);
    goblin_hub *h;
    if ((e = goblin_hub_open(c.dir, &h, &err))) return fail(e, err.message);
    if (c.cmd == HUB_CMD_LIST) {
        e = goblin_hub_store_request_each(goblin_hub_get_store(h), 0, c.all ? -1 : GOBLIN_HUB_REQUEST_PENDING,
                                          100000, print_request, NULL);
        rc = e ? fail(e, goblin_hub_store_error(goblin_hub_get_store(h))) : TOOL_EXIT_OK;
    } else if (c.cmd == HUB_CMD_QLIST) {
        e = goblin_hub_store_quarantine_each(goblin_hub_get_store(h), c.all, print_quarantine, NULL);
        rc = e ? fail(e, goblin_hub_store_error(goblin_hub_get_store(h))) : TOOL_EXIT_OK;
    } else if (c.cmd == HUB_CMD_QLIFT) {
        e = goblin_hub_store_quarantine_lift(goblin_hub_get_store(h), c.id, (int64_t)time(NULL));
        if (!e) printf("goblin-hub: quarantine %lld lifted\n", (long long)c.id);
        rc = e ? fail(e, goblin_hub_store_error(goblin_hub_get_store(h))) : TOOL_EXIT_OK;
    } else {
        e = goblin_hub_request_decide(h, c.id, c.cmd == HUB_CMD_APPROVE, c.note, 0);
        if (!e) printf("goblin-hub: request %lld %s; the researcher was mailed\n", (long long)c.id,
                       c.cmd == HUB_CMD_APPROVE ? "approved" : "denied");
        rc = e ? fail(e, goblin_hub_error(h)) : TOOL_EXIT_OK;
    }
    goblin_hub_free(h);
    return rc;
}
