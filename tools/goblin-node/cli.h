/* tools/goblin-node/cli.h - goblin-node's command line as params structs. */
#ifndef GOBLIN_NODE_CLI_H
#define GOBLIN_NODE_CLI_H

#include <goblin/goblin.h>

typedef enum node_cli_action {
    NODE_CLI_RUN = 0,
    NODE_CLI_INIT = 1,
    NODE_CLI_HELP = 2,
    NODE_CLI_VERSION = 3,
    NODE_CLI_RESEARCHER = 4, /* researcher add|list|revoke */
    NODE_CLI_TOKEN = 5,      /* token new */
} node_cli_action;

typedef struct node_cli {
    node_cli_action action;
    goblin_node_params node;
    goblin_gateway_params gateway; /* used when gateway.n_listen > 0 */
    const char *cert_file, *key_file;
    const char *token_file;
    bool insecure_plaintext;
    goblin_log_level log_level;
    uint32_t stats_interval_ms;    /* log the counters this often (0: only at exit) */
    uint32_t drain_ms;             /* on stop, tell clients for this long */
    /* --hub: borrow workers through goblin-hub (goblin_node_hub_connect) */
    const char *hub_url, *hub_key_file, *hub_fingerprint, *hub_ca;
    const char *hub_direct; /* --hub-direct: where lent workers can dial this node */
    int32_t hub_max_workers;
    const char *status_url;        /* --status: the status page (goblin_node_status_listen) */
    /* init */
    const char *init_dir;
    bool init_force;
    const char *init_host;         /* host name put in the printed command lines */
    int init_port;
    /* researcher / token */
    const char *sub;               /* "add", "list", "revoke", "new" */
    const char *sub_arg;           /* the email (add), email or id (revoke) */
    bool admin;                    /* researcher add --admin */
    const char *credentials_file;  /* --credentials */
    const char *tokens_file;       /* token new --tokens */
} node_cli;

/** Parse argv into @p cli. On error prints why to stderr and returns GOBLIN_EINVAL. */
goblin_err node_cli_parse(int argc, char **argv, node_cli *cli);
void node_cli_usage(FILE *f);

#endif
