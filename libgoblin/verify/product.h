/* libgoblin/verify/product.h - a graph's product nodes (matmuls) checked algebraically,
 * for checked execution (docs/verification.md, "Checked execution"): which nodes can be,
 * and the check of one node's claimed value from its operands (internal). */
#ifndef GOBLIN__VERIFY_PRODUCT_H
#define GOBLIN__VERIFY_PRODUCT_H

#include <goblin/verify.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/node.h"

/** Can node @p n (whose operands are @p a, @p b and @p c, NULL when it has no c term) be
 *  checked by Freivalds' algorithm: a MATMUL of f32 or f64 operands of rank >= 2 with
 *  alpha 1 and either no c term or, with beta 1, a c of one row broadcast over every row
 *  (a bias: [n], or [1, n] with batch dims of 1)? */
bool goblin__product_checkable(const goblin__node *n, const goblin__node *a, const goblin__node *b,
                               const goblin__node *c);

/** Multiply-adds of checkable node @p n (operand @p a): its batch x m x n x K. */
double goblin__product_macs(const goblin__node *n, const goblin__node *a);

/** Judge @p claimed (borrowed, hostile) as the value of checkable node @p n from its
 *  operands @p a and @p b (borrowed, trusted, any strides, the node's operand shapes):
 *  one Freivalds check (goblin_verify_matmul, its accept levels) per batch item, or one
 *  for the whole batch when b is shared by every item and a's batch folds into its rows.
 *  A bias @p c (borrowed, trusted; NULL without one) is checked as one more term of K:
 *  [a | 1] . [b ; c] (copies of the operands, so K + 1 terms under the contract).
 *  @p seed: secret. *out: the worst verdict over the items (REJECT over ESCALATE over
 *  ACCEPT), counts summed. GOBLIN_EINVAL (NULL pointer, node not checkable), GOBLIN_ENOMEM,
 *  or what goblin_verify_matmul returns. */
goblin_err goblin__product_check(const goblin__node *n, const goblin_tensor *a, const goblin_tensor *b,
                                 const goblin_tensor *c, const goblin_tensor *claimed, uint64_t seed,
                                 goblin_verdict *out);

/* ---- convolutions (conv_check.c) ---------------------------------------------- */

/** Largest scratch (the patches, B and C of one group) a convolution check may take. */
#define GOBLIN_CONV_CHECK_MAX_BYTES (256u << 20)

/** Can conv node @p n (CONV2D (x, w[, bias]), CONV2D_BACKWARD_INPUT (grad_out, w) or
 *  CONV2D_BACKWARD_WEIGHT (grad_out, x); @p bias NULL but for a CONV2D with one) be
 *  checked: f32 or f64, rank-4 operands of the node's dtype? */
bool goblin__conv_checkable(const goblin__node *n, const goblin__node *a, const goblin__node *b,
                            const goblin__node *bias);
/** The scratch bytes of one group's matrices in goblin__conv_check. */
double goblin__conv_check_bytes(const goblin__node *n, const goblin__node *a, const goblin__node *b,
                                bool bias);
/** Multiply-adds of checkable conv node @p n (groups x m x K x n of its matmuls). */
double goblin__conv_macs(const goblin__node *n, const goblin__node *a, const goblin__node *b);

/** Judge @p claimed (borrowed, hostile) as the value of checkable conv node @p n from its
 *  operands @p in0, @p in1 and @p bias (borrowed, trusted, contiguous; bias NULL without
 *  one): per group, the op as a matmul over patches (conv_check.c) judged by
 *  goblin_verify_matmul with @p vectors vectors (<= 0: its default) and a seed derived
 *  from the secret @p seed. *out: the worst verdict over the groups; worst_index a row
 *  of group g's matrix plus g times its rows. GOBLIN_EINVAL (bad arguments),
 *  GOBLIN_ELIMIT (more scratch than GOBLIN_CONV_CHECK_MAX_BYTES), GOBLIN_ENOMEM. */
goblin_err goblin__conv_check(const goblin__node *n, const goblin_tensor *in0, const goblin_tensor *in1,
                              const goblin_tensor *bias, const goblin_tensor *claimed, uint64_t seed,
                              int32_t vectors, goblin_verdict *out);

#endif
