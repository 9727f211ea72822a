/* libgoblin/base/log.c - log levels and line delivery. */
#include "log.h"

#include <stdio.h>

const char *goblin_log_level_name(goblin_log_level level) {
    static const char *n[] = {"error", "warn", "info", "debug"};
    return (unsigned)level < GOBLIN_LOG_LEVEL_COUNT ? n[level] : "invalid";
}

void goblin__logv(goblin_log_fn fn, void *user, goblin_log_level max, goblin_log_level lvl,
                  const char *fmt, va_list ap) {
    if (!fn || lvl > max) return;
    char line[640];
    vsnprintf(line, sizeof line, fmt, ap);
    fn(user, lvl, line);
}
