/* libgoblin/service/principal_impl.h - a credentials file held in memory (internal):
 * what a gateway authenticates against, re-read when the file changes. */
#ifndef GOBLIN__SERVICE_PRINCIPAL_IMPL_H
#define GOBLIN__SERVICE_PRINCIPAL_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "goblin/principal.h"

typedef struct goblin__principal {
    goblin_principal_info info;
    char salt[33];
    char hash[65];
} goblin__principal;

typedef struct goblin__principal_table {
    char *path;
    /* what the file was when read: re-read when any of these change */
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
    bool loaded;
    goblin__principal *e;
    int32_t n;
} goblin__principal_table;

/** Read @p t->path again if it changed since the last read (or was never read). On an
 *  error the table keeps what it had; GOBLIN_EIO/EFORMAT/ENOMEM with (msg, cap). A
 *  missing file is an empty table. */
goblin_err goblin__principals_refresh(goblin__principal_table *t, char *msg, size_t cap);
/** The entry with id @p id, or NULL. */
const goblin__principal *goblin__principals_find(const goblin__principal_table *t, const char *id);
/** Whose is @p cred (@p len bytes, not NUL-terminated)? GOBLIN_OK with *out, or
 *  GOBLIN_EAUTH. The secret is compared in constant time. */
goblin_err goblin__principals_authenticate(const goblin__principal_table *t, const uint8_t *cred,
                                           size_t len, goblin_principal_info *out);
void goblin__principals_clear(goblin__principal_table *t);

#endif
