/* tools/goblin-worker/cli.h - goblin-worker's command line as params structs. */
#ifndef GOBLIN_WORKER_CLI_H
#define GOBLIN_WORKER_CLI_H

#include <goblin/goblin.h>
#include <stdio.h>

typedef enum worker_cli_action {
    WORKER_CLI_RUN = 0,
    WORKER_CLI_HELP = 1,
    WORKER_CLI_VERSION = 2,
    WORKER_CLI_LIST_OPS = 3,
    WORKER_CLI_LINK = 4, /* goblin-worker link CODE: print the link statement */
} worker_cli_action;

typedef struct worker_cli {
    worker_cli_action action;
    goblin_worker_params worker;
    const char *ca_file;
    const char *fingerprint;
    const char *token;
    /* Fault injection (--misbehave, --slow-ms, --test-catalog-version): applied by main
     * through goblin_test_control once the worker exists. */
    goblin_misbehave misbehave;
    double misbehave_rate;
    uint64_t misbehave_seed;
    bool seed_given;
    int64_t slow_ms;           /* -1: not given (the library's default) */
    uint32_t catalog_version;  /* 0: the real one */
    goblin_log_level log_level;
    char config_dir[4096];     /* the default config directory, when --config-dir is not given */
    const char *link_code;     /* WORKER_CLI_LINK: the account's link code */
} worker_cli;

/** Parse argv into @p cli. On error prints why to stderr and returns GOBLIN_EINVAL. */
goblin_err worker_cli_parse(int argc, char **argv, worker_cli *cli);
void worker_cli_usage(FILE *f);

#endif
