/* libgoblin/graph/autodiff.c - reverse-mode autodiff: backward of a graph is a graph.
 *
 * goblin_graph_backward walks the forward nodes from the loss down (ids are a
 * topological order, so descending ids is a reverse topological traversal),
 * applies each node's backward rule to its accumulated output gradient, and
 * appends the resulting nodes to the same graph. Every contribution to an
 * input's gradient is first un-broadcast to the input's shape (SUM over the
 * broadcast axes with keepdim, then RESHAPE) and then added to what that input
 * already received (ADD), so elementwise rules can ignore broadcasting.
 *
 * Only nodes that lie on a path from a wrt node to the loss are differentiated:
 * a loss that also depends on, say, integer targets or unrelated parameters
 * never asks for rules it does not need. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "graph_impl.h"

typedef struct ad_ctx {
    goblin_graph *g;
    goblin_err err;
    int32_t n0;       /* nodes of the forward graph: ids below this can get gradients */
    int32_t *grad;    /* gradient node id per forward node, -1 = none yet */
    uint8_t *reach;   /* forward node depends (through float nodes) on a wrt node */
} ad_ctx;

/* Set an autodiff-level error (not one from adding a node) with its message. */
static void fail(ad_ctx *c, goblin_err e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(ad_ctx *c, goblin_err e, const char *fmt, ...) {
    if (c->err) return;
    c->err = e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->g->err, sizeof c->g->err, fmt, ap);
    va_end(ap);
}

/* A copy of node @p id's header (the node array moves as nodes are added; the
 * inputs/attrs arrays a node points to do not). */
static goblin__node nd(const ad_ctx *c, int32_t id) { return c->g->nodes[id]; }

static int32_t add(ad_ctx *c, goblin_op op, const int32_t *in, int32_t n, const goblin_attr *a,
                   int32_t na) {
    if (c->err) return -1;
    for (int32_t i = 0; i < n; i++)
        if (in[i] < 0) return -1;
    int32_t id = -1;
    goblin_err e = goblin_graph_add(c->g, op, in, n, a, na, &id);
    if (e) {
        c->err = e;
        return -1;
    }
    return id;
}

static int32_t un(ad_ctx *c, goblin_op op, int32_t a) { return add(c, op, &a, 1, NULL, 0); }
static int32_t bin(ad_ctx *c, goblin_op op, int32_t a, int32_t b) {
    int32_t in[2] = {a, b};
    return add(c, op, in, 2, NULL, 0);
}
static int32_t MUL(ad_ctx *c, int32_t a, int32_t b) { return bin(c, GOBLIN_OP_MUL, a, b); }
static int32_t ADD(ad_ctx *c, int32_t a, int32_t b) { return bin(c, GOBLIN_OP_ADD, a, b); }
static int32_t SUB(ad_ctx *c, int32_t a, int32_t b) { return bin(c, GOBLIN_OP_SUB, a, b); }
static int32_t DIV(ad_ctx *c, int32_t a, int32_t b) { return bin(c, GOBLIN_OP_DIV, a, b); }
static int32_t NEG(ad_ctx *c, int32_t a) { return un(c, GOBLIN_OP_NEG, a); }

static int32_t full(ad_ctx *c, goblin_dtype dt, int32_t rank, const int64_t *shape, double v) {
    int64_t dummy = 0;
    goblin_attr a[3] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, rank ? shape : &dummy, rank),
                        goblin_attr_int(GOBLIN_ATTR_DTYPE, dt), goblin_attr_float(GOBLIN_ATTR_VALUE, v)};
    return add(c, GOBLIN_OP_FULL, NULL, 0, a, 3);
}
/* A rank-0 constant of dtype dt (broadcasts against anything). */
static int32_t K(ad_ctx *c, goblin_dtype dt, double v) { return full(c, dt, 0, NULL, v); }

static int32_t reshape(ad_ctx *c, int32_t x, int32_t rank, const int64_t *shape) {
    if (x < 0) return -1;
    goblin__node n = nd(c, x);
    bool same = n.rank == rank;
    for (int32_t d = 0; same && d < rank; d++) same = n.shape[d] == shape[d];
    if (same) return x;
    int64_t dummy = 0;
    goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, rank ? shape : &dummy, rank);
    return add(c, GOBLIN_OP_RESHAPE, &x, 1, &a, 1);
}

static int32_t sum_axes(ad_ctx *c, int32_t x, const int64_t *axes, int32_t n, bool keepdim) {
    if (n == 0) return x; /* an empty AXES list would mean "all axes" */
    goblin_attr a[2] = {goblin_attr_ints(GOBLIN_ATTR_AXES, axes, n),
                        goblin_attr_int(GOBLIN_ATTR_KEEPDIM, keepdim)};
    return add(c, GOBLIN_OP_SUM, &x, 1, a, 2);
}

static int32_t reduce_last(ad_ctx *c, goblin_op op, int32_t x, int32_t rank, int32_t nd_) {
    int64_t axes[GOBLIN_MAX_RANK];
    for (int32_t i = 0; i < nd_; i++) axes[i] = rank - nd_ + i;
    goblin_attr a[2] = {goblin_attr_ints(GOBLIN_ATTR_AXES, axes, nd_),
                        goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 1)};
    return add(c, op, &x, 1, a, 2);
}

/* Reduce gradient @p gid (the broadcast shape) to @p rank / @p shape. */
static int32_t unbroadcast(ad_ctx *c, int32_t gid, int32_t rank, const int64_t *shape) {
    if (gid < 0) return -1;
    goblin__node n = nd(c, gid);
    if (n.rank < rank) {
        int64_t dummy = 0;
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, rank ? shape : &dummy, rank);
        return add(c, GOBLIN_OP_EXPAND, &gid, 1, &a, 1);
    }
    int32_t lead = n.rank - rank, na = 0;
    int64_t axes[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < n.rank; d++)
        if (d < lead || (shape[d - lead] == 1 && n.shape[d] != 1)) axes[na++] = d;
    int32_t s = sum_axes(c, gid, axes, na, true);
    return reshape(c, s, rank, shape);
}

/* Add contribution @p v to the gradient of forward node @p j. */
static void contrib(ad_ctx *c, int32_t j, int32_t v) {
    if (c->err || v < 0 || !c->reach[j]) return;
    goblin__node t = nd(c, j);
    v = unbroadcast(c, v, t.rank, t.shape);
    if (v < 0) return;
    goblin__node got = nd(c, v);
    if (got.dtype != t.dtype) v = add(c, GOBLIN_OP_CAST, &v, 1,
                                      &(goblin_attr){.key = GOBLIN_ATTR_DTYPE, .count = 1,
                                                     .v.i = t.dtype}, 1);
    c->grad[j] = c->grad[j] < 0 ? v : ADD(c, c->grad[j], v);
}

/* Copy the attributes of @p n whose keys are in @p keys into @p out; returns the count. */
static int32_t copy_attrs(const goblin__node *n, const goblin_attr_key *keys, int32_t nk,
                          goblin_attr *out) {
    int32_t m = 0;
    for (int32_t i = 0; i < nk; i++) {
        const goblin_attr *a = goblin__attr_find(n, keys[i]);
        if (a) out[m++] = *a;
    }
    return m;
}

static int32_t norm_axis(int64_t a, int32_t rank) {
    if (a < 0) a += rank;
    return (int32_t)a;
}

/* PAD of x with (before, after) on one axis (torch pad layout: last dim first). */
static int32_t pad_axis(ad_ctx *c, int32_t x, int32_t rank, int32_t axis, int64_t before,
                        int64_t after) {
    if (before == 0 && after == 0) return x;
    int64_t pads[2 * GOBLIN_MAX_RANK] = {0};
    int32_t pair = rank - 1 - axis;
    pads[2 * pair] = before;
    pads[2 * pair + 1] = after;
    goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_PADS, pads, 2 * (pair + 1));
    return add(c, GOBLIN_OP_PAD, &x, 1, &a, 1);
}

/* The gradient of a slice along one axis: g (length lo on @p axis) goes to
 * positions start + i * step of a length-dim axis, zeros elsewhere. A step > 1
 * first interleaves step - 1 zeros after each element (unsqueeze, pad, merge). */
static int32_t unslice_axis(ad_ctx *c, int32_t g, int32_t axis, int64_t start, int64_t step,
                            int64_t dim) {
    if (g < 0) return -1;
    goblin__node n = nd(c, g);
    int64_t lo = n.shape[axis], len = lo;
    if (step > 1 && lo > 0) {
        if (n.rank + 1 > GOBLIN_MAX_RANK) {
            fail(c, GOBLIN_ENOTSUP, "autodiff: strided slice of a rank-%d tensor", (int)n.rank);
            return -1;
        }
        int64_t s1[GOBLIN_MAX_RANK];
        int32_t r1 = 0;
        for (int32_t d = 0; d < n.rank; d++) {
            s1[r1++] = n.shape[d];
            if (d == axis) s1[r1++] = 1;
        }
        int32_t u = reshape(c, g, r1, s1);
        u = pad_axis(c, u, r1, axis + 1, 0, step - 1);
        int64_t s2[GOBLIN_MAX_RANK];
        memcpy(s2, n.shape, sizeof s2);
        s2[axis] = lo * step;
        g = reshape(c, u, n.rank, s2);
        len = lo * step;
    }
    return pad_axis(c, g, n.rank, axis, start, dim - start - len);
}

/* ---- matmul -------------------------------------------------------------- */

static void rule_matmul(ad_ctx *c, const goblin__node *n, int32_t gy) {
    int32_t a = n->inputs[0], b = n->inputs[1];
    goblin__node na = nd(c, a), nb = nd(c, b);
    bool ta = goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0) != 0 && na.rank >= 2;
    bool tb = goblin__attr_i(n, GOBLIN_ATTR_TRANS_B, 0) != 0 && nb.rank >= 2;
    double alpha = goblin__attr_f(n, GOBLIN_ATTR_ALPHA, 1), beta = goblin__attr_f(n, GOBLIN_ATTR_BETA, 1);
    /* 1-D operands become [1, k] / [k, 1] and the gradient gets the dims back. */
    int32_t a2 = a, b2 = b, g2 = gy;
    if (na.rank == 1) {
        int64_t s[2] = {1, na.shape[0]};
        a2 = reshape(c, a, 2, s);
    }
    if (nb.rank == 1) {
        int64_t s[2] = {nb.shape[0], 1};
        b2 = reshape(c, b, 2, s);
    }
    if (na.rank == 1 || nb.rank == 1) {
        int64_t s[GOBLIN_MAX_RANK];
        int32_t r = 0;
        for (int32_t d = 0; d < n->rank - (na.rank == 1 ? 0 : 1) - (nb.rank == 1 ? 0 : 1); d++)
            s[r++] = n->shape[d];
        s[r++] = na.rank == 1 ? 1 : n->shape[n->rank - (nb.rank == 1 ? 1 : 2)];
        s[r++] = nb.rank == 1 ? 1 : n->shape[n->rank - 1];
        g2 = reshape(c, gy, r, s);
    }
    goblin_attr at[3];
    if (c->reach[a]) {
        int32_t in[2];
        if (!ta) {
            in[0] = g2, in[1] = b2;
            at[0] = goblin_attr_int(GOBLIN_ATTR_TRANS_A, 0);
            at[1] = goblin_attr_int(GOBLIN_ATTR_TRANS_B, !tb);
        } else {
            in[0] = b2, in[1] = g2;
            at[0] = goblin_attr_int(GOBLIN_ATTR_TRANS_A, tb);
            at[1] = goblin_attr_int(GOBLIN_ATTR_TRANS_B, 1);
        }
        at[2] = goblin_attr_float(GOBLIN_ATTR_ALPHA, alpha);
        int32_t da = add(c, GOBLIN_OP_MATMUL, in, 2, at, 3);
        if (na.rank == 1 && da >= 0) {
            /* sum the broadcast batch dims first, then drop the unit row */
            int64_t s[2] = {1, na.shape[0]};
            da = reshape(c, unbroadcast(c, da, 2, s), 1, na.shape);
        }
        contrib(c, a, da);
    }
    /* A 2-D b against a batched a (a linear layer over [batch..., rows, k]): its gradient
     * is one product over all the rows, a^T g with the batch dims folded into the rows,
     * rather than a product per batch item summed afterwards (torch does the same). */
    bool fold = c->reach[b] && nb.rank == 2 && na.rank >= 3 && !ta && na.rank == n->rank;
    for (int32_t d = 0; fold && d < na.rank - 2; d++) fold = na.shape[d] == n->shape[d];
    if (fold) {
        int64_t rows = 1;
        for (int32_t d = 0; d < na.rank - 1; d++) rows *= na.shape[d];
        int64_t sa[2] = {rows, na.shape[na.rank - 1]}, sg[2] = {rows, n->shape[n->rank - 1]};
        int32_t af = reshape(c, a, 2, sa), gf = reshape(c, gy, 2, sg);
        int32_t in[2] = {tb ? gf : af, tb ? af : gf};
        at[0] = goblin_attr_int(GOBLIN_ATTR_TRANS_A, 1);
        at[1] = goblin_attr_int(GOBLIN_ATTR_TRANS_B, 0);
        at[2] = goblin_attr_float(GOBLIN_ATTR_ALPHA, alpha);
        contrib(c, b, add(c, GOBLIN_OP_MATMUL, in, 2, at, 3));
    } else if (c->reach[b]) {
        int32_t in[2];
        if (!tb) {
            in[0] = a2, in[1] = g2;
            at[0] = goblin_attr_int(GOBLIN_ATTR_TRANS_A, !ta);
            at[1] = goblin_attr_int(GOBLIN_ATTR_TRANS_B, 0);
        } else {
            in[0] = g2, in[1] = a2;
            at[0] = goblin_attr_int(GOBLIN_ATTR_TRANS_A, 1);
            at[1] = goblin_attr_int(GOBLIN_ATTR_TRANS_B, ta);
        }
        at[2] = goblin_attr_float(GOBLIN_ATTR_ALPHA, alpha);
        int32_t db = add(c, GOBLIN_OP_MATMUL, in, 2, at, 3);
        if (nb.rank == 1 && db >= 0) {
            int64_t s[2] = {nb.shape[0], 1};
            db = reshape(c, unbroadcast(c, db, 2, s), 1, nb.shape);
        }
        contrib(c, b, db);
    }
    /* the bias term beta c: gy beta (gy itself when beta is 1: x * 1 is x, bit for bit) */
    if (n->n_inputs >= 3 && c->reach[n->inputs[2]] && beta != 0)
        contrib(c, n->inputs[2], beta == 1 ? gy : MUL(c, gy, K(c, n->dtype, beta)));
}

/* ---- normalization --------------------------------------------------------- */

/* RMS_NORM (and LAYER_NORM with layer = true; layer norm now uses the fused op below),
 * recomputing the statistics:
 * xhat = (x - mu) rstd (layer) or x rstd (rms); with dxhat = g w,
 * dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) (rms: no mean(dxhat) term). */
static void rule_norm(ad_ctx *c, const goblin__node *n, int32_t gy, bool layer) {
    int32_t x = n->inputs[0];
    goblin__node nx = nd(c, x);
    goblin_dtype dt = n->dtype;
    int32_t k = (int32_t)goblin__attr_i(n, GOBLIN_ATTR_NORM_NDIM, 1);
    double eps = goblin__attr_f(n, GOBLIN_ATTR_EPS, layer ? 1e-5 : 1e-6);
    int32_t xc = x, var;
    if (layer) {
        xc = SUB(c, x, reduce_last(c, GOBLIN_OP_MEAN, x, nx.rank, k));
    }
    var = reduce_last(c, GOBLIN_OP_MEAN, MUL(c, xc, xc), nx.rank, k);
    int32_t rstd = un(c, GOBLIN_OP_RSQRT, ADD(c, var, K(c, dt, eps)));
    int32_t xhat = MUL(c, xc, rstd);
    int32_t w = n->n_inputs >= 2 ? n->inputs[1] : -1;
    if (c->reach[x]) {
        int32_t dxhat = w >= 0 ? MUL(c, gy, w) : gy;
        int32_t t = MUL(c, xhat, reduce_last(c, GOBLIN_OP_MEAN, MUL(c, dxhat, xhat), nx.rank, k));
        int32_t inner = SUB(c, dxhat, t);
        if (layer) inner = SUB(c, inner, reduce_last(c, GOBLIN_OP_MEAN, dxhat, nx.rank, k));
        contrib(c, x, MUL(c, rstd, inner));
    }
    if (w >= 0 && c->reach[w]) contrib(c, w, MUL(c, gy, xhat));
    if (n->n_inputs >= 3 && c->reach[n->inputs[2]]) contrib(c, n->inputs[2], gy);
}

/* LAYER_NORM: the fused LAYER_NORM_BACKWARD recomputes the statistics once per row
 * (index 0: d x, 1: d weight); d bias is grad_out summed over the leading dims. */
static void rule_layer_norm(ad_ctx *c, const goblin__node *n, int32_t gy) {
    static const goblin_attr_key keys[] = {GOBLIN_ATTR_NORM_NDIM, GOBLIN_ATTR_EPS};
    goblin_attr a[3];
    int32_t na = copy_attrs(n, keys, 2, a);
    int32_t x = n->inputs[0], w = n->n_inputs >= 2 ? n->inputs[1] : -1;
    if (c->reach[x]) {
        int32_t ins[3] = {gy, x, w};
        a[na] = goblin_attr_int(GOBLIN_ATTR_INDEX, 0);
        contrib(c, x, add(c, GOBLIN_OP_LAYER_NORM_BACKWARD, ins, w >= 0 ? 3 : 2, a, na + 1));
    }
    if (w >= 0 && c->reach[w]) {
        int32_t ins[2] = {gy, x};
        a[na] = goblin_attr_int(GOBLIN_ATTR_INDEX, 1);
        contrib(c, w, add(c, GOBLIN_OP_LAYER_NORM_BACKWARD, ins, 2, a, na + 1));
    }
    if (n->n_inputs >= 3 && c->reach[n->inputs[2]]) contrib(c, n->inputs[2], gy);
}

/* ---- the rules ------------------------------------------------------------- */

static void no_rule(ad_ctx *c, int32_t id, const goblin__node *n, const char *what) {
    fail(c, GOBLIN_ENOTSUP, "autodiff: node %d (%s): no backward rule%s%s", (int)id,
         goblin_op_name(n->op), what ? " for " : "", what ? what : "");
}

static void rule(ad_ctx *c, int32_t id, int32_t gy) {
    goblin__node n = nd(c, id);
    goblin_dtype dt = n.dtype;
    int32_t x = n.n_inputs > 0 ? n.inputs[0] : -1, b = n.n_inputs > 1 ? n.inputs[1] : -1;
    bool nx = x >= 0 && c->reach[x], nb = b >= 0 && c->reach[b];
    switch (n.op) {
    case GOBLIN_OP_ADD:
        contrib(c, x, gy);
        contrib(c, b, gy);
        break;
    case GOBLIN_OP_SUB:
        contrib(c, x, gy);
        if (nb) contrib(c, b, NEG(c, gy));
        break;
    case GOBLIN_OP_MUL:
        if (nx) contrib(c, x, MUL(c, gy, b));
        if (nb) contrib(c, b, MUL(c, gy, x));
        break;
    case GOBLIN_OP_DIV:
        if (nx) contrib(c, x, DIV(c, gy, b));
        if (nb) contrib(c, b, NEG(c, DIV(c, MUL(c, gy, id), b)));
        break;
    case GOBLIN_OP_POW:
        if (nx) contrib(c, x, MUL(c, gy, MUL(c, b, bin(c, GOBLIN_OP_POW, x, SUB(c, b, K(c, dt, 1))))));
        if (nb) contrib(c, b, MUL(c, gy, MUL(c, id, un(c, GOBLIN_OP_LOG, x))));
        break;
    case GOBLIN_OP_MAXIMUM:
    case GOBLIN_OP_MINIMUM: {
        /* torch: ties split the gradient in halves */
        bool mx = n.op == GOBLIN_OP_MAXIMUM;
        int32_t zero = K(c, dt, 0), eq = bin(c, GOBLIN_OP_EQ, x, b);
        int32_t half = MUL(c, gy, K(c, dt, 0.5));
        int32_t tie[3] = {eq, half, zero};
        int32_t tied = add(c, GOBLIN_OP_WHERE, tie, 3, NULL, 0);
        if (nx) {
            int32_t in[3] = {bin(c, mx ? GOBLIN_OP_GT : GOBLIN_OP_LT, x, b), gy, tied};
            contrib(c, x, add(c, GOBLIN_OP_WHERE, in, 3, NULL, 0));
        }
        if (nb) {
            int32_t in[3] = {bin(c, mx ? GOBLIN_OP_LT : GOBLIN_OP_GT, x, b), gy, tied};
            contrib(c, b, add(c, GOBLIN_OP_WHERE, in, 3, NULL, 0));
        }
        break;
    }
    case GOBLIN_OP_CLAMP: {
        /* torch: the gradient passes where min <= x <= max */
        const goblin_attr *mn = goblin__attr_find(&n, GOBLIN_ATTR_MIN);
        const goblin_attr *mxa = goblin__attr_find(&n, GOBLIN_ATTR_MAX);
        int32_t mask = -1;
        if (mn) mask = bin(c, GOBLIN_OP_GE, x, K(c, dt, mn->v.f));
        if (mxa) {
            int32_t m2 = bin(c, GOBLIN_OP_LE, x, K(c, dt, mxa->v.f));
            mask = mask < 0 ? m2 : bin(c, GOBLIN_OP_LOGICAL_AND, mask, m2);
        }
        if (mask < 0) {
            contrib(c, x, gy);
        } else {
            int32_t in[3] = {mask, gy, K(c, dt, 0)};
            contrib(c, x, add(c, GOBLIN_OP_WHERE, in, 3, NULL, 0));
        }
        break;
    }
    case GOBLIN_OP_NEG: contrib(c, x, NEG(c, gy)); break;
    case GOBLIN_OP_ABS: contrib(c, x, MUL(c, gy, un(c, GOBLIN_OP_SIGN, x))); break;
    case GOBLIN_OP_EXP: contrib(c, x, MUL(c, gy, id)); break;
    case GOBLIN_OP_LOG: contrib(c, x, DIV(c, gy, x)); break;
    case GOBLIN_OP_SQRT: contrib(c, x, DIV(c, gy, MUL(c, id, K(c, dt, 2)))); break;
    case GOBLIN_OP_RSQRT: contrib(c, x, MUL(c, gy, MUL(c, DIV(c, id, x), K(c, dt, -0.5)))); break;
    case GOBLIN_OP_RECIPROCAL: contrib(c, x, NEG(c, MUL(c, gy, MUL(c, id, id)))); break;
    case GOBLIN_OP_SIN: contrib(c, x, MUL(c, gy, un(c, GOBLIN_OP_COS, x))); break;
    case GOBLIN_OP_COS: contrib(c, x, NEG(c, MUL(c, gy, un(c, GOBLIN_OP_SIN, x)))); break;
    case GOBLIN_OP_TANH: contrib(c, x, MUL(c, gy, SUB(c, K(c, dt, 1), MUL(c, id, id)))); break;
    case GOBLIN_OP_ERF:
        contrib(c, x, MUL(c, gy, MUL(c, un(c, GOBLIN_OP_EXP, NEG(c, MUL(c, x, x))),
                                     K(c, dt, 1.1283791670955126)))); /* 2/sqrt(pi) */
        break;
    case GOBLIN_OP_LOG1P: contrib(c, x, DIV(c, gy, ADD(c, x, K(c, dt, 1)))); break;
    case GOBLIN_OP_EXPM1: contrib(c, x, MUL(c, gy, ADD(c, id, K(c, dt, 1)))); break;
    case GOBLIN_OP_SQUARE: contrib(c, x, MUL(c, gy, MUL(c, x, K(c, dt, 2)))); break;
    case GOBLIN_OP_FLOOR:
    case GOBLIN_OP_CEIL:
    case GOBLIN_OP_ROUND:
    case GOBLIN_OP_TRUNC:
    case GOBLIN_OP_SIGN:
        break; /* piecewise constant: zero gradient (torch) */
    case GOBLIN_OP_CAST: {
        goblin_attr a = goblin_attr_int(GOBLIN_ATTR_DTYPE, nd(c, x).dtype);
        contrib(c, x, add(c, GOBLIN_OP_CAST, &gy, 1, &a, 1));
        break;
    }
    case GOBLIN_OP_COPY: contrib(c, x, gy); break;
    case GOBLIN_OP_RELU: {
        /* the fused RELU_BACKWARD: gy where x > 0, else 0 (where(x > 0, gy, 0) in one pass) */
        int32_t ins[2] = {gy, x};
        contrib(c, x, add(c, GOBLIN_OP_RELU_BACKWARD, ins, 2, NULL, 0));
        break;
    }
    case GOBLIN_OP_RELU_BACKWARD: {
        /* linear in grad_out with the same mask; piecewise constant in x (zero, as where's
         * condition): double backward through relu */
        if (nx) {
            int32_t ins[2] = {gy, b};
            contrib(c, x, add(c, GOBLIN_OP_RELU_BACKWARD, ins, 2, NULL, 0));
        }
        break;
    }
    case GOBLIN_OP_SIGMOID: contrib(c, x, MUL(c, gy, MUL(c, id, SUB(c, K(c, dt, 1), id)))); break;
    case GOBLIN_OP_SILU: {
        int32_t s = un(c, GOBLIN_OP_SIGMOID, x);
        contrib(c, x, MUL(c, gy, MUL(c, s, ADD(c, K(c, dt, 1), MUL(c, x, SUB(c, K(c, dt, 1), s))))));
        break;
    }
    case GOBLIN_OP_GELU: {
        /* the fused GELU_BACKWARD: grad_out * gelu'(x), erf or tanh form */
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_APPROXIMATE};
        goblin_attr a[1];
        int32_t na = copy_attrs(&n, keys, 1, a);
        int32_t ins[2] = {gy, x};
        contrib(c, x, add(c, GOBLIN_OP_GELU_BACKWARD, ins, 2, a, na));
        break;
    }
    case GOBLIN_OP_WHERE: {
        int32_t a = n.inputs[1], bb = n.inputs[2], zero = K(c, dt, 0);
        if (c->reach[a]) {
            int32_t in[3] = {x, gy, zero};
            contrib(c, a, add(c, GOBLIN_OP_WHERE, in, 3, NULL, 0));
        }
        if (c->reach[bb]) {
            int32_t in[3] = {x, zero, gy};
            contrib(c, bb, add(c, GOBLIN_OP_WHERE, in, 3, NULL, 0));
        }
        break;
    }
    case GOBLIN_OP_DROPOUT: {
        /* Counter-based mask: the same seed/offset/position drop the same elements,
         * so dropout of the gradient is exactly g * mask / (1 - p). */
        goblin_attr a[5];
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_SEED, GOBLIN_ATTR_OFFSET, GOBLIN_ATTR_P,
                                               GOBLIN_ATTR_AXIS};
        int32_t na = copy_attrs(&n, keys, 4, a);
        contrib(c, x, add(c, GOBLIN_OP_DROPOUT, &gy, 1, a, na));
        break;
    }
    case GOBLIN_OP_SUM:
    case GOBLIN_OP_MEAN: {
        goblin__node in = nd(c, x);
        int32_t cnt;
        const int64_t *ax = goblin__attr_ints(&n, GOBLIN_ATTR_AXES, &cnt);
        uint32_t mask = 0;
        if (!ax || cnt == 0) mask = (1u << in.rank) - 1u;
        for (int32_t i = 0; ax && i < cnt; i++) mask |= 1u << norm_axis(ax[i], in.rank);
        int64_t keep[GOBLIN_MAX_RANK];
        double count = 1;
        for (int32_t d = 0; d < in.rank; d++) {
            keep[d] = (mask >> d) & 1u ? 1 : in.shape[d];
            if ((mask >> d) & 1u) count *= (double)in.shape[d];
        }
        int32_t g2 = reshape(c, gy, in.rank, keep);
        int64_t dummy = 0;
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, in.rank ? in.shape : &dummy, in.rank);
        int32_t e = add(c, GOBLIN_OP_EXPAND, &g2, 1, &a, 1);
        if (n.op == GOBLIN_OP_MEAN) e = DIV(c, e, K(c, dt, count));
        contrib(c, x, e);
        break;
    }
    case GOBLIN_OP_RESHAPE: {
        goblin__node in = nd(c, x);
        contrib(c, x, reshape(c, gy, in.rank, in.shape));
        break;
    }
    case GOBLIN_OP_PERMUTE: {
        int32_t cnt;
        const int64_t *p = goblin__attr_ints(&n, GOBLIN_ATTR_PERM, &cnt);
        int64_t inv[GOBLIN_MAX_RANK];
        for (int32_t i = 0; i < cnt; i++) inv[norm_axis(p[i], cnt)] = i;
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_PERM, inv, cnt);
        contrib(c, x, add(c, GOBLIN_OP_PERMUTE, &gy, 1, &a, 1));
        break;
    }
    case GOBLIN_OP_EXPAND: contrib(c, x, gy); break; /* un-broadcast does the work */
    case GOBLIN_OP_SLICE: {
        goblin__node in = nd(c, x);
        int32_t ns, nax = 0, nst = 0;
        const int64_t *st = goblin__attr_ints(&n, GOBLIN_ATTR_STARTS, &ns);
        const int64_t *ax = goblin__attr_ints(&n, GOBLIN_ATTR_AXES, &nax);
        const int64_t *sp = goblin__attr_ints(&n, GOBLIN_ATTR_STEPS, &nst);
        int32_t g2 = gy;
        for (int32_t i = 0; i < ns; i++) {
            int32_t a = ax && i < nax ? norm_axis(ax[i], in.rank) : i;
            int64_t dim = in.shape[a], s = st[i], step = sp && i < nst ? sp[i] : 1;
            if (s < 0) s += dim;
            if (s < 0) s = 0;
            if (s > dim) s = dim;
            g2 = unslice_axis(c, g2, a, s, step, dim);
        }
        contrib(c, x, g2);
        break;
    }
    case GOBLIN_OP_SELECT: {
        goblin__node in = nd(c, x);
        int32_t a = norm_axis(goblin__attr_i(&n, GOBLIN_ATTR_AXIS, 0), in.rank);
        int64_t idx = goblin__attr_i(&n, GOBLIN_ATTR_INDEX, 0);
        if (idx < 0) idx += in.shape[a];
        int64_t ks[GOBLIN_MAX_RANK];
        memcpy(ks, in.shape, sizeof ks);
        ks[a] = 1;
        int32_t g2 = reshape(c, gy, in.rank, ks);
        contrib(c, x, pad_axis(c, g2, in.rank, a, idx, in.shape[a] - idx - 1));
        break;
    }
    case GOBLIN_OP_SPLIT: {
        goblin__node in = nd(c, x);
        int32_t a = norm_axis(goblin__attr_i(&n, GOBLIN_ATTR_AXIS, 0), in.rank);
        int64_t chunks = goblin__attr_i(&n, GOBLIN_ATTR_CHUNKS, 1);
        int64_t idx = goblin__attr_i(&n, GOBLIN_ATTR_INDEX, 0);
        int64_t dim = in.shape[a], cs = (dim + chunks - 1) / chunks, s = idx * cs;
        contrib(c, x, pad_axis(c, gy, in.rank, a, s, dim - s - n.shape[a]));
        break;
    }
    case GOBLIN_OP_CONCAT: {
        int32_t a = norm_axis(goblin__attr_i(&n, GOBLIN_ATTR_AXIS, 0), n.rank);
        int64_t off = 0;
        for (int32_t i = 0; i < n.n_inputs; i++) {
            int32_t j = n.inputs[i];
            int64_t len = nd(c, j).shape[a];
            if (c->reach[j]) {
                int64_t axv = a, s0 = off, s1 = off + len;
                goblin_attr at[3] = {goblin_attr_ints(GOBLIN_ATTR_AXES, &axv, 1),
                                     goblin_attr_ints(GOBLIN_ATTR_STARTS, &s0, 1),
                                     goblin_attr_ints(GOBLIN_ATTR_STOPS, &s1, 1)};
                contrib(c, j, add(c, GOBLIN_OP_SLICE, &gy, 1, at, 3));
            }
            off += len;
        }
        break;
    }
    case GOBLIN_OP_STACK: {
        int32_t a = norm_axis(goblin__attr_i(&n, GOBLIN_ATTR_AXIS, 0), n.rank);
        for (int32_t i = 0; i < n.n_inputs; i++) {
            if (!c->reach[n.inputs[i]]) continue;
            goblin_attr at[2] = {goblin_attr_int(GOBLIN_ATTR_AXIS, a), goblin_attr_int(GOBLIN_ATTR_INDEX, i)};
            contrib(c, n.inputs[i], add(c, GOBLIN_OP_SELECT, &gy, 1, at, 2));
        }
        break;
    }
    case GOBLIN_OP_PAD: {
        /* padding's gradient crops and cropping's gradient pads: negate the pads */
        int32_t cnt;
        const int64_t *p = goblin__attr_ints(&n, GOBLIN_ATTR_PADS, &cnt);
        int64_t q[GOBLIN_MAX_ATTR_INTS];
        for (int32_t i = 0; i < cnt; i++) q[i] = -p[i];
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_PADS, q, cnt);
        contrib(c, x, add(c, GOBLIN_OP_PAD, &gy, 1, &a, 1));
        break;
    }
    case GOBLIN_OP_GATHER: {
        goblin__node in = nd(c, x);
        int32_t z = full(c, dt, in.rank, in.shape, 0);
        int32_t ins[3] = {z, b, gy};
        goblin_attr a[1];
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_AXIS};
        int32_t na = copy_attrs(&n, keys, 1, a);
        contrib(c, x, add(c, GOBLIN_OP_SCATTER_ADD, ins, 3, a, na));
        break;
    }
    case GOBLIN_OP_EMBEDDING: {
        goblin__node w = nd(c, x);
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, w.shape, 2);
        int32_t ins[2] = {gy, b};
        contrib(c, x, add(c, GOBLIN_OP_EMBEDDING_BACKWARD, ins, 2, &a, 1));
        break;
    }
    case GOBLIN_OP_MATMUL: rule_matmul(c, &n, gy); break;
    case GOBLIN_OP_CONV2D: {
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_STRIDE, GOBLIN_ATTR_PADDING,
                                               GOBLIN_ATTR_DILATION, GOBLIN_ATTR_GROUPS};
        goblin_attr a[5];
        int32_t na = copy_attrs(&n, keys, 4, a);
        if (nx) {
            a[na] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, nd(c, x).shape, 4);
            int32_t ins[2] = {gy, b};
            contrib(c, x, add(c, GOBLIN_OP_CONV2D_BACKWARD_INPUT, ins, 2, a, na + 1));
        }
        if (nb) {
            a[na] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, nd(c, b).shape, 4);
            int32_t ins[2] = {gy, x};
            contrib(c, b, add(c, GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, ins, 2, a, na + 1));
        }
        if (n.n_inputs >= 3 && c->reach[n.inputs[2]]) {
            static const int64_t axes[3] = {0, 2, 3};
            contrib(c, n.inputs[2], sum_axes(c, gy, axes, 3, false));
        }
        break;
    }
    case GOBLIN_OP_MAX_POOL2D: {
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_KERNEL, GOBLIN_ATTR_STRIDE, GOBLIN_ATTR_PADDING,
                                               GOBLIN_ATTR_DILATION, GOBLIN_ATTR_CEIL_MODE};
        goblin_attr a[5];
        int32_t na = copy_attrs(&n, keys, 5, a);
        int32_t ins[2] = {gy, x};
        contrib(c, x, add(c, GOBLIN_OP_MAX_POOL2D_BACKWARD, ins, 2, a, na));
        break;
    }
    case GOBLIN_OP_AVG_POOL2D: {
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_KERNEL, GOBLIN_ATTR_STRIDE, GOBLIN_ATTR_PADDING,
                                               GOBLIN_ATTR_CEIL_MODE, GOBLIN_ATTR_COUNT_INCLUDE_PAD};
        goblin_attr a[6];
        int32_t na = copy_attrs(&n, keys, 5, a);
        goblin__node in = nd(c, x);
        a[na++] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, in.shape, in.rank);
        contrib(c, x, add(c, GOBLIN_OP_AVG_POOL2D_BACKWARD, &gy, 1, a, na));
        break;
    }
    case GOBLIN_OP_ADAPTIVE_AVG_POOL2D: {
        goblin__node in = nd(c, x);
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, in.shape, in.rank);
        contrib(c, x, add(c, GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD, &gy, 1, &a, 1));
        break;
    }
    case GOBLIN_OP_SOFTMAX:
    case GOBLIN_OP_LOG_SOFTMAX: {
        if (n.rank == 0) break; /* softmax of one element is constant */
        int64_t a = norm_axis(goblin__attr_i(&n, GOBLIN_ATTR_AXIS, -1), n.rank);
        if (n.op == GOBLIN_OP_SOFTMAX) {
            int32_t s = sum_axes(c, MUL(c, gy, id), &a, 1, true);
            contrib(c, x, MUL(c, id, SUB(c, gy, s)));
        } else {
            int32_t s = sum_axes(c, gy, &a, 1, true);
            contrib(c, x, SUB(c, gy, MUL(c, un(c, GOBLIN_OP_EXP, id), s)));
        }
        break;
    }
    case GOBLIN_OP_SDPA: {
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_CAUSAL, GOBLIN_ATTR_SCALE};
        goblin_attr a[3];
        int32_t na = copy_attrs(&n, keys, 2, a);
        int32_t ins[5] = {gy, n.inputs[0], n.inputs[1], n.inputs[2], n.n_inputs > 3 ? n.inputs[3] : -1};
        for (int32_t i = 0; i < 3; i++) {
            if (!c->reach[n.inputs[i]]) continue;
            a[na] = goblin_attr_int(GOBLIN_ATTR_INDEX, i);
            contrib(c, n.inputs[i], add(c, GOBLIN_OP_SDPA_BACKWARD, ins, n.n_inputs + 1, a, na + 1));
        }
        if (n.n_inputs > 3 && c->reach[n.inputs[3]]) no_rule(c, id, &n, "the mask");
        break;
    }
    case GOBLIN_OP_LAYER_NORM: rule_layer_norm(c, &n, gy); break;
    case GOBLIN_OP_RMS_NORM: rule_norm(c, &n, gy, false); break;
    case GOBLIN_OP_BATCH_NORM: {
        bool training = goblin__attr_i(&n, GOBLIN_ATTR_TRAINING, 0) != 0;
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_TRAINING, GOBLIN_ATTR_EPS};
        goblin_attr a[3];
        int32_t na = copy_attrs(&n, keys, 2, a);
        int32_t ins[5] = {gy, n.inputs[0], n.inputs[1], n.inputs[3], n.inputs[4]};
        for (int32_t i = 0; i < 3; i++) {
            if (!c->reach[n.inputs[i]]) continue;
            a[na] = goblin_attr_int(GOBLIN_ATTR_INDEX, i);
            contrib(c, n.inputs[i], add(c, GOBLIN_OP_BATCH_NORM_BACKWARD, ins, 5, a, na + 1));
        }
        if (!training && (c->reach[n.inputs[3]] || c->reach[n.inputs[4]]))
            no_rule(c, id, &n, "the running statistics in eval mode");
        break;
    }
    case GOBLIN_OP_NLL_LOSS:
    case GOBLIN_OP_CROSS_ENTROPY: {
        bool ce = n.op == GOBLIN_OP_CROSS_ENTROPY;
        static const goblin_attr_key keys[] = {GOBLIN_ATTR_REDUCTION, GOBLIN_ATTR_IGNORE_INDEX,
                                               GOBLIN_ATTR_LABEL_SMOOTHING};
        goblin_attr a[4];
        int32_t na = copy_attrs(&n, keys, ce ? 3 : 2, a);
        if (n.n_inputs >= 3 && c->reach[n.inputs[2]]) {
            no_rule(c, id, &n, "the class weights");
            break;
        }
        int32_t ins[4], ni = 0;
        ins[ni++] = gy;
        if (ce) ins[ni++] = x;
        ins[ni++] = b;
        if (n.n_inputs >= 3) ins[ni++] = n.inputs[2];
        if (!ce) {
            goblin__node in = nd(c, x);
            int64_t dummy = 0;
            a[na++] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, in.rank ? in.shape : &dummy, in.rank);
        }
        contrib(c, x, add(c, ce ? GOBLIN_OP_CROSS_ENTROPY_BACKWARD : GOBLIN_OP_NLL_LOSS_BACKWARD, ins,
                          ni, a, na));
        break;
    }
    default: no_rule(c, id, &n, NULL); break;
    }
}

bool goblin_op_has_backward(goblin_op op) {
    switch (op) {
    case GOBLIN_OP_ADD: case GOBLIN_OP_SUB: case GOBLIN_OP_MUL: case GOBLIN_OP_DIV:
    case GOBLIN_OP_POW: case GOBLIN_OP_MAXIMUM: case GOBLIN_OP_MINIMUM: case GOBLIN_OP_CLAMP:
    case GOBLIN_OP_NEG: case GOBLIN_OP_ABS: case GOBLIN_OP_EXP: case GOBLIN_OP_LOG:
    case GOBLIN_OP_SQRT: case GOBLIN_OP_RSQRT: case GOBLIN_OP_RECIPROCAL: case GOBLIN_OP_SIN:
    case GOBLIN_OP_COS: case GOBLIN_OP_TANH: case GOBLIN_OP_ERF: case GOBLIN_OP_LOG1P:
    case GOBLIN_OP_EXPM1: case GOBLIN_OP_SQUARE: case GOBLIN_OP_FLOOR: case GOBLIN_OP_CEIL:
    case GOBLIN_OP_ROUND: case GOBLIN_OP_TRUNC: case GOBLIN_OP_SIGN: case GOBLIN_OP_CAST:
    case GOBLIN_OP_COPY: case GOBLIN_OP_RELU: case GOBLIN_OP_SIGMOID: case GOBLIN_OP_SILU:
    case GOBLIN_OP_GELU: case GOBLIN_OP_WHERE: case GOBLIN_OP_DROPOUT: case GOBLIN_OP_SUM:
    case GOBLIN_OP_MEAN: case GOBLIN_OP_RESHAPE: case GOBLIN_OP_PERMUTE: case GOBLIN_OP_EXPAND:
    case GOBLIN_OP_SLICE: case GOBLIN_OP_SELECT: case GOBLIN_OP_SPLIT: case GOBLIN_OP_CONCAT:
    case GOBLIN_OP_STACK: case GOBLIN_OP_PAD: case GOBLIN_OP_GATHER: case GOBLIN_OP_EMBEDDING:
    case GOBLIN_OP_MATMUL: case GOBLIN_OP_CONV2D: case GOBLIN_OP_MAX_POOL2D:
    case GOBLIN_OP_AVG_POOL2D: case GOBLIN_OP_ADAPTIVE_AVG_POOL2D: case GOBLIN_OP_SOFTMAX:
    case GOBLIN_OP_LOG_SOFTMAX: case GOBLIN_OP_LAYER_NORM: case GOBLIN_OP_RMS_NORM:
    case GOBLIN_OP_BATCH_NORM: case GOBLIN_OP_NLL_LOSS: case GOBLIN_OP_CROSS_ENTROPY:
    case GOBLIN_OP_SDPA: case GOBLIN_OP_RELU_BACKWARD:
        return true;
    default:
        return false;
    }
}

/* ---- driver ------------------------------------------------------------------ */

static void rollback(goblin_graph *g, int32_t n0, int64_t const_bytes) {
    for (int32_t i = n0; i < g->n_nodes; i++) {
        goblin__free(g->nodes[i].inputs);
        goblin__free(g->nodes[i].attrs);
        goblin__free(g->nodes[i].payload);
    }
    g->n_nodes = n0;
    g->const_bytes = const_bytes;
}

static goblin_err backward(goblin_graph *g, int32_t out_id, int32_t seed_id, const int32_t *wrt,
                           int32_t n_wrt, int32_t *grads) {
    if (!g) return GOBLIN_EINVAL;
    g->err[0] = 0;
    if (n_wrt < 0 || (n_wrt > 0 && (!wrt || !grads)) || out_id < 0 || out_id >= g->n_nodes) {
        snprintf(g->err, sizeof g->err, "backward: bad arguments (loss id %d, %d wrt ids)", (int)out_id,
                 (int)n_wrt);
        return GOBLIN_EINVAL;
    }
    int32_t n0 = g->n_nodes;
    for (int32_t i = 0; i < n_wrt; i++) {
        if (wrt[i] < 0 || wrt[i] >= n0) {
            snprintf(g->err, sizeof g->err, "backward: wrt id %d is not a node", (int)wrt[i]);
            return GOBLIN_EINVAL;
        }
        if (!goblin_dtype_is_float(g->nodes[wrt[i]].dtype)) {
            snprintf(g->err, sizeof g->err, "backward: wrt node %d has dtype %s (needs a float dtype)",
                     (int)wrt[i], goblin_dtype_name(g->nodes[wrt[i]].dtype));
            return GOBLIN_EDTYPE;
        }
    }
    const goblin__node *out = &g->nodes[out_id];
    if (!goblin_dtype_is_float(out->dtype)) {
        snprintf(g->err, sizeof g->err, "backward: loss node %d has dtype %s (needs a float dtype)",
                 (int)out_id, goblin_dtype_name(out->dtype));
        return GOBLIN_EDTYPE;
    }
    if (seed_id < 0) {
        int64_t numel = 1;
        for (int32_t d = 0; d < out->rank; d++) numel *= out->shape[d];
        if (numel != 1) {
            snprintf(g->err, sizeof g->err, "backward: the loss (node %d) must have one element",
                     (int)out_id);
            return GOBLIN_ESHAPE;
        }
    } else {
        if (seed_id >= n0) {
            snprintf(g->err, sizeof g->err, "backward: seed id %d is not a node", (int)seed_id);
            return GOBLIN_EINVAL;
        }
        const goblin__node *s = &g->nodes[seed_id];
        bool ok = s->dtype == out->dtype && s->rank == out->rank;
        for (int32_t d = 0; ok && d < s->rank; d++) ok = s->shape[d] == out->shape[d];
        if (!ok) {
            snprintf(g->err, sizeof g->err, "backward: the seed (node %d) must have the dtype and "
                     "shape of node %d", (int)seed_id, (int)out_id);
            return GOBLIN_ESHAPE;
        }
    }
    ad_ctx c = {.g = g, .n0 = n0};
    int64_t const_bytes = g->const_bytes;
    c.grad = goblin__alloc(sizeof(int32_t) * (size_t)n0);
    c.reach = goblin__calloc((size_t)n0, 1);
    uint8_t *rel = goblin__calloc((size_t)n0, 1);
    if (!c.grad || !c.reach || !rel) {
        goblin__free(c.grad);
        goblin__free(c.reach);
        goblin__free(rel);
        snprintf(g->err, sizeof g->err, "backward: out of memory");
        return GOBLIN_ENOMEM;
    }
    for (int32_t i = 0; i < n0; i++) c.grad[i] = -1;
    for (int32_t i = 0; i < n_wrt; i++) c.reach[wrt[i]] = 1;
    for (int32_t i = 0; i < n0; i++) {
        const goblin__node *n = &g->nodes[i];
        if (c.reach[i] || !goblin_dtype_is_float(n->dtype)) continue;
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (c.reach[n->inputs[k]]) c.reach[i] = 1;
    }
    rel[out_id] = 1;
    for (int32_t i = out_id; i >= 0; i--) {
        if (!rel[i]) continue;
        const goblin__node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++) rel[n->inputs[k]] = 1;
    }
    /* Only nodes on a wrt -> loss path keep reach. */
    for (int32_t i = 0; i < n0; i++) c.reach[i] = c.reach[i] && rel[i];
    goblin__free(rel);

    if (c.reach[out_id]) {
        int32_t seed = seed_id;
        if (seed < 0) seed = full(&c, out->dtype, out->rank, out->shape, 1.0);
        c.grad[out_id] = seed;
        for (int32_t i = out_id; i >= 0 && !c.err; i--) {
            if (!c.reach[i] || c.grad[i] < 0) continue;
            if (g->nodes[i].op == GOBLIN_OP_INPUT || g->nodes[i].op == GOBLIN_OP_CONSTANT) continue;
            rule(&c, i, c.grad[i]);
        }
    }
    for (int32_t i = 0; i < n_wrt && !c.err; i++) {
        int32_t gid = c.grad[wrt[i]];
        if (gid < 0) {
            goblin__node w = nd(&c, wrt[i]);
            gid = full(&c, w.dtype, w.rank, w.shape, 0.0);
            c.grad[wrt[i]] = gid;
        }
        grads[i] = gid;
    }
    goblin_err e = c.err;
    goblin__free(c.grad);
    goblin__free(c.reach);
    if (e) {
        char msg[sizeof g->err];
        snprintf(msg, sizeof msg, "%s", g->err);
        rollback(g, n0, const_bytes);
        snprintf(g->err, sizeof g->err, "%s", msg);
    }
    return e;
}

goblin_err goblin_graph_backward(goblin_graph *g, int32_t loss_id, const int32_t *wrt_ids,
                                 int32_t n_wrt, int32_t *grad_ids_out) {
    return backward(g, loss_id, -1, wrt_ids, n_wrt, grad_ids_out);
}

goblin_err goblin_graph_backward_seeded(goblin_graph *g, int32_t out_id, int32_t seed_id,
                                        const int32_t *wrt_ids, int32_t n_wrt,
                                        int32_t *grad_ids_out) {
    if (seed_id < 0) {
        if (g) snprintf(g->err, sizeof g->err, "backward: bad seed id %d", (int)seed_id);
        return GOBLIN_EINVAL;
    }
    return backward(g, out_id, seed_id, wrt_ids, n_wrt, grad_ids_out);
}
