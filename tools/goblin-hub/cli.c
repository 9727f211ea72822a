/* tools/goblin-hub/cli.c - argv -> hub_cli; no other logic. */
#include <stdlib.h>
#include <string.h>

#include "../common/tool_common.h"
#include "cli.h"

void hub_cli_usage(FILE *f) {
    fprintf(f,
        "Usage: goblin-hub init DIR [--admin EMAIL] [--dns NAME]\n"
        "       goblin-hub serve DIR\n"
        "       goblin-hub requests list [--all] [--dir DIR]\n"
        "       goblin-hub requests approve|deny ID [--note TEXT] [--dir DIR]\n"
        "       goblin-hub quarantines list [--all] [--dir DIR]\n"
        "       goblin-hub quarantines lift ID [--dir DIR]\n"
        "\n"
        "The GPU Goblin network's server: email sign-in, researchers' access requests,\n"
        "lab-node keys, their web pages over HTTPS, and the relay between lab nodes\n"
        "and volunteers' workers.\n"
        "\n"
        "  init DIR       make a hub directory: certificate and key, server secret,\n"
        "                 hub.conf (edit it: listen, public_url, smtp_url, mail_from,\n"
        "                 admin) and the database; prints the certificate's fingerprint\n"
        "  serve DIR      serve the pages on hub.conf's listen address, and workers and\n"
        "                 lab nodes on its machines address, until SIGINT/SIGTERM\n"
        "  requests list  the pending access requests (--all: every one)\n"
        "  requests approve|deny ID   decide one and mail the researcher\n"
        "  quarantines list   identities lab nodes quarantined (--all: lifted ones too)\n"
        "  quarantines lift ID        lift one: the hub lends that identity again\n"
        "  --dir DIR      the hub directory of `requests` (default $GOBLIN_HUB_DIR, else .)\n"
        "  -h, --help, --version\n"
        "\n" TOOL_EXIT_CODES_HELP);
}

static int usage_error(const char *what) {
    fprintf(stderr, "goblin-hub: %s (see --help)\n", what);
    return TOOL_EXIT_USAGE;
}

int hub_cli_parse(int argc, char **argv, hub_cli *c) {
    memset(c, 0, sizeof *c);
    c->dir = getenv("GOBLIN_HUB_DIR");
    if (!c->dir || !*c->dir) c->dir = ".";
    const char *pos[3] = {NULL, NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) c->help = true;
        else if (!strcmp(a, "--version")) c->version = true;
        else if (!strcmp(a, "--all")) c->all = true;
        else if (!strcmp(a, "--admin") && more) c->admin = argv[++i];
        else if (!strcmp(a, "--dns") && more) c->dns_name = argv[++i];
        else if (!strcmp(a, "--note") && more) c->note = argv[++i];
        else if (!strcmp(a, "--dir") && more) c->dir = argv[++i];
        else if (a[0] == '-') return usage_error("unknown option or missing value");
        else if (npos < 3) pos[npos++] = a;
        else return usage_error("too many arguments");
    }
    if (c->help || c->version) return 0;
    if (!npos) return usage_error("a command is required");
    if (!strcmp(pos[0], "init") || !strcmp(pos[0], "serve")) {
        if (npos != 2) return usage_error("init and serve take one directory");
        c->cmd = !strcmp(pos[0], "init") ? HUB_CMD_INIT : HUB_CMD_SERVE;
        c->dir = pos[1];
        return 0;
    }
    if (!strcmp(pos[0], "quarantines") && npos >= 2) {
        if (!strcmp(pos[1], "list")) {
            if (npos != 2) return usage_error("quarantines list takes no argument");
            c->cmd = HUB_CMD_QLIST;
            return 0;
        }
        if (strcmp(pos[1], "lift")) return usage_error("quarantines list or lift");
        c->cmd = HUB_CMD_QLIFT;
        if (npos != 3 || !tool_parse_i64(pos[2], 1, INT64_MAX, &c->id)) return usage_error("a quarantine ID is required");
        return 0;
    }
    if (strcmp(pos[0], "requests") || npos < 2) return usage_error("unknown command");
    if (!strcmp(pos[1], "list")) {
        if (npos != 2) return usage_error("requests list takes no argument");
        c->cmd = HUB_CMD_LIST;
        return 0;
    }
    if (strcmp(pos[1], "approve") && strcmp(pos[1], "deny")) return usage_error("requests list, approve or deny");
    c->cmd = !strcmp(pos[1], "approve") ? HUB_CMD_APPROVE : HUB_CMD_DENY;
    if (npos != 3 || !tool_parse_i64(pos[2], 1, INT64_MAX, &c->id)) return usage_error("a request ID is required");
    return 0;
}
