/* libgoblin/worker/link.c - goblin_worker_link_statement: what a volunteer pastes into
 * a hub account to link this installation's worker identity to it (net/worker_link.h
 * has the statement's form and the hub's check). */
#include <string.h>

#include <goblin/worker.h>

#include "base/errf.h"
#include "net/worker_key.h"
#include "net/worker_link.h"

_Static_assert(GOBLIN_WORKER_LINK_STATEMENT_SIZE == GOBLIN__WLINK_STATEMENT_SIZE, "statement size");

goblin_err goblin_worker_link_statement(const char *config_dir, const char *code, char *out, size_t cap,
                                        char *identity_out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, mcap);
    if (!config_dir || !*config_dir || !code || !out)
        return goblin__errf(msg, mcap, GOBLIN_EINVAL, "a config directory, a link code and out are required");
    if (cap < GOBLIN_WORKER_LINK_STATEMENT_SIZE)
        return goblin__errf(msg, mcap, GOBLIN_EINVAL, "out needs %d bytes", GOBLIN_WORKER_LINK_STATEMENT_SIZE);
    /* Upper-case digits, as someone may type them, mean the same code. */
    char low[GOBLIN__WLINK_CODE_LEN + 1];
    size_t n = strnlen(code, sizeof low);
    for (size_t i = 0; i < n && i < GOBLIN__WLINK_CODE_LEN; i++)
        low[i] = (char)(code[i] >= 'A' && code[i] <= 'F' ? code[i] + 32 : code[i]);
    low[n < GOBLIN__WLINK_CODE_LEN ? n : GOBLIN__WLINK_CODE_LEN] = 0;
    /* Checked before the key is touched: a typo must not make a key in a new directory. */
    if (n > GOBLIN__WLINK_CODE_LEN || !goblin__wlink_code_valid(low))
        return goblin__errf(msg, mcap, GOBLIN_EINVAL, "a link code is %d lowercase hex digits; copy it from "
                            "your account page on the hub", GOBLIN__WLINK_CODE_LEN);
    goblin__wkey *k = NULL;
    bool created = false;
    goblin_err e = goblin__wkey_load_or_create(config_dir, &k, &created, msg, mcap);
    if (e) return e;
    char line[GOBLIN__WLINK_STATEMENT_SIZE];
    if (!(e = goblin__wlink_make(k, low, line, sizeof line, msg, mcap))) {
        memcpy(out, line, strlen(line) + 1);
        if (identity_out) memcpy(identity_out, goblin__wkey_fingerprint(k), GOBLIN__WKEY_FP_HEX);
    }
    goblin__wkey_free(k);
    return e;
}
