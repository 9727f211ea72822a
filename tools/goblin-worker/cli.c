/* tools/goblin-worker/cli.c - argv -> worker_cli (params structs); no other logic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tool_common.h"
#include "cli.h"

void worker_cli_usage(FILE *f) {
    fprintf(f,
        "Usage: goblin-worker --connect URL [--connect URL ...] [options]\n"
        "       goblin-worker link CODE [--config-dir DIR]\n"
        "       goblin-worker --list-ops\n"
        "\n"
        "A worker of a GPU Goblin grid: dials out to one or more nodes (it needs no open\n"
        "port), takes leased tasks, computes them and sends the results back. It never\n"
        "writes task data to disk.\n"
        "\n"
        "  --connect URL        node address (repeatable, up to %d): tls+tcp://HOST:PORT,\n"
        "                       tcp://HOST:PORT, ipc:///path\n"
        "  --ca FILE            tls+tcp://: trust the node certificates this CA signed, or\n"
        "  --fingerprint HEX    tls+tcp://: accept only the node whose certificate has this\n"
        "                       SHA-256 (printed by `goblin-node init`)\n"
        "  --backend cpu|cuda   compute backend (default cpu)\n"
        "  --threads N          kernel threads (default: all cores)\n"
        "  --memory BYTES       memory for task data in all, e.g. 2G (default 1G): a quarter\n"
        "                       keeps inputs for reuse, each task gets a third of the rest\n"
        "  --keep-inputs S      drop the inputs kept in memory for reuse after S seconds\n"
        "                       without a task (default 30; 0: until evicted)\n"
        "  --token T            join token the node asks for\n"
        "  --config-dir DIR     where this installation's identity key lives (made on first\n"
        "                       start, mode 0600; the only file the worker writes); default\n"
        "                       $XDG_CONFIG_HOME/goblin, else ~/.config/goblin\n"
        "  --list-ops           print the catalogue this worker computes and exit\n"
        "  link CODE            print the line that links this installation's identity to\n"
        "                       your hub account: CODE is the link code on your account\n"
        "                       page; paste the line into its \"Link a worker\" form\n"
        "  -v, --verbose        more logging (repeatable); --log-level LEVEL sets it:\n"
        "                       error, warn, info (default), debug\n"
        "  -h, --help, --version\n"
        "\n"
        "FAULT INJECTION, FOR TESTS AND DEMOS ONLY (the worker lies on purpose so that the\n"
        "node's verification can be seen at work; never use it on a real grid):\n"
        "  --misbehave MODE[:RATE]  with probability RATE (default 1) per task:\n"
        "                       wrong (random values), scale (x 1+1e-3), nan, stale (an\n"
        "                       earlier result), swap (another task's result), truncate,\n"
        "                       silent (never answer), slow (answer late), crash (exit)\n"
        "  --misbehave-seed N   which tasks misbehave (default: from the process id)\n"
        "  --slow-ms N          delay of `slow` (default 2000)\n"
        "  --test-catalog-version N  claim another catalogue version (tests the refusal)\n"
        "\n"
        "SIGINT/SIGTERM stop the worker; its leases are abandoned so the node reissues\n"
        "them at once. It reconnects with backoff when a node goes away.\n"
        TOOL_EXIT_CODES_HELP,
        GOBLIN_WORKER_MAX_CONNECT);
}

static goblin_err bad(const char *fmt, const char *arg) {
    fprintf(stderr, "goblin-worker: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(try goblin-worker --help)\n");
    return GOBLIN_EINVAL;
}

/* The default config directory (the XDG base directory rule: $XDG_CONFIG_HOME if
 * absolute, else ~/.config) unless --config-dir gave one. */
static goblin_err default_config_dir(worker_cli *cli) {
    if (cli->worker.config_dir) return GOBLIN_OK;
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int k = -1;
    if (xdg && xdg[0] == '/') k = snprintf(cli->config_dir, sizeof cli->config_dir, "%s/goblin", xdg);
    else if (home && home[0] == '/') k = snprintf(cli->config_dir, sizeof cli->config_dir, "%s/.config/goblin", home);
    if (k < 0 || (size_t)k >= sizeof cli->config_dir)
        return bad("%s", "no config directory for the identity key: give --config-dir DIR");
    cli->worker.config_dir = cli->config_dir;
    return GOBLIN_OK;
}

/* goblin-worker link CODE [--config-dir DIR]: the identity key's directory and the code. */
static goblin_err parse_link(int argc, char **argv, worker_cli *cli) {
    cli->action = WORKER_CLI_LINK;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli->action = WORKER_CLI_HELP;
            return GOBLIN_OK;
        } else if (strcmp(a, "--config-dir") == 0) {
            if (i + 1 >= argc || !*argv[i + 1]) return bad("%s", "--config-dir needs a directory");
            cli->worker.config_dir = argv[++i];
        } else if (a[0] == '-' || cli->link_code) {
            return bad("unknown argument '%s' (goblin-worker link CODE [--config-dir DIR])", a);
        } else {
            cli->link_code = a;
        }
    }
    if (!cli->link_code) return bad("%s", "goblin-worker link needs the link code of your hub account page");
    return default_config_dir(cli);
}

goblin_err worker_cli_parse(int argc, char **argv, worker_cli *cli) {
    memset(cli, 0, sizeof *cli);
    goblin_worker_params_default(&cli->worker);
    cli->log_level = GOBLIN_LOG_INFO;
    cli->slow_ms = -1;
    if (argc >= 2 && strcmp(argv[1], "link") == 0) return parse_link(argc, argv, cli);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
#define NEEDV() do { if (!v) return bad("%s needs a value", a); i++; } while (0)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli->action = WORKER_CLI_HELP;
            return GOBLIN_OK;
        } else if (strcmp(a, "--version") == 0) {
            cli->action = WORKER_CLI_VERSION;
            return GOBLIN_OK;
        } else if (strcmp(a, "--list-ops") == 0) {
            cli->action = WORKER_CLI_LIST_OPS;
            return GOBLIN_OK;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            if (cli->log_level < GOBLIN_LOG_DEBUG) cli->log_level++;
        } else if (strcmp(a, "--log-level") == 0) {
            NEEDV();
            if (!tool_parse_level(v, &cli->log_level)) return bad("unknown log level '%s'", v);
        } else if (strcmp(a, "--connect") == 0) {
            NEEDV();
            if (cli->worker.n_connect >= GOBLIN_WORKER_MAX_CONNECT)
                return bad("too many --connect (%s)", v);
            cli->worker.connect[cli->worker.n_connect++] = v;
        } else if (strcmp(a, "--ca") == 0) {
            NEEDV();
            cli->ca_file = v;
        } else if (strcmp(a, "--fingerprint") == 0) {
            NEEDV();
            char hex[GOBLIN_TLS_FINGERPRINT_SIZE];
            if (goblin_tls_fingerprint_normalize(v, hex) != GOBLIN_OK)
                return bad("--fingerprint '%s' is not a SHA-256 fingerprint (64 hex digits)", v);
            cli->fingerprint = v;
        } else if (strcmp(a, "--backend") == 0) {
            NEEDV();
            if (strcmp(v, "cpu") == 0) {
                goblin_worker_params d;
                goblin_worker_params_default(&d);
                cli->worker.backend = d.backend == GOBLIN_BACKEND_CUDA ? GOBLIN_BACKEND_BLIS : d.backend;
            } else if (strcmp(v, "cuda") == 0) {
                cli->worker.backend = GOBLIN_BACKEND_CUDA;
            } else if (strcmp(v, "ref") == 0) {
                cli->worker.backend = GOBLIN_BACKEND_REF;
            } else {
                return bad("unknown --backend '%s' (cpu or cuda)", v);
            }
        } else if (strcmp(a, "--threads") == 0) {
            NEEDV();
            if (!tool_parse_i64(v, 0, 65536, &n)) return bad("bad --threads '%s'", v);
            cli->worker.threads = (int32_t)n;
        } else if (strcmp(a, "--memory") == 0) {
            NEEDV();
            if (!tool_parse_bytes(v, &cli->worker.memory_bytes) || cli->worker.memory_bytes == 0)
                return bad("bad --memory '%s' (bytes, with an optional K/M/G/T suffix)", v);
            cli->worker.cache_bytes = cli->worker.memory_bytes / 4;
        } else if (strcmp(a, "--keep-inputs") == 0) {
            NEEDV();
            if (!tool_parse_i64(v, 0, 4000000, &n)) return bad("bad --keep-inputs '%s' (seconds, 0 .. 4000000)", v);
            cli->worker.cache_idle_ms = (uint32_t)(n * 1000);
        } else if (strcmp(a, "--token") == 0) {
            NEEDV();
            if (!*v || strlen(v) > GOBLIN_TOKEN_MAX_BYTES) return bad("bad --token length%s", "");
            cli->token = v;
        } else if (strcmp(a, "--misbehave") == 0) {
            NEEDV();
            if (goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_PARSE, v, &cli->misbehave, &cli->misbehave_rate))
                return bad("bad --misbehave '%s' (MODE[:RATE], see --help)", v);
        } else if (strcmp(a, "--misbehave-seed") == 0) {
            NEEDV();
            if (!tool_parse_i64(v, 0, INT64_MAX, &n)) return bad("bad --misbehave-seed '%s'", v);
            cli->misbehave_seed = (uint64_t)n;
            cli->seed_given = true;
        } else if (strcmp(a, "--test-catalog-version") == 0) {
            NEEDV();
            if (!tool_parse_i64(v, 1, UINT32_MAX, &n)) return bad("bad --test-catalog-version '%s'", v);
            cli->catalog_version = (uint32_t)n;
        } else if (strcmp(a, "--config-dir") == 0) {
            NEEDV();
            if (!*v) return bad("%s", "--config-dir needs a directory");
            cli->worker.config_dir = v;
        } else if (strcmp(a, "--slow-ms") == 0) {
            NEEDV();
            if (!tool_parse_i64(v, 0, 3600000, &n)) return bad("bad --slow-ms '%s'", v);
            cli->slow_ms = n;
        } else {
            return bad("unknown argument '%s'", a);
        }
#undef NEEDV
    }
    if (cli->worker.n_connect == 0) return bad("%s", "at least one --connect URL is needed");
    if (cli->ca_file && cli->fingerprint) return bad("%s", "give --ca or --fingerprint, not both");
    bool any_tls = false;
    for (int k = 0; k < cli->worker.n_connect; k++) any_tls |= tool_url_is_tls(cli->worker.connect[k]);
    if (any_tls && !cli->ca_file && !cli->fingerprint)
        return bad("%s", "a tls+tcp:// node needs --ca FILE or --fingerprint HEX");
    goblin_err e = default_config_dir(cli);
    if (e) return e;
    cli->worker.log_level = cli->log_level;
    if (cli->token) {
        cli->worker.join_token = (const uint8_t *)cli->token;
        cli->worker.token_len = (uint32_t)strlen(cli->token);
    }
    return GOBLIN_OK;
}
