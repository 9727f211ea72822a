/* libgoblin/backends/ref/ref_impl.h - what the reference kernels' files share. */
#ifndef GOBLIN__REF_IMPL_H
#define GOBLIN__REF_IMPL_H

#include "backends/backend.h"

/* An SDPA node's geometry, for the forward kernel (ref_nn.c) and the backward one
 * (ref_grad.c), which recomputes each row's scores exactly as the forward does. */
typedef struct goblin__ref_sdpa {
    goblin_dtype dt;
    const goblin_tensor *q, *k, *v, *mask; /* mask: NULL if none */
    int32_t br;                            /* batch rank */
    int64_t batch, L, S, E, Ev;
    double scale;
    bool causal;
    /* per operand q, k, v, mask: batch strides against the batch shape (0 where it
     * broadcasts); the mask's strides over [batch..., L, S] (zeros without a mask) */
    int64_t bs[4][GOBLIN_MAX_RANK], mstr[GOBLIN_MAX_RANK];
    /* row and column strides of the q, k and v matrices (any strides) */
    int64_t qr, qc, kr, kc, vr, vc;
} goblin__ref_sdpa;

/* Fill @p a for @p node of dtype @p dt with inputs q, k, v, mask (NULL: none) and the full shape
 * [batch..., L, Ev] of its output (forward) or grad_out (backward), of rank br + 2. */
void goblin__ref_sdpa_init(goblin__ref_sdpa *a, const goblin__node *node, goblin_dtype dt,
                           const goblin_tensor *q, const goblin_tensor *k,
                           const goblin_tensor *v, const goblin_tensor *mask, int32_t br,
                           const int64_t *shape);

/* Row @p i of the scores into s[0..S): scale (q_i . k_j), then the mask (a bool mask
 * drops a key as -inf, a float one is added), -inf past the diagonal when causal. @p off
 * is the batch's element offset of q, k, v and mask (goblin__nditer's off). Returns the
 * row's max (-inf for none) and sets *nan if any score is NaN (else leaves it). */
double goblin__ref_sdpa_scores(const goblin__ref_sdpa *a, const int64_t *off, int64_t i,
                               double *s, bool *nan);

#endif
