/* scheduler.h - internals shared by the node, the worker and the grid. */
#ifndef GOBLIN_SCHEDULER_H
#define GOBLIN_SCHEDULER_H

#include <stdarg.h>
#include <stdint.h>

#include "goblin/graph.h"
#include "goblin/node.h"

/** Monotonic milliseconds. */
int64_t goblin__now_ms(void);
/** A secret random number (getrandom), for Freivalds seeds. */
uint64_t goblin__secret_u64(void);
/** Format and deliver a log line if @p fn is set and @p lvl <= @p max. */
void goblin__logv(goblin_log_fn fn, void *user, goblin_log_level max, goblin_log_level lvl,
                  const char *fmt, va_list ap);
/** The graph of one matmul task: inputs [rows, kn] and [kn, cols], one output. */
goblin_err goblin__matmul_graph(goblin_dtype dt, int64_t rows, int64_t kn, int64_t cols,
                                goblin_graph **out);

#endif
