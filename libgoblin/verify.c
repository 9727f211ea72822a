/* libgoblin/verify.c - Freivalds' check of matmul tiles, replica comparison and
 * spot-checks (goblin/verify.h).
 *
 * Every threshold here is derived in docs/verification.md; the comments only
 * name the formula. Notation: u is the unit roundoff of the result's dtype,
 * u64 = 2^-53 that of the f64 arithmetic the check itself runs in,
 * gamma_j(u) = j u / (1 - j u). */
#include <goblin/verify.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include "alloc.h"
#include "graph_impl.h"
#include "kernel_util.h"
#include "random.h"

/* Philox streams of our draws, outside the catalogue's range (the random ops use
 * their op value as stream), so no op output can ever equal a secret vector. */
#define VERIFY_STREAM_FREIVALDS 0x46524556u /* "FREV" */
#define VERIFY_STREAM_SAMPLE 0x53414d50u    /* "SAMP" */

#define U64 0x1p-53
#define ETA64 0x1p-1074 /* absolute error of an underflowing f64 product */

const char *goblin_verdict_name(goblin_verdict_kind kind) {
    switch (kind) {
    case GOBLIN_VERDICT_ACCEPT: return "accept";
    case GOBLIN_VERDICT_ESCALATE: return "escalate";
    case GOBLIN_VERDICT_REJECT: return "reject";
    default: return "invalid";
    }
}

const char *goblin_verify_reason_name(goblin_verify_reason reason) {
    static const char *const names[GOBLIN_VERIFY_REASON_COUNT] = {
        "ok", "bit_equal", "between", "exceeds_bound", "nonfinite", "shape", "dtype", "uncheckable",
    };
    if ((unsigned)reason >= GOBLIN_VERIFY_REASON_COUNT) return "invalid";
    return names[reason];
}

static double gamma_n(double n, double u) {
    double nu = n * u;
    return nu < 1 ? nu / (1 - nu) : INFINITY;
}

static double max_finite(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return DBL_MAX;
    case GOBLIN_DTYPE_F16: return 65504.0;
    case GOBLIN_DTYPE_BF16: return 0x1.fep127;
    default: return FLT_MAX;
    }
}

static void verdict_init(goblin_verdict *v) {
    memset(v, 0, sizeof *v);
    v->kind = GOBLIN_VERDICT_ACCEPT;
    v->reason = GOBLIN_VERIFY_OK;
    v->worst_index = -1;
}

static goblin_err verdict_reject(goblin_verdict *v, goblin_verify_reason why) {
    verdict_init(v);
    v->kind = GOBLIN_VERDICT_REJECT;
    v->reason = why;
    v->worst_ratio = INFINITY;
    v->worst_tight_ratio = INFINITY;
    return GOBLIN_OK;
}

/* discrepancy / level, with 0/0 = 0 and x/0 = inf. */
static double ratio_of(double d, double level) {
    if (d == 0) return 0;
    if (!(level > 0)) return INFINITY;
    return d / level;
}

/* Is the descriptor's shape sane (rank in range, dims >= 0)? */
static bool shape_ok(const goblin_tensor *t) {
    if (t->rank < 0 || t->rank > GOBLIN_MAX_RANK) return false;
    for (int32_t d = 0; d < t->rank; d++)
        if (t->shape[d] < 0) return false;
    return true;
}

static bool same_shape(const goblin_tensor *a, const goblin_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* ======================================================================== */
/* Freivalds                                                                */
/* ======================================================================== */

void goblin_freivalds_params_default(goblin_freivalds_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->seed = 0;
    p->vectors = 4;
    p->tight_sigmas = 6.0;
    p->bound_sigmas = 10.0;
    p->k0 = 0;
    p->kn = -1;
}

/* The passes over A, B and C are where the check spends its time: built for
 * AVX2+FMA as well as the baseline, chosen at load time (an FMA only removes roundings, so the error
 * bounds hold for both). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define GOBLIN__HOT_CLONES __attribute__((target_clones("avx2,fma", "default")))
#else
#define GOBLIN__HOT_CLONES
#endif

/* @p len elements with element stride @p stride (may be 0 or negative) into f64. */
static void load_row(goblin_dtype dt, const char *base, int64_t stride, int64_t len, double *buf) {
    if (dt == GOBLIN_DTYPE_F32) {
        const float *p = (const float *)base;
        if (stride == 1)
            for (int64_t j = 0; j < len; j++) buf[j] = p[j];
        else
            for (int64_t j = 0; j < len; j++) buf[j] = p[j * stride];
    } else {
        const double *p = (const double *)base;
        if (stride == 1)
            memcpy(buf, p, (size_t)len * sizeof(double));
        else
            for (int64_t j = 0; j < len; j++) buf[j] = p[j * stride];
    }
}

/* The vectors are handled four at a time, one per lane of a GCC/Clang vector
 * (two SSE2 registers on baseline x86-64, one AVX register where enabled), so a
 * row of A, B or C is read once for four products. Lanes beyond `vectors` hold
 * r = 0 and are ignored. */
#define LANES 4
typedef double v4 __attribute__((vector_size(LANES * sizeof(double))));

#define splat(x) ((v4){(x), (x), (x), (x)})


/* For each lane: sum_j x_j w_j and sum_j |x_j| wa_j (wa >= 0); with @p sq, also
 * sum x_j^2 and sum |x_j| (lane-independent). Two partial sums per quantity: any
 * summation order keeps the gamma_len error bound, and this one pipelines. */
GOBLIN__HOT_CLONES
static void dot4(const double *x, const v4 *w, const v4 *wa, int64_t len, v4 *sum, v4 *sum_abs,
                 double *sq, double *ab) {
    v4 s0 = splat(0), s1 = splat(0), a0 = splat(0), a1 = splat(0);
    double q0 = 0, q1 = 0, b0 = 0, b1 = 0;
    int64_t j = 0;
    for (; j + 2 <= len; j += 2) {
        double x0 = x[j], x1 = x[j + 1], ax0 = fabs(x0), ax1 = fabs(x1);
        s0 += splat(x0) * w[j];
        s1 += splat(x1) * w[j + 1];
        a0 += splat(ax0) * wa[j];
        a1 += splat(ax1) * wa[j + 1];
        q0 += x0 * x0;
        q1 += x1 * x1;
        b0 += ax0;
        b1 += ax1;
    }
    if (j < len) {
        double x0 = x[j], ax0 = fabs(x0);
        s0 += splat(x0) * w[j];
        a0 += splat(ax0) * wa[j];
        q0 += x0 * x0;
        b0 += ax0;
    }
    *sum = s0 + s1;
    *sum_abs = a0 + a1;
    if (sq) {
        *sq = q0 + q1;
        *ab = b0 + b1;
    }
}

typedef struct fv {
    goblin_dtype dt;
    size_t es;
    int64_t m, n, K;
    int64_t ng; /* groups of LANES vectors */
    const char *a0; /* A at (0, k0) */
    int64_t as0, as1;
    const char *b0; /* B at (k0, 0) */
    int64_t bs0, bs1;
    const char *c0;
    int64_t cs0, cs1;
    v4 *r, *ra;         /* [ng][n] the secret vectors and |r| */
    v4 *y, *s;          /* [ng][K] B r and |B| |r| */
    v4 *z, *t;          /* [ng][m] A (B r) and |A| (|B| |r|) */
    double *asq, *a1;   /* [m] sum a^2 and sum |a| per row of A */
    double *colsq;      /* [n] sum b^2 per column of B */
    unsigned char *bad; /* [n] column of B holds NaN/inf or overflows */
    double *buf;        /* one row, max(n, K) */
} fv;

/* y = B r, s = |B| |r| and the column norms of B, one pass over B by rows.
 * @p sanitize: read NaN/inf as 0 (their columns are masked: r_j = 0 there). */
static void fv_pass_b(fv *f, bool sanitize) {
    memset(f->colsq, 0, (size_t)f->n * sizeof(double));
    for (int64_t l = 0; l < f->K; l++) {
        load_row(f->dt, f->b0 + l * f->bs0 * (int64_t)f->es, f->bs1, f->n, f->buf);
        if (sanitize)
            for (int64_t j = 0; j < f->n; j++)
                if (!isfinite(f->buf[j])) f->buf[j] = 0;
        for (int64_t j = 0; j < f->n; j++) f->colsq[j] += f->buf[j] * f->buf[j];
        for (int64_t g = 0; g < f->ng; g++)
            dot4(f->buf, f->r + g * f->n, f->ra + g * f->n, f->n, &f->y[g * f->K + l],
                 &f->s[g * f->K + l], NULL, NULL);
    }
}

static void fv_pass_a(fv *f) {
    if (f->K == 0) return; /* A (B r) = 0 and the norms are 0: the scratch is zeroed */
    for (int64_t i = 0; i < f->m; i++) {
        load_row(f->dt, f->a0 + i * f->as0 * (int64_t)f->es, f->as1, f->K, f->buf);
        for (int64_t g = 0; g < f->ng; g++)
            dot4(f->buf, f->y + g * f->K, f->s + g * f->K, f->K, &f->z[g * f->m + i],
                 &f->t[g * f->m + i], g == 0 ? &f->asq[i] : NULL, &f->a1[i]);
    }
}

static void fv_free(fv *f) {
    goblin__free(f->r);
    goblin__free(f->ra);
    goblin__free(f->y);
    goblin__free(f->s);
    goblin__free(f->z);
    goblin__free(f->t);
    goblin__free(f->asq);
    goblin__free(f->a1);
    goblin__free(f->colsq);
    goblin__free(f->bad);
    goblin__free(f->buf);
}

/* goblin__calloc aligns to 64 bytes, enough for v4. */
static double *alloc_doubles(int64_t count) {
    return goblin__calloc((size_t)(count > 0 ? count : 1), sizeof(double));
}
static v4 *alloc_v4(int64_t count) {
    return goblin__calloc((size_t)(count > 0 ? count : 1), sizeof(v4));
}

goblin_err goblin_verify_matmul(const goblin_tensor *a, const goblin_tensor *b,
                                const goblin_tensor *c, const goblin_freivalds_params *pp,
                                goblin_verdict *out) {
    if (!a || !b || !c || !out) return GOBLIN_EINVAL;
    goblin_freivalds_params p;
    if (pp) p = *pp;
    else goblin_freivalds_params_default(&p);
    if (p.vectors < 1 || p.vectors > GOBLIN_FREIVALDS_MAX_VECTORS || !(p.tight_sigmas > 0) ||
        !(p.bound_sigmas >= 0) || p.tight_sigmas == INFINITY || p.bound_sigmas == INFINITY)
        return GOBLIN_EINVAL;
    if (a->rank != 2 || b->rank != 2 || a->shape[0] < 0 || a->shape[1] < 0 || b->shape[0] < 0 ||
        b->shape[1] < 0 || a->shape[1] != b->shape[0])
        return GOBLIN_ESHAPE;
    goblin_dtype dt = a->dtype;
    if ((dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) || b->dtype != dt) return GOBLIN_EDTYPE;
    int64_t m = a->shape[0], kfull = a->shape[1], n = b->shape[1];
    if (m > GOBLIN_MAX_DIM || kfull > GOBLIN_MAX_DIM || n > GOBLIN_MAX_DIM) return GOBLIN_ESHAPE;
    if (p.k0 < 0 || p.k0 > kfull) return GOBLIN_EINVAL;
    int64_t K = p.kn < 0 ? kfull - p.k0 : p.kn;
    if (K > kfull - p.k0) return GOBLIN_EINVAL;
    if ((m && K && !a->data) || (K && n && !b->data)) return GOBLIN_EINVAL;

    /* The claimed result is judged, not trusted. */
    if (c->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (c->rank != 2 || c->shape[0] != m || c->shape[1] != n)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (m && n && !c->data) return GOBLIN_EINVAL;

    verdict_init(out);
    if (m == 0 || n == 0) return GOBLIN_OK; /* nothing claimed, nothing to check */

    fv f;
    memset(&f, 0, sizeof f);
    f.dt = dt;
    f.es = goblin_dtype_size(dt);
    f.m = m;
    f.n = n;
    f.K = K;
    int64_t nv = p.vectors;
    f.ng = (nv + LANES - 1) / LANES;
    f.as0 = a->strides[0];
    f.as1 = a->strides[1];
    f.bs0 = b->strides[0];
    f.bs1 = b->strides[1];
    f.cs0 = c->strides[0];
    f.cs1 = c->strides[1];
    /* (0, k0) of A and (k0, 0) of B; no arithmetic on a NULL of an empty operand */
    f.a0 = K ? (const char *)a->data + p.k0 * f.as1 * (int64_t)f.es : NULL;
    f.b0 = K ? (const char *)b->data + p.k0 * f.bs0 * (int64_t)f.es : NULL;
    f.c0 = (const char *)c->data;
    f.r = alloc_v4(f.ng * n);
    f.ra = alloc_v4(f.ng * n);
    f.y = alloc_v4(f.ng * K);
    f.s = alloc_v4(f.ng * K);
    f.z = alloc_v4(f.ng * m);
    f.t = alloc_v4(f.ng * m);
    f.asq = alloc_doubles(m);
    f.a1 = alloc_doubles(m);
    f.colsq = alloc_doubles(n);
    f.bad = goblin__calloc((size_t)n, 1);
    f.buf = alloc_doubles(n > K ? n : K);
    if (!f.r || !f.ra || !f.y || !f.s || !f.z || !f.t || !f.asq || !f.a1 || !f.colsq || !f.bad ||
        !f.buf) {
        fv_free(&f);
        return GOBLIN_ENOMEM;
    }

    /* The secret vectors: r_j = +-(1/2 + U/2), U uniform [0, 1) from Philox, sign
     * from an independent bit. |r_j| >= 1/2 means one wrong element always moves
     * its row's check by at least half its error; the continuous magnitude (density
     * <= 1) bounds the chance that several errors cancel; |r_j| <= 1 and symmetry
     * give Hoeffding's tail bound for the honest rounding errors. Vector v, element j
     * is Philox draw v * n + j of the stream "FREV" under key = seed. */
    for (int64_t v = 0; v < nv; v++)
        for (int64_t j = 0; j < n; j++) {
            uint32_t x[4];
            goblin__rng_draw(p.seed, 0, VERIFY_STREAM_FREIVALDS,
                             (uint64_t)v * (uint64_t)n + (uint64_t)j, x);
            double mag = 0.5 + 0.5 * goblin__rng_u01(x, 53);
            f.r[(v / LANES) * n + j][v % LANES] = (x[2] & 1u) ? -mag : mag;
            f.ra[(v / LANES) * n + j][v % LANES] = mag;
        }

    fv_pass_b(&f, false);
    /* Columns of B with NaN/inf (or squares overflowing f64) cannot be checked
     * algebraically: mask them out of every vector and redo the pass. */
    int64_t n_bad = 0;
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(f.colsq[j])) {
            f.bad[j] = 1;
            n_bad++;
            for (int64_t g = 0; g < f.ng; g++) f.r[g * n + j] = f.ra[g * n + j] = splat(0);
        }
    if (n_bad) {
        fv_pass_b(&f, true);
        for (int64_t j = 0; j < n; j++)
            if (f.bad[j]) f.colsq[j] = 0;
    }
    fv_pass_a(&f);

    /* ---- the per-row levels (docs/verification.md, "Freivalds") ---- */
    double u = goblin__unit_roundoff(dt);
    double rel_c, abs_c;
    goblin_op_contract(GOBLIN_OP_MATMUL, dt, K, &rel_c, &abs_c);
    double dn = (double)n, dK = (double)K;
    double g_z = gamma_n(dn + dK + 2, U64); /* our f64 error in A (B r) */
    double g_w = gamma_n(dn + 2, U64);      /* our f64 error in C r */
    /* computed sums of magnitudes -> upper bounds of the exact ones: a sum of j terms
     * is within gamma_j, so exact <= computed / (1 - gamma_j) <= computed (1 + 2 gamma_j) */
    double grow = 1 + 2 * gamma_n(dn + dK + 4, U64);
    double bf2 = 0;
    for (int64_t j = 0; j < n; j++) bf2 += f.colsq[j];
    double bf = sqrt(bf2) * grow;
    double n_good = (double)(n - n_bad);
    double sr1[GOBLIN_FREIVALDS_MAX_VECTORS], nb[GOBLIN_FREIVALDS_MAX_VECTORS];
    for (int64_t v = 0; v < nv; v++) {
        double s1 = 0, s2 = 0;
        for (int64_t j = 0; j < n; j++) {
            double rj = f.r[(v / LANES) * n + j][v % LANES];
            s1 += fabs(rj);
            s2 += f.colsq[j] * rj * rj;
        }
        sr1[v] = s1 * grow;
        nb[v] = sqrt(s2) * grow;
    }
    double sig_k = u * sqrt((dK + 1) / 3);   /* claimed: K + 1 roundings, variance u^2/3 each */
    double sig_z = U64 * sqrt((dn + dK) / 3); /* ours in A (B r) */
    double sig_w = U64 * sqrt(dn / 3);        /* ours in C r */
    double maxf = max_finite(dt);
    bool rel_finite = isfinite(rel_c);

    int64_t unchecked = 0;
    double worst = 0, worst_tight = 0;
    int64_t worst_row = -1, nonfinite = 0, above_tight = 0, above_bound = 0, checked = 0;
    bool reject_nonfinite = false;
    for (int64_t i = 0; i < m; i++) {
        double na = sqrt(f.asq[i]) * grow;
        bool row_ok = isfinite(f.asq[i]) && isfinite(f.a1[i]);
        for (int64_t v = 0; v < nv && row_ok; v++)
            row_ok = isfinite(f.z[(v / LANES) * m + i][v % LANES]) &&
                     isfinite(f.t[(v / LANES) * m + i][v % LANES]);
        load_row(dt, f.c0 + i * f.cs0 * (int64_t)f.es, f.cs1, n, f.buf);
        /* NaN/inf in C: impossible for an honest result when a_i and b_j are finite and
         * ||a_i|| ||b_j|| (1 + rel) + abs < max finite (no partial sum can overflow). */
        bool row_nonfinite = false, row_unsure = !row_ok;
        for (int64_t j = 0; j < n; j++) {
            if (isfinite(f.buf[j])) continue;
            f.buf[j] = 0;
            if (f.bad[j] || !row_ok) continue; /* unchecked column or row */
            double cap = rel_finite ? na * sqrt(f.colsq[j]) * grow * (1 + rel_c) + abs_c : INFINITY;
            if (cap < maxf) {
                nonfinite++;
                row_nonfinite = true;
            } else {
                row_unsure = true;
            }
        }
        if (row_nonfinite) {
            reject_nonfinite = true;
            if (worst != INFINITY) {
                worst = worst_tight = INFINITY;
                worst_row = i;
            }
            continue;
        }
        if (row_unsure) {
            unchecked++;
            continue;
        }
        double abs_own = ETA64 * (dn * f.a1[i] * grow + dK + dn + 4);
        for (int64_t g = 0; g < f.ng; g++) {
            v4 wv, qv;
            dot4(f.buf, f.r + g * n, f.ra + g * n, n, &wv, &qv, NULL, NULL);
            for (int64_t lane = 0; lane < LANES && g * LANES + lane < nv; lane++) {
                int64_t v = g * LANES + lane;
                double w = wv[lane], q = qv[lane];
                double z = f.z[g * m + i][lane];
                double P = f.t[g * m + i][lane] * grow; /* >= exact |A| (|B| |r|) */
                double Q = q * grow;                    /* >= exact |C| |r| */
                double claim_det = rel_finite ? rel_c * P + abs_c * sr1[v] : INFINITY;
                double claim_h = (p.bound_sigmas > 0 && rel_finite)
                                     ? p.bound_sigmas * (rel_c * na * bf + abs_c * sqrt(n_good))
                                     : INFINITY;
                /* (1 + 16 u64): the rounding of this formula and of d itself */
                double R = (fmin(claim_det, claim_h) + g_z * P + g_w * Q + abs_own) * (1 + 16 * U64);
                double sc = sig_k * fmin(na * nb[v], P);
                double so = sig_z * P + sig_w * Q;
                double T = p.tight_sigmas * sqrt(sc * sc + so * so) + abs_c * sr1[v] + abs_own;
                if (T > R) T = R;
                double d = fabs(w - z);
                /* An honest |C| |r| is at most (1 + rel) |A| |B| |r| + abs sum |r|: a cheap
                 * second rigorous test that catches absurd magnitudes outright. */
                double qmax = rel_finite ? (1 + rel_c) * P + abs_c * sr1[v] : INFINITY;
                double qlow = q / (1 + g_w);
                double rr = ratio_of(d, R), rt = ratio_of(d, T);
                if (!(d == d)) rr = rt = INFINITY; /* overflow in C r: absurd values */
                if (qlow > qmax) {
                    double rq = ratio_of(qlow, qmax);
                    if (rq > rr) rr = rq;
                    if (rr > rt) rt = rr;
                }
                checked++;
                if (rt > 1) above_tight++;
                if (rr > 1) above_bound++;
                if (rr > worst || (worst_row < 0 && rr >= worst)) {
                    worst = rr;
                    worst_row = i;
                }
                if (rt > worst_tight) worst_tight = rt;
            }
        }
    }
    fv_free(&f);

    out->checked = checked;
    out->above_tight = above_tight;
    out->above_bound = above_bound;
    out->nonfinite = nonfinite;
    /* elements of C left unchecked: whole rows, and masked columns of the others */
    out->unchecked = unchecked * n + n_bad * (m - unchecked);
    out->worst_index = worst_row;
    out->worst_ratio = worst;
    out->worst_tight_ratio = worst_tight;
    if (reject_nonfinite || above_bound) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = reject_nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_EXCEEDS_BOUND;
    } else if (above_tight) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_BETWEEN;
    } else if (out->unchecked) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_UNCHECKABLE;
    }
    return GOBLIN_OK;
}

/* ======================================================================== */
/* Replica comparison and spot-checks                                       */
/* ======================================================================== */

typedef struct rule {
    goblin_dtype dt;
    double rel, abs;
    double maxf;
    bool is_float;
    bool reducing; /* k > 1: the op's scale is sum |terms|, unknown without a scale */
} rule;

enum { AGREE = 0, DIFFER_ESCALATE = 1, DIFFER_REJECT = 2 };

typedef struct tally {
    int64_t checked, differ, reject, nonfinite;
    int64_t worst_index;
    double worst;
} tally;

/* Judge one pair (x from a result, y from the other or the reference); @p scale is
 * the op's scale for this element or NaN when unknown. Sets *ratio = diff / bound. */
static int judge_float(const rule *r, double x, double y, double scale, bool *nonfinite,
                       double *ratio) {
    *nonfinite = false;
    bool have_scale = scale == scale;
    if (x != x || y != y || isinf(x) || isinf(y)) {
        if (x != x && y != y) return *ratio = 0, AGREE;
        if (x == y) return *ratio = 0, AGREE; /* same-signed infinities */
        /* inf against a finite value of the same sign at the overflow threshold: the
         * exact value may lie beyond it, so both roundings are honest. */
        if (x == x && y == y && (x > 0) == (y > 0)) {
            double fin = isinf(x) ? fabs(y) : fabs(x);
            if (fin >= r->maxf * (1 - 4 * r->rel) - 2 * r->abs) return *ratio = 0, AGREE;
        }
        *nonfinite = true;
        *ratio = INFINITY;
        /* An honest result can be NaN/inf only if its value may overflow or inputs do.
         * Elementwise ops (k <= 1) are deterministic in that; a reduction can overflow
         * in one order and not in another unless its scale stays below overflow. */
        if (!r->reducing && !have_scale) return DIFFER_REJECT;
        if (have_scale && scale * (1 + r->rel) + r->abs < r->maxf) return DIFFER_REJECT;
        return DIFFER_ESCALATE;
    }
    double diff = fabs(x - y);
    double bound;
    int severity;
    if (have_scale) {
        bound = 2 * (r->abs + r->rel * scale);
        severity = DIFFER_REJECT;
    } else if (r->rel >= 1) {
        bound = INFINITY;
        severity = DIFFER_REJECT;
    } else if (!r->reducing) {
        /* |x - e|, |y - e| <= abs + rel |e| and |e| <= (min(|x|, |y|) + abs) / (1 - rel). */
        double mag = fmin(fabs(x), fabs(y));
        bound = 2 * r->abs + 2 * r->rel * (mag + r->abs) / (1 - r->rel);
        severity = DIFFER_REJECT;
    } else {
        /* The scale sum |terms| is >= |exact|: this bound is only an estimate. */
        double mag = fmax(fabs(x), fabs(y));
        bound = 2 * r->abs + 2 * r->rel * (mag + r->abs) / (1 - r->rel);
        severity = DIFFER_ESCALATE;
    }
    bound *= 1 + 8 * U64; /* our own rounding of diff and bound */
    *ratio = ratio_of(diff, bound);
    return diff <= bound ? AGREE : severity;
}

/* Judge element @p off_x of X against @p off_y of Y (element offsets). */
static int judge_elem(const rule *r, const goblin_tensor *X, int64_t off_x, const goblin_tensor *Y,
                      int64_t off_y, double scale, bool *nonfinite, double *ratio) {
    if (!r->is_float) {
        int64_t x = goblin__load_i64(r->dt, X->data, off_x);
        int64_t y = goblin__load_i64(r->dt, Y->data, off_y);
        *nonfinite = false;
        *ratio = x == y ? 0 : INFINITY;
        return x == y ? AGREE : DIFFER_REJECT;
    }
    return judge_float(r, goblin__load_f64(r->dt, X->data, off_x),
                       goblin__load_f64(r->dt, Y->data, off_y), scale, nonfinite, ratio);
}

static void tally_add(tally *t, int res, bool nonfinite, double ratio, int64_t index) {
    t->checked++;
    if (res != AGREE) t->differ++;
    if (res == DIFFER_REJECT) t->reject++;
    if (nonfinite && res != AGREE) t->nonfinite++;
    if (ratio > t->worst || (t->worst_index < 0 && ratio >= t->worst && res != AGREE)) {
        t->worst = ratio;
        t->worst_index = index;
    }
}

static void tally_verdict(const tally *t, goblin_verdict *out) {
    verdict_init(out);
    out->checked = t->checked;
    out->above_tight = t->differ;
    out->above_bound = t->reject;
    out->nonfinite = t->nonfinite;
    out->worst_index = t->worst_index;
    out->worst_ratio = t->worst;
    out->worst_tight_ratio = t->worst;
    if (t->reject) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = t->nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_EXCEEDS_BOUND;
    } else if (t->differ) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = t->nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_BETWEEN;
    }
}

static goblin_err rule_init(rule *r, goblin_op op, goblin_dtype dt, int64_t k) {
    memset(r, 0, sizeof *r);
    if (!goblin_op_valid(op)) return GOBLIN_EINVAL;
    goblin_err e = goblin_op_contract(op, dt, k, &r->rel, &r->abs);
    if (e) return e;
    if (!(r->rel >= 0) || !(r->abs >= 0)) return GOBLIN_EINTERNAL;
    r->dt = dt;
    r->is_float = goblin_dtype_is_float(dt);
    r->maxf = max_finite(dt);
    r->reducing = k > 1;
    return GOBLIN_OK;
}

/* Scale element @p off of @p s (a float tensor); negative or NaN is the caller's bug. */
static goblin_err load_scale(const goblin_tensor *s, int64_t off, double *out) {
    double v = goblin__load_f64(s->dtype, s->data, off);
    if (!(v >= 0)) return GOBLIN_EINVAL;
    *out = v;
    return GOBLIN_OK;
}

static bool scale_tensor_ok(const goblin_tensor *s) {
    return goblin_dtype_is_float(s->dtype) && shape_ok(s);
}

goblin_err goblin_verify_compare_scaled(goblin_op op, goblin_dtype dt, int64_t k,
                                        const goblin_tensor *a, const goblin_tensor *b,
                                        const goblin_tensor *scale, goblin_verdict *out) {
    if (!a || !b || !out) return GOBLIN_EINVAL;
    rule r;
    goblin_err e = rule_init(&r, op, dt, k);
    if (e) return e;
    if (scale && !scale_tensor_ok(scale)) return GOBLIN_EINVAL;
    if (a->dtype != dt || b->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (!shape_ok(a) || !shape_ok(b) || !same_shape(a, b))
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (scale && !same_shape(a, scale)) return GOBLIN_EINVAL;
    int64_t numel;
    if (goblin__shape_numel(a->rank, a->shape, &numel) != GOBLIN_OK)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (numel > 0 && (!a->data || !b->data || (scale && !scale->data))) return GOBLIN_EINVAL;
    size_t es = goblin_dtype_size(dt);

    /* Fast path: bit-equal results (deterministic kernels make this the common case). */
    bool bit_equal = true;
    if (numel > 0 && goblin_tensor_is_contiguous(a) && goblin_tensor_is_contiguous(b)) {
        bit_equal = memcmp(a->data, b->data, (size_t)numel * es) == 0;
    } else if (numel > 0) {
        int64_t st[4][GOBLIN_MAX_RANK];
        memcpy(st[0], a->strides, sizeof st[0]);
        memcpy(st[1], b->strides, sizeof st[1]);
        goblin__nditer it;
        goblin__nditer_init(&it, a->rank, a->shape, 2, st);
        for (int64_t i = 0; i < numel && bit_equal; i++) {
            bit_equal = memcmp((const char *)a->data + it.off[0] * (int64_t)es,
                               (const char *)b->data + it.off[1] * (int64_t)es, es) == 0;
            goblin__nditer_next(&it);
        }
    }
    if (bit_equal) {
        verdict_init(out);
        out->reason = GOBLIN_VERIFY_BIT_EQUAL;
        out->checked = numel;
        return GOBLIN_OK;
    }

    int64_t st[4][GOBLIN_MAX_RANK];
    memset(st, 0, sizeof st);
    memcpy(st[0], a->strides, sizeof st[0]);
    memcpy(st[1], b->strides, sizeof st[1]);
    if (scale) memcpy(st[2], scale->strides, sizeof st[2]);
    goblin__nditer it;
    goblin__nditer_init(&it, a->rank, a->shape, scale ? 3 : 2, st);
    tally t = {0, 0, 0, 0, -1, 0};
    for (int64_t i = 0; i < numel; i++) {
        double sv = NAN;
        if (scale && (e = load_scale(scale, it.off[2], &sv)) != GOBLIN_OK) return e;
        bool nf;
        double ratio;
        int res = judge_elem(&r, a, it.off[0], b, it.off[1], sv, &nf, &ratio);
        tally_add(&t, res, nf, ratio, i);
        goblin__nditer_next(&it);
    }
    tally_verdict(&t, out);
    return GOBLIN_OK;
}

goblin_err goblin_verify_compare(goblin_op op, goblin_dtype dt, int64_t k, const goblin_tensor *a,
                                 const goblin_tensor *b, goblin_verdict *out) {
    return goblin_verify_compare_scaled(op, dt, k, a, b, NULL, out);
}

goblin_err goblin_verify_spot(goblin_op op, goblin_dtype dt, int64_t k,
                              const goblin_tensor *claimed, const int64_t *indices, int64_t count,
                              const goblin_tensor *ref, const goblin_tensor *scale,
                              goblin_verdict *out) {
    if (!claimed || !ref || !out || count < 0 || (count > 0 && !indices)) return GOBLIN_EINVAL;
    rule r;
    goblin_err e = rule_init(&r, op, dt, k);
    if (e) return e;
    if (ref->dtype != dt || ref->rank != 1 || ref->shape[0] != count || (count && !ref->data))
        return GOBLIN_EINVAL;
    if (scale && (!scale_tensor_ok(scale) || scale->rank != 1 || scale->shape[0] != count ||
                  (count && !scale->data)))
        return GOBLIN_EINVAL;
    if (claimed->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    int64_t numel;
    if (!shape_ok(claimed) || goblin__shape_numel(claimed->rank, claimed->shape, &numel))
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    for (int64_t i = 0; i < count; i++)
        if (indices[i] < 0 || indices[i] >= numel) return GOBLIN_EINDEX;
    if (count > 0 && !claimed->data) return GOBLIN_EINVAL;

    tally t = {0, 0, 0, 0, -1, 0};
    for (int64_t i = 0; i < count; i++) {
        /* flat row-major index -> element offset through claimed's strides */
        int64_t rem = indices[i], off = 0;
        for (int32_t d = claimed->rank - 1; d >= 0; d--) {
            off += (rem % claimed->shape[d]) * claimed->strides[d];
            rem /= claimed->shape[d];
        }
        double sv = NAN;
        if (scale && (e = load_scale(scale, i * scale->strides[0], &sv)) != GOBLIN_OK) return e;
        bool nf;
        double ratio;
        int res = judge_elem(&r, claimed, off, ref, i * ref->strides[0], sv, &nf, &ratio);
        tally_add(&t, res, nf, ratio, indices[i]);
    }
    tally_verdict(&t, out);
    return GOBLIN_OK;
}

/* ---- sampling ------------------------------------------------------------ */

/* A keyed permutation of [0, 2^(2h)): an 8-round balanced Feistel network whose
 * round function is Philox (a PRF), so by Luby-Rackoff it is a pseudo-random
 * permutation; 8 rounds rather than 4 because h can be tiny. */
static uint64_t feistel(uint64_t x, int h, uint64_t seed) {
    uint64_t mask = (((uint64_t)1) << h) - 1;
    uint64_t L = x >> h, R = x & mask;
    for (uint64_t round = 0; round < 8; round++) {
        uint32_t o[4];
        goblin__rng_draw(seed, (round << 32) | R, VERIFY_STREAM_SAMPLE, 0, o);
        uint64_t fo = ((((uint64_t)o[1]) << 32) | o[0]) & mask;
        uint64_t nl = R;
        R = L ^ fo;
        L = nl;
    }
    return (L << h) | R;
}

goblin_err goblin_verify_sample_indices(uint64_t seed, int64_t numel, int64_t count, int64_t *out) {
    if (numel < 0 || count < 0 || count > numel || numel > ((int64_t)1 << 62) ||
        (count > 0 && !out))
        return GOBLIN_EINVAL;
    if (count == 0) return GOBLIN_OK;
    int bits = 0;
    for (uint64_t v = (uint64_t)(numel - 1); v; v >>= 1) bits++;
    int h = (bits + 1) / 2; /* domain 2^(2h) < 4 numel: under 4 walks per index expected */
    for (int64_t i = 0; i < count; i++) {
        /* Cycle-walking: the permutation's cycle through i < numel returns below
         * numel, so this ends, and it is a permutation of [0, numel). */
        uint64_t x = (uint64_t)i;
        do x = feistel(x, h, seed);
        while (x >= (uint64_t)numel);
        out[i] = (int64_t)x;
    }
    return GOBLIN_OK;
}
