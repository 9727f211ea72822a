/* tools/goblin-hub/cli.h - goblin-hub's command line as a struct. */
#ifndef GOBLIN_HUB_CLI_H
#define GOBLIN_HUB_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum hub_cmd {
    HUB_CMD_INIT,
    HUB_CMD_SERVE,
    HUB_CMD_LIST,
    HUB_CMD_APPROVE,
    HUB_CMD_DENY,
    HUB_CMD_QLIST, /* quarantines list [--all] */
    HUB_CMD_QLIFT, /* quarantines lift ID */
} hub_cmd;

typedef struct hub_cli {
    hub_cmd cmd;
    const char *dir;
    const char *admin;    /* init --admin */
    const char *dns_name; /* init --dns */
    const char *note;     /* approve/deny --note */
    bool all;             /* list --all */
    int64_t id;           /* approve/deny */
    bool help, version;
} hub_cli;

void hub_cli_usage(FILE *f);
/* 0: ok; 2: usage error (printed to stderr). */
int hub_cli_parse(int argc, char **argv, hub_cli *out);

#endif
