/* libgoblin/base/log.h - delivering log lines to a caller's goblin_log_fn (internal). */
#ifndef GOBLIN__BASE_LOG_H
#define GOBLIN__BASE_LOG_H

#include <stdarg.h>
#include <goblin/log.h>

/** Format and deliver a log line if @p fn is set and @p lvl <= @p max. */
void goblin__logv(goblin_log_fn fn, void *user, goblin_log_level max, goblin_log_level lvl,
                  const char *fmt, va_list ap);

#endif
