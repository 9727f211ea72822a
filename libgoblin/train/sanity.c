/* libgoblin/train/sanity.c - a round whose result cannot be right is recomputed before
 * the optimizer step (train_impl.h).
 *
 * Replicas catch one cheater, not two that agree: two workers of one attacker that flip
 * every sign send the same bits, and their round would be accepted, loss and all. What
 * such a round cannot hide is an impossible value: a loss that is NaN or infinite, a loss
 * below zero from a loss function that is never negative (cross-entropy, a mean of
 * squares: proved from the graph below), a gradient that is not finite, or a gradient
 * norm that jumps past grad_jump_factor times the recent ones. Such a round is computed
 * again on the trainer's own machine before anything is applied. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/node.h"
#include "train_impl.h"

enum { SIGN_ANY = 0, SIGN_NONNEG = 1, SIGN_NONPOS = 2 };

static int const_sign(const goblin__node *n) {
    if (!n->payload || (n->dtype != GOBLIN_DTYPE_F32 && n->dtype != GOBLIN_DTYPE_F64)) return SIGN_ANY;
    int64_t ne = 1;
    for (int32_t d = 0; d < n->rank; d++) ne *= n->shape[d];
    bool nonneg = true, nonpos = true;
    for (int64_t i = 0; i < ne; i++) {
        double v = n->dtype == GOBLIN_DTYPE_F32 ? (double)((const float *)n->payload)[i]
                                                 : ((const double *)n->payload)[i];
        if (!(v >= 0)) nonneg = false;
        if (!(v <= 0)) nonpos = false;
    }
    return nonneg ? SIGN_NONNEG : nonpos ? SIGN_NONPOS : SIGN_ANY;
}

static int flip(int s) { return s == SIGN_NONNEG ? SIGN_NONPOS : s == SIGN_NONPOS ? SIGN_NONNEG : SIGN_ANY; }

/* The sign every element of node @p id is known to have, from its op and its inputs'
 * signs (@p sg: the nodes before it). Conservative: SIGN_ANY when not proved. */
static int node_sign(const goblin_graph *g, int32_t id, const uint8_t *sg) {
    const goblin__node *n = &g->nodes[id];
    int a = n->n_inputs > 0 ? sg[n->inputs[0]] : SIGN_ANY;
    int b = n->n_inputs > 1 ? sg[n->inputs[1]] : SIGN_ANY;
    bool all_nonneg = n->n_inputs > 0, all_nonpos = n->n_inputs > 0;
    for (int32_t i = 0; i < n->n_inputs; i++) {
        all_nonneg = all_nonneg && sg[n->inputs[i]] == SIGN_NONNEG;
        all_nonpos = all_nonpos && sg[n->inputs[i]] == SIGN_NONPOS;
    }
    switch (n->op) {
    case GOBLIN_OP_CONSTANT: return const_sign(n);
    case GOBLIN_OP_SQUARE: case GOBLIN_OP_ABS: case GOBLIN_OP_EXP: case GOBLIN_OP_SQRT:
    case GOBLIN_OP_RSQRT: case GOBLIN_OP_RELU: case GOBLIN_OP_SIGMOID: case GOBLIN_OP_SOFTMAX:
    case GOBLIN_OP_VAR: case GOBLIN_OP_CROSS_ENTROPY:
        return SIGN_NONNEG;
    case GOBLIN_OP_LOG_SOFTMAX: return SIGN_NONPOS;
    case GOBLIN_OP_LOG: /* the log of a probability (softmax, sigmoid) */
        if (n->n_inputs > 0) {
            goblin_op p = g->nodes[n->inputs[0]].op;
            if (p == GOBLIN_OP_SOFTMAX || p == GOBLIN_OP_SIGMOID) return SIGN_NONPOS;
        }
        return SIGN_ANY;
    case GOBLIN_OP_NLL_LOSS: return a == SIGN_NONPOS ? SIGN_NONNEG : SIGN_ANY;
    case GOBLIN_OP_NEG: return flip(a);
    case GOBLIN_OP_RECIPROCAL: return a;
    /* moving, selecting and reducing elements keeps their sign */
    case GOBLIN_OP_SUM: case GOBLIN_OP_MEAN: case GOBLIN_OP_REDUCE_MAX: case GOBLIN_OP_REDUCE_MIN:
    case GOBLIN_OP_RESHAPE: case GOBLIN_OP_PERMUTE: case GOBLIN_OP_EXPAND: case GOBLIN_OP_SLICE:
    case GOBLIN_OP_SELECT: case GOBLIN_OP_COPY: case GOBLIN_OP_GATHER: case GOBLIN_OP_INDEX_SELECT:
    case GOBLIN_OP_CAST: case GOBLIN_OP_CUMSUM:
        return a;
    case GOBLIN_OP_CONCAT: case GOBLIN_OP_STACK: case GOBLIN_OP_ADD: case GOBLIN_OP_MAXIMUM:
    case GOBLIN_OP_MINIMUM:
        if (n->op == GOBLIN_OP_MAXIMUM && (a == SIGN_NONNEG || b == SIGN_NONNEG)) return SIGN_NONNEG;
        if (n->op == GOBLIN_OP_MINIMUM && (a == SIGN_NONPOS || b == SIGN_NONPOS)) return SIGN_NONPOS;
        return all_nonneg ? SIGN_NONNEG : all_nonpos ? SIGN_NONPOS : SIGN_ANY;
    case GOBLIN_OP_SUB:
        if (a == SIGN_NONNEG && b == SIGN_NONPOS) return SIGN_NONNEG;
        if (a == SIGN_NONPOS && b == SIGN_NONNEG) return SIGN_NONPOS;
        return SIGN_ANY;
    case GOBLIN_OP_MUL: case GOBLIN_OP_DIV:
        if (a == SIGN_ANY || b == SIGN_ANY || n->n_inputs != 2) return SIGN_ANY;
        return a == b ? SIGN_NONNEG : SIGN_NONPOS;
    default: return SIGN_ANY;
    }
}

bool goblin__train_loss_nonneg(const tr_model *m) {
    const goblin_graph *g = m->g;
    int32_t nn = g->n_nodes;
    uint8_t *sg = goblin__calloc((size_t)(nn > 0 ? nn : 1), 1);
    if (!sg) return false;
    for (int32_t id = 0; id <= m->loss_id && id < nn; id++) sg[id] = (uint8_t)node_sign(g, id, sg);
    bool r = m->loss_id >= 0 && m->loss_id < nn && sg[m->loss_id] == SIGN_NONNEG;
    goblin__free(sg);
    return r;
}

bool goblin__train_grads_finite(const goblin_trainer *t, const goblin_tensor *grads) {
    for (int32_t i = 0; i < t->m.n_params; i++) {
        int64_t n = goblin_tensor_numel(&grads[i]);
        if (t->pdt == GOBLIN_DTYPE_F32) {
            const float *p = grads[i].data;
            for (int64_t k = 0; k < n; k++)
                if (!isfinite(p[k])) return false;
        } else {
            const double *p = grads[i].data;
            for (int64_t k = 0; k < n; k++)
                if (!isfinite(p[k])) return false;
        }
    }
    return true;
}

const char *goblin__train_implausible(const goblin_trainer *t, double loss, double gnorm,
                                      bool grads_finite, char *why, size_t cap) {
    if (!isfinite(loss)) {
        snprintf(why, cap, "the loss is %g", loss);
        return why;
    }
    if (loss < 0 && t->loss_nonneg) {
        snprintf(why, cap, "the loss is %.6g, below zero, from a loss function that is never "
                 "negative", loss);
        return why;
    }
    if (!grads_finite || !isfinite(gnorm)) {
        snprintf(why, cap, "a gradient is not finite");
        return why;
    }
    double f = t->p.grad_jump_factor;
    if (f > 0 && t->n_norms > 0) {
        /* the largest of the recent norms: one large step in the window does not make
         * the next one suspicious, and a jump is measured against real history */
        double ref = 0;
        for (int32_t i = 0; i < t->n_norms; i++) ref = t->norms[i] > ref ? t->norms[i] : ref;
        if (ref > 0 && gnorm > f * ref) {
            snprintf(why, cap, "the gradient norm %.6g is over %g times the largest of the last %d "
                     "rounds (%.6g)", gnorm, f, (int)t->n_norms, ref);
            return why;
        }
    }
    return NULL;
}

void goblin__train_note_norm(goblin_trainer *t, double gnorm) {
    if (!isfinite(gnorm)) return;
    if (t->n_norms < GOBLIN__TRAIN_NORMS) {
        t->norms[t->n_norms++] = gnorm;
    } else {
        t->norms[t->next_norm] = gnorm;
        t->next_norm = (t->next_norm + 1) % GOBLIN__TRAIN_NORMS;
    }
}
