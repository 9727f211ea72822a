/* tools/goblin-node/main.c - goblin-node: parse the command line, then run a node
 * (and a client gateway) through the library until SIGINT/SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/tool_common.h"
#include "cli.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int run_init(const node_cli *cli) {
    goblin_tls_init_params ip;
    goblin_tls_init_params_default(&ip);
    ip.force = cli->init_force;
    const char *names[1] = {cli->init_host};
    if (strcmp(cli->init_host, "HOST") != 0) {
        ip.dns_names = names;
        ip.n_dns_names = 1;
    }
    goblin_tls_identity id;
    goblin_errbuf why_eb = {0};
    goblin_err e = goblin_tls_init_dir(cli->init_dir, &ip, &id, &why_eb);
    if (e) {
        fprintf(stderr, "goblin-node: init %s: %s (%s)\n", cli->init_dir, why_eb.message, goblin_strerror(e));
        return tool_exit_code(e);
    }
    printf("identity written:\n  certificate %s\n  private key %s\n", id.cert_path, id.key_path);
    printf("fingerprint (SHA-256): %s\n\n", id.fingerprint);
    printf("1. make a worker join token (printed once; give it to your volunteers):\n"
           "  goblin-node token new --tokens %s/workers.tokens\n\n", cli->init_dir);
    printf("2. make a credential for each researcher (printed once):\n"
           "  goblin-node researcher add EMAIL --credentials %s/researchers\n\n", cli->init_dir);
    printf("3. start the node (workers and clients both connect to port %d):\n"
           "  goblin-node --listen tls+tcp://0.0.0.0:%d \\\n"
           "    --cert %s --key %s \\\n"
           "    --workers-token-file %s/workers.tokens --credentials %s/researchers\n\n",
           cli->init_port, cli->init_port, id.cert_path, id.key_path, cli->init_dir,
           cli->init_dir);
    printf("4. start a worker (on each volunteer's machine):\n"
           "  goblin-worker --connect tls+tcp://%s:%d --fingerprint %s --token TOKEN\n\n",
           cli->init_host, cli->init_port, id.fingerprint);
    printf("5. connect from Python (the researcher's machine):\n"
           "  import goblin\n"
           "  grid = goblin.connect(\"tls+tcp://%s:%d\", fingerprint=\"%s\",\n"
           "                        credential=\"gbr1_...\")\n"
           "  or from C/the shell: goblin-client --connect tls+tcp://%s:%d --fingerprint %s "
           "--credential gbr1_... A.npy B.npy C.npy\n",
           cli->init_host, cli->init_port, id.fingerprint, cli->init_host, cli->init_port,
           id.fingerprint);
    return TOOL_EXIT_OK;
}

static int run_researcher(const node_cli *cli) {
    goblin_errbuf eb = {0};
    goblin_err e;
    if (strcmp(cli->sub, "add") == 0) {
        char cred[GOBLIN_CREDENTIAL_SIZE];
        goblin_principal_info info;
        e = goblin_principal_add(cli->credentials_file, cli->sub_arg,
                                 cli->admin ? GOBLIN_ROLE_ADMIN : GOBLIN_ROLE_RESEARCHER, cred, &info,
                                 &eb);
        if (e) {
            fprintf(stderr, "goblin-node: researcher add: %s\n", eb.message);
            return tool_exit_code(e);
        }
        printf("%s (%s, id %s) added to %s.\nTheir credential, shown this once (the node keeps "
               "only its hash):\n\n  %s\n\nThey pass it as goblin.connect(url, ..., "
               "credential=\"...\") or in the environment variable GOBLIN_CREDENTIAL.\n",
               info.email, goblin_role_name(info.role), info.id, cli->credentials_file, cred);
        memset(cred, 0, sizeof cred);
        return TOOL_EXIT_OK;
    }
    if (strcmp(cli->sub, "revoke") == 0) {
        if ((e = goblin_principal_revoke(cli->credentials_file, cli->sub_arg, &eb))) {
            fprintf(stderr, "goblin-node: researcher revoke: %s\n", eb.message);
            return tool_exit_code(e);
        }
        printf("%s revoked: its credential no longer works on a node reading %s.\n", cli->sub_arg,
               cli->credentials_file);
        return TOOL_EXIT_OK;
    }
    int32_t n = 0;
    if ((e = goblin_principal_list(cli->credentials_file, NULL, 0, &n, &eb))) {
        fprintf(stderr, "goblin-node: researcher list: %s\n", eb.message);
        return tool_exit_code(e);
    }
    goblin_principal_info *all = n ? calloc((size_t)n, sizeof *all) : NULL;
    if (n && !all) return tool_exit_code(GOBLIN_ENOMEM);
    if (n && (e = goblin_principal_list(cli->credentials_file, all, n, &n, &eb))) {
        fprintf(stderr, "goblin-node: researcher list: %s\n", eb.message);
        free(all);
        return tool_exit_code(e);
    }
    for (int32_t i = 0; i < n; i++)
        printf("%s  %-10s  %s\n", all[i].id, goblin_role_name(all[i].role), all[i].email);
    free(all);
    return TOOL_EXIT_OK;
}

/* token new: a worker join token, its salted hash appended to the token file. */
static int run_token(const node_cli *cli) {
    char tok[GOBLIN_TOKEN_SIZE], line[GOBLIN_TOKEN_ENTRY_SIZE];
    goblin_err e = goblin_token_generate(tok);
    if (!e) e = goblin_token_entry(tok, line);
    if (e) {
        fprintf(stderr, "goblin-node: token new: %s\n", goblin_strerror(e));
        return tool_exit_code(e);
    }
    int fd = open(cli->tokens_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    bool ok = f && fprintf(f, "%s\n", line) > 0;
    ok = f && fclose(f) == 0 && ok;
    if (!f && fd >= 0) close(fd);
    if (!ok) {
        fprintf(stderr, "goblin-node: token new: cannot append to %s: %s\n", cli->tokens_file,
                strerror(errno));
        memset(tok, 0, sizeof tok);
        return tool_exit_code(GOBLIN_EIO);
    }
    printf("A worker join token, shown this once (%s keeps only its salted hash; delete its "
           "line there to revoke it):\n\n  %s\n\nWorkers pass it as goblin-worker --token %s\n",
           cli->tokens_file, tok, tok);
    memset(tok, 0, sizeof tok);
    return TOOL_EXIT_OK;
}

/* Worker-facing TLS: the node listens with the identity given on the command line. */
static goblin_err set_node_tls(node_cli *cli) {
    bool any_tls = false;
    for (int i = 0; i < cli->node.n_listen; i++) any_tls |= tool_url_is_tls(cli->node.listen[i]);
    /* An https status page is served with the node's certificate too. */
    any_tls |= cli->status_url && !strncmp(cli->status_url, "https://", 8);
    if (!any_tls) return GOBLIN_OK;
    goblin_tls_identity id;
    goblin_errbuf why_eb = {0};
    goblin_err e = goblin_tls_identity_load(cli->cert_file, cli->key_file, &id, &why_eb);
    if (e) {
        tool_logf(cli->log_level, GOBLIN_LOG_ERROR, "identity: %s", why_eb.message);
        return e;
    }
    tool_logf(cli->log_level, GOBLIN_LOG_INFO, "identity %s, fingerprint %s", id.cert_path,
              id.fingerprint);
    cli->node.cert_file = cli->cert_file;
    cli->node.key_file = cli->key_file;
    return GOBLIN_OK;
}

static void log_stats(goblin_node *node, goblin_log_level max) {
    goblin_node_stats s;
    goblin_node_stats_get(node, &s);
    tool_logf(max, GOBLIN_LOG_INFO,
              "counters: issued %lld completed %lld accepted %lld rejected %lld reissued %lld "
              "speculative %lld duplicate %lld late %lld escalated %lld rechecked %lld "
              "workers connected %lld seen %lld quarantined %lld refused %lld peers dropped %lld "
              "row panels judged at once %lld (not accepted at once %lld) "
              "verifying %.3f s (CPU %.3f s)",
              (long long)s.tasks_issued, (long long)s.tasks_completed,
              (long long)s.results_accepted, (long long)s.results_rejected,
              (long long)s.tasks_reissued, (long long)s.tasks_speculative,
              (long long)s.results_duplicate, (long long)s.results_late,
              (long long)s.results_escalated, (long long)s.rechecked,
              (long long)s.workers_connected, (long long)s.workers_seen,
              (long long)s.workers_quarantined, (long long)s.workers_refused,
              (long long)s.peers_dropped, (long long)s.freivalds_row_panels,
              (long long)s.freivalds_row_fallbacks, (double)s.verify_ns * 1e-9, (double)s.verify_cpu_ns * 1e-9);
}

int main(int argc, char **argv) {
    tool_name = "goblin-node";
    node_cli cli;
    goblin_err e = node_cli_parse(argc, argv, &cli);
    if (e) return tool_exit_code(e);
    if (cli.action == NODE_CLI_HELP) {
        node_cli_usage(stdout);
        return TOOL_EXIT_OK;
    }
    if (cli.action == NODE_CLI_VERSION) {
        printf("goblin-node %s (catalogue %u, wire protocol %d)\n", GOBLIN_VERSION_STRING,
               goblin_catalog_version(), GOBLIN_PROTOCOL_VERSION);
        return TOOL_EXIT_OK;
    }
    if (cli.action == NODE_CLI_INIT) return run_init(&cli);
    if (cli.action == NODE_CLI_RESEARCHER) return run_researcher(&cli);
    if (cli.action == NODE_CLI_TOKEN) return run_token(&cli);

    /* A file of salted hashes (tls.h): the node never holds the tokens themselves. */
    cli.node.token_file = cli.token_file;
    if ((e = set_node_tls(&cli))) return tool_exit_code(e);
    cli.node.insecure_plaintext = cli.insecure_plaintext;
    cli.node.log = tool_log;
    /* A dedicated process: large message buffers are kept for reuse (alloc.h). */
    goblin_err te = goblin_tune_allocator_for_service(0);
    if (te && te != GOBLIN_ENOTSUP)
        tool_logf(cli.log_level, GOBLIN_LOG_WARN, "allocator settings not applied: %s", goblin_strerror(te));
    cli.gateway.log = tool_log;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* Only the first signal asks for an orderly stop; a second one ends the process
     * at once, should the stop itself hang (as it did when nng's reaper was wedged). */
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    goblin_node *node = NULL;
    goblin_gateway *gw = NULL;
    if ((e = goblin_node_new(&node, &cli.node))) {
        tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot create the node: %s", goblin_strerror(e));
        return tool_exit_code(e);
    }
    if ((e = goblin_node_start(node))) {
        tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot start the node: %s", goblin_strerror(e));
        goblin_node_free(node);
        return tool_exit_code(e);
    }
    if (cli.gateway.n_listen > 0 || cli.gateway.open || cli.gateway.credentials_file) {
        if ((e = goblin_gateway_new(&gw, node, &cli.gateway)) || (e = goblin_gateway_start(gw))) {
            tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot start the client gateway: %s",
                      goblin_strerror(e));
            goblin_gateway_free(gw);
            goblin_node_free(node);
            return tool_exit_code(e);
        }
    }
    if (cli.hub_url) {
        char key[GOBLIN_NODE_HUB_KEY_SIZE];
        if ((e = goblin_node_hub_key_read(cli.hub_key_file, key))) {
            tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot read the node key %s: %s", cli.hub_key_file,
                      goblin_strerror(e));
        } else {
            goblin_node_hub_params hp;
            goblin_node_hub_params_default(&hp);
            hp.url = cli.hub_url;
            hp.key = key;
            hp.fingerprint = cli.hub_fingerprint;
            hp.ca_file = cli.hub_ca;
            hp.max_workers = cli.hub_max_workers;
            hp.direct_url = cli.hub_direct;
            e = goblin_node_hub_connect(node, &hp);
            memset(key, 0, sizeof key);
            if (e)
                tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "the hub %s did not take this node: %s", cli.hub_url,
                          goblin_strerror(e));
        }
        if (e) {
            goblin_gateway_free(gw);
            goblin_node_free(node);
            return tool_exit_code(e);
        }
    }
    if (cli.status_url && (e = goblin_node_status_listen(node, cli.status_url))) {
        tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot serve the status page on %s: %s", cli.status_url,
                  goblin_strerror(e));
        goblin_gateway_free(gw);
        goblin_node_free(node);
        return tool_exit_code(e);
    }
    tool_logf(cli.log_level, GOBLIN_LOG_INFO, "node %s running (catalogue %u); SIGINT/SIGTERM stop it",
              GOBLIN_VERSION_STRING, goblin_catalog_version());

    struct timespec last;
    clock_gettime(CLOCK_MONOTONIC, &last);
    while (!stop_requested) {
        usleep(100 * 1000);
        if (cli.stats_interval_ms) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            int64_t ms = (now.tv_sec - last.tv_sec) * 1000 + (now.tv_nsec - last.tv_nsec) / 1000000;
            if (ms >= cli.stats_interval_ms) {
                log_stats(node, cli.log_level);
                last = now;
            }
        }
    }
    tool_logf(cli.log_level, GOBLIN_LOG_INFO, "stopping");
    /* The gateway ends its clients' running jobs (canceled) and keeps answering for a
     * moment so that clients polling their jobs learn that they ended (on the node's
     * socket, so the node stops after it). */
    goblin_gateway_stop(gw, cli.drain_ms);
    goblin_node_stop(node);
    log_stats(node, cli.log_level);
    goblin_gateway_free(gw);
    goblin_node_free(node);
    tool_logf(cli.log_level, GOBLIN_LOG_INFO, "stopped");
    return TOOL_EXIT_OK;
}
