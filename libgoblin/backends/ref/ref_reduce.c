/* libgoblin/backends/ref/ref_reduce.c - reference kernels: reductions, softmax,
 * normalization and the classification losses.
 *
 * These are the oracle, so they favour the most accurate obvious loop over
 * speed: every float dtype (f64 included) is accumulated sequentially in double,
 * in row-major order of the reduced elements, and rounded once into the output
 * dtype. Integer sums and products wrap modulo 2^64 in unsigned arithmetic (no C
 * undefined behaviour) and come out as i64. Inputs are contiguous (none of these
 * ops takes strided inputs). */
#include "backends/kernel_attrs.h"
#include "backends/kernel_util.h"

/* A reduction seen as two nested iterations: the kept dims (row-major, which is
 * also the order of the contiguous output) and the reduced dims. */
typedef struct rplan {
    int32_t orank, rrank;
    int64_t oshape[GOBLIN_MAX_RANK], ostr[GOBLIN_MAX_RANK];
    int64_t rshape[GOBLIN_MAX_RANK], rstr[GOBLIN_MAX_RANK];
    int64_t n_out, n_red;
} rplan;

static void plan_init(rplan *p, const goblin_tensor *t, uint32_t mask) {
    int64_t str[GOBLIN_MAX_RANK];
    goblin__contig_strides(t->rank, t->shape, str);
    p->orank = p->rrank = 0;
    p->n_out = p->n_red = 1;
    for (int32_t d = 0; d < t->rank; d++) {
        if (mask & (1u << d)) {
            p->rshape[p->rrank] = t->shape[d];
            p->rstr[p->rrank++] = str[d];
            p->n_red *= t->shape[d];
        } else {
            p->oshape[p->orank] = t->shape[d];
            p->ostr[p->orank++] = str[d];
            p->n_out *= t->shape[d];
        }
    }
}

#define FOR_REDUCED(p, it, j)                                                                     \
    goblin__nditer it;                                                                            \
    goblin__nditer_init(&it, (p)->rrank, (p)->rshape, 1, &(p)->rstr);                             \
    for (int64_t j = 0; j < (p)->n_red; j++, goblin__nditer_next(&it))

/* ---- SUM MEAN PROD REDUCE_MAX REDUCE_MIN VAR --------------------------------- */

static double reduce_float(goblin_op op, goblin_dtype dt, const void *x, rplan *p,
                           int64_t base, double correction) {
    double acc;
    switch (op) {
    case GOBLIN_OP_SUM:
    case GOBLIN_OP_MEAN: {
        acc = 0;
        FOR_REDUCED(p, it, j) acc += goblin__load_f64(dt, x, base + it.off[0]);
        return op == GOBLIN_OP_MEAN ? acc / (double)p->n_red : acc;
    }
    case GOBLIN_OP_PROD: {
        acc = 1;
        FOR_REDUCED(p, it, j) acc *= goblin__load_f64(dt, x, base + it.off[0]);
        return acc;
    }
    case GOBLIN_OP_REDUCE_MAX:
    case GOBLIN_OP_REDUCE_MIN: {
        acc = goblin__load_f64(dt, x, base);
        FOR_REDUCED(p, it, j) {
            double v = goblin__load_f64(dt, x, base + it.off[0]);
            if (v != v) return v; /* NaN propagates */
            if (op == GOBLIN_OP_REDUCE_MAX ? v > acc : v < acc) acc = v;
        }
        return acc;
    }
    case GOBLIN_OP_VAR: {
        /* Two passes: the mean, then squared deviations from it. */
        double mean = 0, m2 = 0;
        {
            FOR_REDUCED(p, it, j) mean += goblin__load_f64(dt, x, base + it.off[0]);
        }
        mean /= (double)p->n_red;
        {
            FOR_REDUCED(p, it, j) {
                double d = goblin__load_f64(dt, x, base + it.off[0]) - mean;
                m2 += d * d;
            }
        }
        double div = (double)p->n_red - correction;
        return m2 / (div > 0 ? div : 0.0);
    }
    default: return 0;
    }
}

static int64_t reduce_int(goblin_op op, goblin_dtype dt, const void *x, rplan *p,
                          int64_t base) {
    switch (op) {
    case GOBLIN_OP_SUM: {
        uint64_t acc = 0;
        FOR_REDUCED(p, it, j) acc += (uint64_t)goblin__load_i64(dt, x, base + it.off[0]);
        return (int64_t)acc;
    }
    case GOBLIN_OP_PROD: {
        uint64_t acc = 1;
        FOR_REDUCED(p, it, j) acc *= (uint64_t)goblin__load_i64(dt, x, base + it.off[0]);
        return (int64_t)acc;
    }
    case GOBLIN_OP_REDUCE_MAX:
    case GOBLIN_OP_REDUCE_MIN: {
        int64_t acc = goblin__load_i64(dt, x, base);
        FOR_REDUCED(p, it, j) {
            int64_t v = goblin__load_i64(dt, x, base + it.off[0]);
            if (op == GOBLIN_OP_REDUCE_MAX ? v > acc : v < acc) acc = v;
        }
        return acc;
    }
    default: return 0;
    }
}

static goblin_err k_reduce(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *x = &in[0];
    rplan p;
    plan_init(&p, x, goblin__axes_mask(node, x->rank));
    goblin_op op = node->op;
    if (p.n_red == 0 && p.n_out > 0 && (op == GOBLIN_OP_REDUCE_MAX || op == GOBLIN_OP_REDUCE_MIN))
        return goblin__errf(k->msg, k->cap, GOBLIN_ERANGE, "reduction over zero elements");
    bool fl = goblin_dtype_is_float(x->dtype);
    double corr = (double)goblin__attr_i(node, GOBLIN_ATTR_CORRECTION, 1);
    goblin__nditer ot;
    goblin__nditer_init(&ot, p.orank, p.oshape, 1, &p.ostr);
    for (int64_t o = 0; o < p.n_out; o++, goblin__nditer_next(&ot)) {
        if (fl)
            goblin__store_f64(out->dtype, out->data, o,
                              reduce_float(op, x->dtype, x->data, &p, ot.off[0], corr));
        else
            goblin__store_i64(out->dtype, out->data, o,
                              reduce_int(op, x->dtype, x->data, &p, ot.off[0]));
    }
    return GOBLIN_OK;
}

/* ---- ARGMAX ARGMIN ---------------------------------------------------------- */

static goblin_err k_arg(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                        int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *x = &in[0];
    uint32_t mask = goblin__attr_find(node, GOBLIN_ATTR_AXIS) ? goblin__axis_mask(node, x->rank, 0)
                                                               : (1u << x->rank) - 1u;
    rplan p;
    plan_init(&p, x, mask);
    if (p.n_red == 0 && p.n_out > 0)
        return goblin__errf(k->msg, k->cap, GOBLIN_ERANGE, "arg reduction over zero elements");
    bool mx = node->op == GOBLIN_OP_ARGMAX;
    bool fl = goblin_dtype_is_float(x->dtype);
    int64_t *y = out->data;
    goblin__nditer ot;
    goblin__nditer_init(&ot, p.orank, p.oshape, 1, &p.ostr);
    for (int64_t o = 0; o < p.n_out; o++, goblin__nditer_next(&ot)) {
        int64_t best = 0;
        if (fl) {
            double bv = 0;
            FOR_REDUCED(&p, it, j) {
                double v = goblin__load_f64(x->dtype, x->data, ot.off[0] + it.off[0]);
                if (v != v) { /* the first NaN is the extreme, as torch */
                    best = j;
                    break;
                }
                if (j == 0 || (mx ? v > bv : v < bv)) {
                    bv = v;
                    best = j;
                }
            }
        } else {
            int64_t bv = 0;
            FOR_REDUCED(&p, it, j) {
                int64_t v = goblin__load_i64(x->dtype, x->data, ot.off[0] + it.off[0]);
                if (j == 0 || (mx ? v > bv : v < bv)) {
                    bv = v;
                    best = j;
                }
            }
        }
        y[o] = best;
    }
    return GOBLIN_OK;
}

/* ---- CUMSUM, SOFTMAX, LOG_SOFTMAX (along one axis; output shaped as input) ---- */

static goblin_err k_cumsum(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    (void)k; (void)n_in;
    const goblin_tensor *x = &in[0];
    rplan p;
    plan_init(&p, x, goblin__axis_mask(node, x->rank, 0));
    bool fl = goblin_dtype_is_float(x->dtype);
    goblin__nditer ot;
    goblin__nditer_init(&ot, p.orank, p.oshape, 1, &p.ostr);
    for (int64_t o = 0; o < p.n_out; o++, goblin__nditer_next(&ot)) {
        /* Input and output are contiguous with the same shape: same offsets. */
        double facc = 0;
        uint64_t iacc = 0;
        FOR_REDUCED(&p, it, j) {
            int64_t off = ot.off[0] + it.off[0];
            if (fl) {
                facc += goblin__load_f64(x->dtype, x->data, off);
                goblin__store_f64(out->dtype, out->data, off, facc);
            } else {
                iacc += (uint64_t)goblin__load_i64(x->dtype, x->data, off);
                goblin__store_i64(out->dtype, out->data, off, (int64_t)iacc);
            }
        }
    }
    return GOBLIN_OK;
}

static goblin_err k_softmax(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    (void)k; (void)n_in;
    const goblin_tensor *x = &in[0];
    goblin_dtype dt = x->dtype;
    bool lg = node->op == GOBLIN_OP_LOG_SOFTMAX;
    rplan p;
    plan_init(&p, x, goblin__axis_mask(node, x->rank, -1));
    goblin__nditer ot;
    goblin__nditer_init(&ot, p.orank, p.oshape, 1, &p.ostr);
    for (int64_t o = 0; o < p.n_out; o++, goblin__nditer_next(&ot)) {
        int64_t b = ot.off[0];
        double m = -INFINITY, s = 0;
        {
            FOR_REDUCED(&p, it, j) {
                double v = goblin__load_f64(dt, x->data, b + it.off[0]);
                if (v > m || v != v) m = v;
                if (m != m) break;
            }
        }
        {
            FOR_REDUCED(&p, it, j) s += exp(goblin__load_f64(dt, x->data, b + it.off[0]) - m);
        }
        double ls = log(s);
        FOR_REDUCED(&p, it, j) {
            double d = goblin__load_f64(dt, x->data, b + it.off[0]) - m;
            goblin__store_f64(dt, out->data, b + it.off[0], lg ? d - ls : exp(d) / s);
        }
    }
    return GOBLIN_OK;
}

/* ---- normalization ------------------------------------------------------------ */

static goblin_err k_batch_norm(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    (void)k; (void)n_in;
    const goblin_tensor *x = &in[0];
    goblin_dtype dt = x->dtype;
    int64_t n = x->shape[0], c = x->shape[1], s = 1;
    for (int32_t d = 2; d < x->rank; d++) s *= x->shape[d];
    bool training = goblin__attr_i(node, GOBLIN_ATTR_TRAINING, 0) != 0;
    double eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5);
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        if (training) {
            double cnt = (double)(n * s), acc = 0, m2 = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < s; j++)
                    acc += goblin__load_f64(dt, x->data, (i * c + ch) * s + j);
            mean = acc / cnt;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < s; j++) {
                    double d = goblin__load_f64(dt, x->data, (i * c + ch) * s + j) - mean;
                    m2 += d * d;
                }
            var = m2 / cnt; /* biased, as torch normalizes in training */
        } else {
            mean = goblin__load_f64(dt, in[3].data, ch);
            var = goblin__load_f64(dt, in[4].data, ch);
        }
        double rstd = 1.0 / sqrt(var + eps);
        double w = goblin__load_f64(dt, in[1].data, ch), b = goblin__load_f64(dt, in[2].data, ch);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++) {
                int64_t off = (i * c + ch) * s + j;
                double v = goblin__load_f64(dt, x->data, off);
                goblin__store_f64(dt, out->data, off, (v - mean) * rstd * w + b);
            }
    }
    return GOBLIN_OK;
}

/* LAYER_NORM and RMS_NORM: rows of the last norm_ndim dims. */
static goblin_err k_norm(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    (void)k;
    const goblin_tensor *x = &in[0];
    goblin_dtype dt = x->dtype;
    bool rms = node->op == GOBLIN_OP_RMS_NORM;
    int64_t nd = goblin__attr_i(node, GOBLIN_ATTR_NORM_NDIM, 1);
    double eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, rms ? 1e-6 : 1e-5);
    int64_t len = 1, rows = 1;
    for (int32_t d = 0; d < x->rank; d++) {
        if (d >= x->rank - nd) len *= x->shape[d];
        else rows *= x->shape[d];
    }
    const void *w = n_in > 1 ? in[1].data : NULL, *bias = n_in > 2 ? in[2].data : NULL;
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r * len;
        double mean = 0, m2 = 0;
        if (!rms) {
            for (int64_t j = 0; j < len; j++) mean += goblin__load_f64(dt, x->data, b + j);
            mean /= (double)len;
        }
        for (int64_t j = 0; j < len; j++) {
            double d = goblin__load_f64(dt, x->data, b + j) - mean;
            m2 += d * d;
        }
        double rstd = 1.0 / sqrt(m2 / (double)len + eps);
        for (int64_t j = 0; j < len; j++) {
            double v = (goblin__load_f64(dt, x->data, b + j) - mean) * rstd;
            if (w) v *= goblin__load_f64(dt, w, j);
            if (bias) v += goblin__load_f64(dt, bias, j);
            goblin__store_f64(dt, out->data, b + j, v);
        }
    }
    return GOBLIN_OK;
}

/* ---- losses ------------------------------------------------------------------- */

/* NLL_LOSS and CROSS_ENTROPY. Input [N, C, D...] (D = product of the trailing dims)
 * or [C]; element (n, c, d) at (n*C + c)*D + d; target (n, d) at n*D + d. */
static goblin_err k_loss(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0], *t = &in[1];
    goblin_dtype dt = x->dtype;
    bool ce = node->op == GOBLIN_OP_CROSS_ENTROPY;
    int64_t n = 1, c, dd = 1;
    if (x->rank == 1) {
        c = x->shape[0];
    } else {
        n = x->shape[0];
        c = x->shape[1];
        for (int32_t d = 2; d < x->rank; d++) dd *= x->shape[d];
    }
    const void *wt = n_in > 2 ? in[2].data : NULL;
    int64_t red = goblin__attr_i(node, GOBLIN_ATTR_REDUCTION, GOBLIN_REDUCTION_MEAN);
    int64_t ignore = goblin__attr_i(node, GOBLIN_ATTR_IGNORE_INDEX, -100);
    double eps = ce ? goblin__attr_f(node, GOBLIN_ATTR_LABEL_SMOOTHING, 0.0) : 0.0;
    double total = 0, wsum = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < dd; d++) {
            int64_t pos = i * dd + d;
            int64_t tg = goblin__load_i64(t->dtype, t->data, pos);
            double loss = 0;
            if (tg != ignore) {
                if (tg < 0 || tg >= c)
                    return goblin__errf(k->msg, k->cap, GOBLIN_EINDEX,
                                        "target %lld at position %lld is outside [0, %lld) and "
                                        "is not ignore_index %lld",
                                        (long long)tg, (long long)pos, (long long)c,
                                        (long long)ignore);
                int64_t base = i * c * dd + d;
                double w = wt ? goblin__load_f64(dt, wt, tg) : 1.0;
                double lp_t;
                if (ce) {
                    double m = -INFINITY, s = 0, smooth = 0;
                    for (int64_t cc = 0; cc < c; cc++) {
                        double v = goblin__load_f64(dt, x->data, base + cc * dd);
                        if (v > m || v != v) m = v;
                    }
                    for (int64_t cc = 0; cc < c; cc++)
                        s += exp(goblin__load_f64(dt, x->data, base + cc * dd) - m);
                    double ls = log(s);
                    lp_t = goblin__load_f64(dt, x->data, base + tg * dd) - m - ls;
                    if (eps != 0) {
                        for (int64_t cc = 0; cc < c; cc++) {
                            double lp = goblin__load_f64(dt, x->data, base + cc * dd) - m - ls;
                            smooth -= (wt ? goblin__load_f64(dt, wt, cc) : 1.0) * lp;
                        }
                    }
                    loss = (1 - eps) * (-w * lp_t) + eps / (double)c * smooth;
                } else {
                    lp_t = goblin__load_f64(dt, x->data, base + tg * dd);
                    loss = -w * lp_t;
                }
                wsum += w;
            }
            if (red == GOBLIN_REDUCTION_NONE) goblin__store_f64(dt, out->data, pos, loss);
            else total += loss;
        }
    if (red == GOBLIN_REDUCTION_MEAN) goblin__store_f64(dt, out->data, 0, total / wsum);
    else if (red == GOBLIN_REDUCTION_SUM) goblin__store_f64(dt, out->data, 0, total);
    return GOBLIN_OK;
}

void goblin__ref_register_reduce(goblin__kernel_fn *t) {
    t[GOBLIN_OP_SUM] = k_reduce;
    t[GOBLIN_OP_MEAN] = k_reduce;
    t[GOBLIN_OP_REDUCE_MAX] = k_reduce;
    t[GOBLIN_OP_REDUCE_MIN] = k_reduce;
    t[GOBLIN_OP_PROD] = k_reduce;
    t[GOBLIN_OP_VAR] = k_reduce;
    t[GOBLIN_OP_ARGMAX] = k_arg;
    t[GOBLIN_OP_ARGMIN] = k_arg;
    t[GOBLIN_OP_CUMSUM] = k_cumsum;
    t[GOBLIN_OP_SOFTMAX] = k_softmax;
    t[GOBLIN_OP_LOG_SOFTMAX] = k_softmax;
    t[GOBLIN_OP_BATCH_NORM] = k_batch_norm;
    t[GOBLIN_OP_LAYER_NORM] = k_norm;
    t[GOBLIN_OP_RMS_NORM] = k_norm;
    t[GOBLIN_OP_NLL_LOSS] = k_loss;
    t[GOBLIN_OP_CROSS_ENTROPY] = k_loss;
}
