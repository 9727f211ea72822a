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

#endif
