/* goblin/autodiff.h - reverse-mode automatic differentiation of graphs.
 *
 * goblin_graph_backward appends to the SAME graph the nodes that compute the
 * gradient of a scalar loss with respect to chosen nodes (usually inputs that
 * hold parameters). The result is an ordinary graph: mark the gradient nodes as
 * outputs and evaluate, serialize or partition it like any other.
 *
 * Gradients are accumulated with ADD where a node feeds several consumers, and
 * broadcasting is undone with SUM (keepdim) + RESHAPE. Rules are composed from
 * catalogue ops where that is natural; convolution, pooling, batch norm, the
 * losses and embedding use the fused backward ops (values 200+ in ops.h).
 * docs/training.md lists which ops have rules. Paths through non-float nodes
 * (comparisons, argmax, integer ops) and through piecewise-constant ops (floor,
 * ceil, round, trunc, sign) carry no gradient, as in PyTorch.
 *
 * Thread safety: as any graph modification (not concurrent with other calls on g). */
#ifndef GOBLIN_AUTODIFF_H
#define GOBLIN_AUTODIFF_H

#include "api.h"
#include "error.h"
#include "graph.h"

GOBLIN_BEGIN_DECLS

/** Append d(loss)/d(wrt_ids[i]) for i < n_wrt to @p g; grad_ids_out[i] gets the node id
 *  of each gradient (same dtype and shape as wrt_ids[i]). @p loss_id must be a float
 *  node with one element (any rank); the seed is 1. A wrt node the loss does not depend
 *  on gets a zero-filled gradient (a FULL node). The same id may appear twice.
 *  Errors: GOBLIN_EINVAL (bad ids, NULL pointers, n_wrt < 0), GOBLIN_ESHAPE (loss not a
 *  single element), GOBLIN_EDTYPE (loss or a wrt node not float), GOBLIN_ENOTSUP (a
 *  node on a path from a wrt node to the loss has no backward rule: the message names
 *  it), or any error of adding a node. On failure the graph is left exactly as it was
 *  and goblin_graph_error() says why. */
GOBLIN_API goblin_err goblin_graph_backward(goblin_graph *g, int32_t loss_id, const int32_t *wrt_ids,
                                            int32_t n_wrt, int32_t *grad_ids_out);

/** As goblin_graph_backward, but seeded with the node @p seed_id (same dtype and shape
 *  as @p out_id, which may then have any shape): computes the vector-Jacobian product
 *  seed^T d(out)/d(wrt). This is what a pipeline stage runs with the gradient it
 *  receives for its output. */
GOBLIN_API goblin_err goblin_graph_backward_seeded(goblin_graph *g, int32_t out_id, int32_t seed_id,
                                                   const int32_t *wrt_ids, int32_t n_wrt,
                                                   int32_t *grad_ids_out);

/** Does @p op have a backward rule (for at least its first float input)? */
GOBLIN_API bool goblin_op_has_backward(goblin_op op);

GOBLIN_END_DECLS

#endif
