/* tools/goblin-worker/main.c - goblin-worker: parse the command line, then serve
 * through goblin_worker_run until SIGINT/SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/tool_common.h"
#include "cli.h"

static goblin_worker *the_worker;

static void on_signal(int sig) {
    (void)sig;
    /* goblin_worker_stop only sets a flag: safe in a signal handler. */
    if (the_worker) goblin_worker_stop(the_worker);
}

static int list_ops(void) {
    int n = 0;
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        if (goblin_op_get_info((goblin_op)op, &in) != GOBLIN_OK) continue;
        printf("%-24s %-12s %s\n", in.name, in.group, in.summary);
        n++;
    }
    printf("# %d ops, catalogue version %u\n", n, goblin_catalog_version());
    return TOOL_EXIT_OK;
}

/* goblin-worker link CODE: the statement on stdout (one line, for the account page's
 * form), the identity it links on stderr. */
static int print_link_statement(const worker_cli *cli) {
    char line[GOBLIN_WORKER_LINK_STATEMENT_SIZE], id[65];
    goblin_errbuf err;
    goblin_err e = goblin_worker_link_statement(cli->worker.config_dir, cli->link_code, line, sizeof line, id, &err);
    if (e) {
        fprintf(stderr, "goblin-worker: %s\n", err.message[0] ? err.message : goblin_strerror(e));
        return tool_exit_code(e);
    }
    printf("%s\n", line);
    fprintf(stderr, "goblin-worker: paste the line above into \"Link a worker\" on your account page; it links\n"
                    "worker identity %s (key in %s)\n", id, cli->worker.config_dir);
    return TOOL_EXIT_OK;
}

/* Node-facing TLS trust: a CA file or a pinned fingerprint. */
static goblin_err set_worker_tls(worker_cli *cli) {
    if (!cli->ca_file && !cli->fingerprint) return GOBLIN_OK;
    /* The command line already checked that at most one is given. */
    cli->worker.tls_ca_file = cli->ca_file;
    cli->worker.tls_fingerprint = cli->fingerprint;
    return GOBLIN_OK;
}

/* --misbehave and the other test flags, through the library's test-control entry point. */
static goblin_err set_fault_injection(worker_cli *cli, goblin_worker *w) {
    goblin_err e = GOBLIN_OK;
    if (cli->misbehave != GOBLIN_MISBEHAVE_NONE) {
        if (!cli->seed_given) cli->misbehave_seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
        const char *name = NULL;
        goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_NAME, cli->misbehave, &name);
        tool_logf(cli->log_level, GOBLIN_LOG_WARN,
                  "FAULT INJECTION: this worker misbehaves (%s, rate %.3g) for tests and demos",
                  name ? name : "?", cli->misbehave_rate);
        e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, w, cli->misbehave, cli->misbehave_rate,
                                cli->misbehave_seed);
        /* A dedicated process may really die for `crash`. */
        if (!e) e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_CRASH, w, (void (*)(void *))NULL, (void *)NULL, 1);
    }
    if (!e && cli->slow_ms >= 0)
        e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_SLOW_MS, w, (unsigned)cli->slow_ms);
    if (!e && cli->catalog_version)
        e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_CATALOG_VERSION, w, (unsigned)cli->catalog_version);
    return e;
}

int main(int argc, char **argv) {
    tool_name = "goblin-worker";
    worker_cli cli;
    goblin_err e = worker_cli_parse(argc, argv, &cli);
    if (e) return tool_exit_code(e);
    switch (cli.action) {
    case WORKER_CLI_HELP: worker_cli_usage(stdout); return TOOL_EXIT_OK;
    case WORKER_CLI_VERSION:
        printf("goblin-worker %s (catalogue %u, wire protocol %d)\n", GOBLIN_VERSION_STRING,
               goblin_catalog_version(), GOBLIN_PROTOCOL_VERSION);
        return TOOL_EXIT_OK;
    case WORKER_CLI_LIST_OPS: return list_ops();
    case WORKER_CLI_LINK: return print_link_statement(&cli);
    default: break;
    }
    if ((e = set_worker_tls(&cli))) return tool_exit_code(e);
    cli.worker.log = tool_log;
    /* A dedicated process: large message buffers are kept for reuse (alloc.h). */
    goblin_err te = goblin_tune_allocator_for_service(0);
    if (te && te != GOBLIN_ENOTSUP)
        tool_logf(cli.log_level, GOBLIN_LOG_WARN, "allocator settings not applied: %s", goblin_strerror(te));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    signal(SIGPIPE, SIG_IGN);

    if ((e = goblin_worker_new(&the_worker, &cli.worker))) {
        tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot create the worker: %s", goblin_strerror(e));
        return tool_exit_code(e);
    }
    tool_logf(cli.log_level, GOBLIN_LOG_INFO, "worker identity %s (key in %s)", goblin_worker_identity(the_worker),
              cli.worker.config_dir);
    if ((e = set_fault_injection(&cli, the_worker))) {
        tool_logf(cli.log_level, GOBLIN_LOG_ERROR, "cannot set fault injection: %s", goblin_strerror(e));
        goblin_worker_free(the_worker);
        return tool_exit_code(e);
    }
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    e = goblin_worker_run(the_worker);
    goblin_worker_stats s;
    goblin_worker_stats_get(the_worker, &s);
    tool_logf(cli.log_level, e ? GOBLIN_LOG_ERROR : GOBLIN_LOG_INFO,
              "worker ended: %s; tasks done %lld failed %lld misbehaved %lld connects %lld",
              e ? goblin_strerror(e) : "stopped", (long long)s.tasks_done, (long long)s.tasks_failed,
              (long long)s.misbehaved, (long long)s.connects);
    goblin_worker_free(the_worker);
    return tool_exit_code(e);
}
