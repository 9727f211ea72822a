/* tools/goblin-node/cli.c - argv -> node_cli (params structs); no other logic. */
#include <stdio.h>
#include <string.h>

#include "../common/tool_common.h"
#include "cli.h"

void node_cli_usage(FILE *f) {
    fprintf(f,
        "Usage: goblin-node --listen URL [--listen URL ...] [options]\n"
        "       goblin-node init DIR [--force] [--host NAME] [--port N]\n"
        "       goblin-node researcher add EMAIL [--admin] --credentials FILE\n"
        "       goblin-node researcher list --credentials FILE\n"
        "       goblin-node researcher revoke EMAIL|ID --credentials FILE\n"
        "       goblin-node token new --tokens FILE\n"
        "\n"
        "Runs the node of a GPU Goblin grid: it plans jobs into tasks, leases them to\n"
        "workers (which dial in), verifies every result and assembles the output.\n"
        "\n"
        "  --listen URL            address for workers, and for clients when the node\n"
        "                          serves them (--credentials or --open); repeatable, up\n"
        "                          to %d: tls+tcp://HOST:PORT, tcp://HOST:PORT, ipc:///path\n"
        "  --client-listen URL     serve clients on this address instead (repeatable, up\n"
        "                          to %d); a client that dials --listen is told to go here\n"
        "  --cert FILE --key FILE  the node's identity (from `goblin-node init`); needed\n"
        "                          for tls+tcp:// addresses\n"
        "  --hub URL               borrow volunteers' workers from goblin-hub at its\n"
        "                          machines address (tls+tcp://HOST:PORT)\n"
        "  --hub-key FILE          the node key made on the hub's account page (its only\n"
        "                          line; keep it 0600)\n"
        "  --hub-fingerprint HEX   the hub certificate's SHA-256 (goblin-hub init prints\n"
        "                          it), or --hub-ca FILE\n"
        "  --hub-max-workers N     borrow at most N workers at once (default: no limit)\n"
        "  --hub-direct URL        lent workers can reach this node at URL (one of its\n"
        "                          --listen addresses as they see it: tls+tcp://, the\n"
        "                          --cert's fingerprint pinned): the hub introduces them\n"
        "                          instead of relaying their bytes\n"
        "  --workers-token-file F  workers must present a token whose salted hash is in F\n"
        "                          (lines salt:hash, see goblin_token_entry)\n"
        "  --credentials FILE      researchers' credentials (goblin-node researcher add):\n"
        "                          each client signs in with its own; a job is its\n"
        "                          owner's alone. Re-read when it changes (revocation\n"
        "                          takes effect at once)\n"
        "  --open                  no client authentication: one principal for everyone;\n"
        "                          only with loopback or ipc:// client addresses\n"
        "                          (without --credentials or --open: workers only)\n"
        "  --data-dir DIR          allow file jobs on .npy files under DIR (repeatable,\n"
        "                          up to %d; none: no file jobs). Paths may not leave them\n"
        "  --max-jobs-per-researcher N  jobs one researcher holds at once (default 16)\n"
        "  --expire-unfetched-ms N  release a researcher's unfetched jobs after N ms with\n"
        "                          no connection of theirs (default 3600000; 0: never)\n"
        "  --quarantine-file F     keep quarantined worker identities in F (read at start,\n"
        "                          rewritten at each quarantine): caught workers stay out\n"
        "  --allow-identities F    admit only the worker identities listed in F\n"
        "  --owners F              lines \"fingerprint owner\": one owner's identities count\n"
        "                          as one worker for replicas and are quarantined together\n"
        "  --probation N           a new worker identity's first N results are all checked\n"
        "                          by the node or an established worker (default 16)\n"
        "  --audit-permille N      the node rechecks N per 1000 agreeing or trusted graph\n"
        "                          results in secret (default 20)\n"
        "  --insecure-plaintext    allow plain tcp:// on a non-loopback address\n"
        "  --verify MODE           freivalds (default) | recompute | unsafe-none\n"
        "  --freivalds-tile-by-tile  judge each matmul tile alone as it arrives (default:\n"
        "                          a row panel's tiles together, less node CPU)\n"
        "  --lease-ms N            lease duration (default 30000)\n"
        "  --max-retries N         failed leases per task before its job fails (default 4)\n"
        "  --min-tasks N           client jobs: cut into at least N tasks (default: 4 per\n"
        "                          connected worker)\n"
        "  --task-memory BYTES     client jobs: memory of one task (default: the smallest\n"
        "                          budget the connected workers advertise)\n"
        "  --stats-interval-ms N   log the verification counters every N ms (0: at exit)\n"
        "  --status URL            serve a status page (/, /status.json, /metrics) on URL:\n"
        "                          http://127.0.0.1:PORT (plain http only on loopback), or\n"
        "                          https://HOST:PORT with --cert and --key\n"
        "  -v, --verbose           more logging (repeatable); --log-level LEVEL sets it:\n"
        "                          error, warn, info (default), debug\n"
        "  -h, --help, --version\n"
        "\n"
        "TLS is the default for anything that is not loopback or ipc: the node refuses\n"
        "to listen on a non-loopback tcp:// address unless --insecure-plaintext is given.\n"
        "`init DIR` writes DIR/cert.pem and DIR/key.pem (self-signed, EC P-256) and\n"
        "prints the certificate's SHA-256 fingerprint and the node, worker and client\n"
        "command lines. `researcher add` prints the new credential once (it is stored\n"
        "hashed); `token new` appends a worker join token's hash to FILE and prints the\n"
        "token once. docs/run-a-node.md walks through it.\n"
        "SIGINT/SIGTERM stop the node: running jobs end (canceled) and clients are told\n"
        "(the gateway keeps answering for up to 10 s, until each client heard).\n"
        TOOL_EXIT_CODES_HELP,
        GOBLIN_NODE_MAX_LISTEN, GOBLIN_GATEWAY_MAX_LISTEN, GOBLIN_GATEWAY_MAX_DATA_DIRS);
}

static goblin_err bad(const char *fmt, const char *arg) {
    fprintf(stderr, "goblin-node: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try goblin-node --help)\n");
    return GOBLIN_EINVAL;
}

goblin_err node_cli_parse(int argc, char **argv, node_cli *cli) {
    memset(cli, 0, sizeof *cli);
    goblin_node_params_default(&cli->node);
    goblin_gateway_params_default(&cli->gateway);
    cli->log_level = GOBLIN_LOG_INFO;
    cli->drain_ms = 10000;
    cli->init_host = "HOST";
    cli->init_port = 7700;
    int i = 1;
    if (argc > 1 && strcmp(argv[1], "init") == 0) {
        cli->action = NODE_CLI_INIT;
        i = 2;
    } else if (argc > 1 && (strcmp(argv[1], "researcher") == 0 || strcmp(argv[1], "token") == 0)) {
        bool res = strcmp(argv[1], "researcher") == 0;
        cli->action = res ? NODE_CLI_RESEARCHER : NODE_CLI_TOKEN;
        if (argc < 3) return bad("%s needs a subcommand", argv[1]);
        cli->sub = argv[2];
        if (res ? strcmp(cli->sub, "add") && strcmp(cli->sub, "list") && strcmp(cli->sub, "revoke")
                : strcmp(cli->sub, "new"))
            return bad("unknown subcommand '%s'", cli->sub);
        i = 3;
    }
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV() do { if (!v) return bad("%s needs a value", a); i++; } while (0)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli->action = NODE_CLI_HELP;
            return GOBLIN_OK;
        } else if (strcmp(a, "--version") == 0) {
            cli->action = NODE_CLI_VERSION;
            return GOBLIN_OK;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            if (cli->log_level < GOBLIN_LOG_DEBUG) cli->log_level++;
        } else if (strcmp(a, "--log-level") == 0) {
            NEEDV();
            if (!tool_parse_level(v, &cli->log_level)) return bad("unknown log level '%s'", v);
        } else if (cli->action == NODE_CLI_RESEARCHER || cli->action == NODE_CLI_TOKEN) {
            if (strcmp(a, "--credentials") == 0) { NEEDV(); cli->credentials_file = v; }
            else if (strcmp(a, "--tokens") == 0) { NEEDV(); cli->tokens_file = v; }
            else if (strcmp(a, "--admin") == 0) cli->admin = true;
            else if (a[0] != '-' && !cli->sub_arg) cli->sub_arg = a;
            else return bad("unknown argument '%s'", a);
        } else if (cli->action == NODE_CLI_INIT) {
            if (strcmp(a, "--force") == 0) cli->init_force = true;
            else if (strcmp(a, "--host") == 0) { NEEDV(); cli->init_host = v; }
            else if (strcmp(a, "--port") == 0) {
                NEEDV();
                int64_t n;
                if (!tool_parse_i64(v, 1, 65535, &n)) return bad("bad --port '%s'", v);
                cli->init_port = (int)n;
            } else if (a[0] != '-' && !cli->init_dir) cli->init_dir = a;
            else return bad("unknown argument '%s' for init", a);
        } else if (strcmp(a, "--listen") == 0) {
            NEEDV();
            if (cli->node.n_listen >= GOBLIN_NODE_MAX_LISTEN) return bad("too many --listen (%s)", v);
            cli->node.listen[cli->node.n_listen++] = v;
        } else if (strcmp(a, "--client-listen") == 0) {
            NEEDV();
            if (cli->gateway.n_listen >= GOBLIN_GATEWAY_MAX_LISTEN)
                return bad("too many --client-listen (%s)", v);
            cli->gateway.listen[cli->gateway.n_listen++] = v;
        } else if (strcmp(a, "--cert") == 0) {
            NEEDV();
            cli->cert_file = v;
        } else if (strcmp(a, "--key") == 0) {
            NEEDV();
            cli->key_file = v;
        } else if (strcmp(a, "--workers-token-file") == 0) {
            NEEDV();
            cli->token_file = v;
        } else if (strcmp(a, "--credentials") == 0) {
            NEEDV();
            cli->gateway.credentials_file = v;
        } else if (strcmp(a, "--open") == 0) {
            cli->gateway.open = true;
        } else if (strcmp(a, "--data-dir") == 0) {
            NEEDV();
            if (cli->gateway.n_data_dirs >= GOBLIN_GATEWAY_MAX_DATA_DIRS)
                return bad("too many --data-dir (%s)", v);
            cli->gateway.data_dirs[cli->gateway.n_data_dirs++] = v;
        } else if (strcmp(a, "--max-jobs-per-researcher") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, 65536, &n)) return bad("bad --max-jobs-per-researcher '%s'", v);
            cli->gateway.max_jobs_per_principal = (int32_t)n;
        } else if (strcmp(a, "--expire-unfetched-ms") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, UINT32_MAX, &n)) return bad("bad --expire-unfetched-ms '%s'", v);
            cli->gateway.expire_ms = (uint32_t)n;
        } else if (strcmp(a, "--quarantine-file") == 0) {
            NEEDV();
            cli->node.quarantine_file = v;
        } else if (strcmp(a, "--allow-identities") == 0) {
            NEEDV();
            cli->node.allow_identities_file = v;
        } else if (strcmp(a, "--owners") == 0) {
            NEEDV();
            cli->node.owners_file = v;
        } else if (strcmp(a, "--status") == 0) {
            NEEDV();
            cli->status_url = v;
        } else if (strcmp(a, "--hub") == 0) {
            NEEDV();
            cli->hub_url = v;
        } else if (strcmp(a, "--hub-key") == 0) {
            NEEDV();
            cli->hub_key_file = v;
        } else if (strcmp(a, "--hub-fingerprint") == 0) {
            NEEDV();
            cli->hub_fingerprint = v;
        } else if (strcmp(a, "--hub-direct") == 0) {
            NEEDV();
            cli->hub_direct = v;
        } else if (strcmp(a, "--hub-ca") == 0) {
            NEEDV();
            cli->hub_ca = v;
        } else if (strcmp(a, "--hub-max-workers") == 0) {
            NEEDV();
            int64_t x;
            if (!tool_parse_i64(v, 0, 1 << 20, &x)) return bad("bad --hub-max-workers '%s'", v);
            cli->hub_max_workers = (int32_t)x;
        } else if (strcmp(a, "--probation") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, 1000000, &n)) return bad("bad --probation '%s'", v);
            cli->node.probation_results = (int32_t)n;
        } else if (strcmp(a, "--audit-permille") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, 1000, &n)) return bad("bad --audit-permille '%s'", v);
            cli->node.audit_rate = (double)n / 1000.0;
        } else if (strcmp(a, "--insecure-plaintext") == 0) {
            cli->insecure_plaintext = true;
        } else if (strcmp(a, "--verify") == 0) {
            NEEDV();
            if (strcmp(v, "freivalds") == 0) cli->node.verify = GOBLIN_VERIFY_FREIVALDS;
            else if (strcmp(v, "recompute") == 0) cli->node.verify = GOBLIN_VERIFY_RECOMPUTE;
            else if (strcmp(v, "unsafe-none") == 0) cli->node.verify = GOBLIN_VERIFY_UNSAFE_NONE;
            else return bad("unknown --verify mode '%s'", v);
        } else if (strcmp(a, "--freivalds-tile-by-tile") == 0) {
            cli->node.freivalds_tile_by_tile = true;
        } else if (strcmp(a, "--lease-ms") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 1, 86400000, &n)) return bad("bad --lease-ms '%s'", v);
            cli->node.lease_ms = (uint32_t)n;
        } else if (strcmp(a, "--max-retries") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, 1000, &n)) return bad("bad --max-retries '%s'", v);
            cli->node.max_retries = (int32_t)n;
        } else if (strcmp(a, "--min-tasks") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, INT32_MAX, &n)) return bad("bad --min-tasks '%s'", v);
            cli->gateway.job.min_tasks = n;
        } else if (strcmp(a, "--task-memory") == 0) {
            NEEDV();
            if (!tool_parse_bytes(v, &cli->gateway.job.task_memory_bytes))
                return bad("bad --task-memory '%s' (bytes, with an optional K/M/G/T suffix)", v);
        } else if (strcmp(a, "--stats-interval-ms") == 0) {
            NEEDV();
            int64_t n;
            if (!tool_parse_i64(v, 0, 86400000, &n)) return bad("bad --stats-interval-ms '%s'", v);
            cli->stats_interval_ms = (uint32_t)n;
        } else {
            return bad("unknown argument '%s'", a);
        }
#undef NEEDV
    }
    if (cli->action == NODE_CLI_INIT) {
        if (!cli->init_dir) return bad("%s", "init needs a directory");
        return GOBLIN_OK;
    }
    if (cli->action == NODE_CLI_RESEARCHER) {
        if (!cli->credentials_file) return bad("%s", "researcher needs --credentials FILE");
        if (strcmp(cli->sub, "list") != 0 && !cli->sub_arg)
            return bad("researcher %s needs an email address", cli->sub);
        if (strcmp(cli->sub, "list") == 0 && cli->sub_arg)
            return bad("unexpected argument '%s'", cli->sub_arg);
        return GOBLIN_OK;
    }
    if (cli->action == NODE_CLI_TOKEN) {
        if (!cli->tokens_file) return bad("%s", "token new needs --tokens FILE");
        if (cli->sub_arg) return bad("unexpected argument '%s'", cli->sub_arg);
        return GOBLIN_OK;
    }
    if (cli->node.n_listen == 0) return bad("%s", "at least one --listen URL is needed");
    if (!!cli->cert_file != !!cli->key_file) return bad("%s", "--cert and --key go together");
    if (!!cli->hub_url != !!cli->hub_key_file) return bad("%s", "--hub and --hub-key go together");
    if (cli->hub_direct && !cli->hub_url) return bad("%s", "--hub-direct needs --hub");
    if (cli->hub_direct && tool_url_is_tls(cli->hub_direct) && !cli->cert_file)
        return bad("%s", "--hub-direct tls+tcp://... needs --cert and --key (workers pin that certificate)");
    if (cli->hub_url && tool_url_is_tls(cli->hub_url) && !cli->hub_fingerprint == !cli->hub_ca)
        return bad("%s", "--hub tls+tcp://... needs exactly one of --hub-fingerprint HEX and --hub-ca FILE");
    cli->node.log_level = cli->gateway.log_level = cli->log_level;
    if (cli->gateway.n_listen && !cli->gateway.open && !cli->gateway.credentials_file)
        return bad("%s", "--client-listen needs --credentials FILE (make them with `goblin-node "
                   "researcher add EMAIL --credentials FILE`), or --open on a loopback address");
    if (cli->gateway.open && cli->gateway.credentials_file)
        return bad("%s", "--open and --credentials exclude each other");
    for (int k = 0; cli->gateway.open && k < cli->gateway.n_listen; k++)
        if (!tool_url_is_local(cli->gateway.listen[k]))
            return bad("--open takes only loopback or ipc:// client addresses, not %s",
                       cli->gateway.listen[k]);
    /* Clients on the workers' addresses: open mode needs those local too. */
    for (int k = 0; cli->gateway.open && !cli->gateway.n_listen && k < cli->node.n_listen; k++)
        if (!tool_url_is_local(cli->node.listen[k]))
            return bad("--open serves clients on the --listen addresses, which must then be "
                       "loopback or ipc://, not %s (or give --client-listen)", cli->node.listen[k]);
    cli->gateway.cert_file = cli->cert_file;
    cli->gateway.key_file = cli->key_file;
    /* The security rule: plain tcp only on loopback unless explicitly waived; TLS
     * needs an identity. Checked for worker and client addresses alike. */
    for (int k = 0; k < cli->node.n_listen + cli->gateway.n_listen; k++) {
        const char *url = k < cli->node.n_listen ? cli->node.listen[k]
                                                  : cli->gateway.listen[k - cli->node.n_listen];
        if (tool_url_is_plain_tcp(url) && !tool_url_is_local(url) && !cli->insecure_plaintext)
            return bad("refusing to listen on %s in plain text: it is not a loopback address. "
                       "Use tls+tcp:// with --cert/--key (see `goblin-node init`), or pass "
                       "--insecure-plaintext if you really mean it", url);
        if (tool_url_is_tls(url) && !cli->cert_file)
            return bad("%s needs --cert FILE --key FILE (create them with `goblin-node init DIR`)",
                       url);
    }
    return GOBLIN_OK;
}
