/* libgoblin/node/matmul_graph.h - the graph of one matmul task (internal). */
#ifndef GOBLIN__NODE_MATMUL_GRAPH_H
#define GOBLIN__NODE_MATMUL_GRAPH_H

#include "goblin/graph.h"

/** The graph of one matmul task: inputs [rows, kn] and [kn, cols], one output. */
goblin_err goblin__matmul_graph(goblin_dtype dt, int64_t rows, int64_t kn, int64_t cols,
                                goblin_graph **out);

#endif
