/* goblin/log.h - log lines from the library's long-running objects (node, worker,
 * client, gateway): levels and the callback that receives them. */
#ifndef GOBLIN_LOG_H
#define GOBLIN_LOG_H

#include "api.h"

GOBLIN_BEGIN_DECLS

typedef enum goblin_log_level {
    GOBLIN_LOG_ERROR = 0,
    GOBLIN_LOG_WARN = 1,
    GOBLIN_LOG_INFO = 2,
    GOBLIN_LOG_DEBUG = 3,
    GOBLIN_LOG_LEVEL_COUNT
} goblin_log_level;

/** Receives one log line (no trailing newline; valid during the call only). Called
 *  from the library's threads; must not call back into the object that logs. */
typedef void (*goblin_log_fn)(void *user, goblin_log_level level, const char *line);

/** "error", "warn", "info", "debug"; "invalid" if out of range. */
GOBLIN_API const char *goblin_log_level_name(goblin_log_level level);

GOBLIN_END_DECLS

#endif
