/* libgoblin/verify/freivalds.c - Freivalds' check of matmul tiles (goblin/verify.h):
 * the panels object (the secret vectors, the levels, prepared row ranges of A), the
 * check of a tile and its second thread. The passes are in freivalds_pass.c.
 *
 * Every threshold here is derived in docs/verification.md; the comments only
 * name the formula. Notation: u is the unit roundoff of the result's dtype,
 * u64 = 2^-53 that of the f64 arithmetic the check itself runs in,
 * gamma_j(u) = j u / (1 - j u). */
#include <goblin/verify.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "base/alloc.h"
#include "base/clock.h"
#include "core/node.h"
#include "kernels/random.h"
#include "freivalds_impl.h"
#include "verdict.h"
#include "verify_impl.h"

void goblin_freivalds_params_default(goblin_freivalds_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->seed = 0;
    p->threads = 1;
    p->vectors = 4;
    p->tight_sigmas = 6.0;
    p->bound_sigmas = 10.0;
    p->k0 = 0;
    p->kn = -1;
}

typedef struct fv_tally {
    int64_t checked, above_tight, above_bound, worst_row;
    double worst, worst_tight;
} fv_tally;

/* Judge row @p i of a tile from its sums (w = C r in lane v of wq[g][ws], |C| m in
 * @p qc) against the panel's zt = A (B r) (group stride @p m) and @p pc = |A| (|B| m),
 * with @p a1 = sum |a_il| and @p na >= ||a_i||. P and Q below are upper bounds of
 * the exact |A| |B| m and |C| m, which bound |A| |B| |r_v| and |C| |r_v| for every
 * vector v since |r_vj| <= m_j (docs/verification.md, "The rigorous bound R"). */
static void judge_row(const fv_levels *L, const v4 *zt, int64_t m, double pc, double qc,
                      double a1, int64_t i, double na, const v4 wq[][FV_ROWS], int ws,
                      fv_tally *t) {
    double abs_own = ETA64 * (L->dn * a1 * L->grow + L->dK + L->dn + 4);
    double P = pc * L->grow; /* >= exact |A| (|B| m) */
    double Q = qc * L->grow; /* >= exact |C| m */
    double claim_h = (L->bound_sigmas > 0 && L->rel_finite)
                         ? L->bound_sigmas * (L->rel_c * na * L->bf + L->abs_c * sqrt(L->n_good))
                         : INFINITY;
    double own = L->g_z * P + L->g_w * Q + abs_own;
    double so = L->sig_z * P + L->sig_w * Q;
    /* An honest |C| m is at most (1 + rel) |A| |B| m + abs sum m: a cheap second
     * rigorous test that catches absurd magnitudes outright ((1 + 8 u64): the
     * rounding of this formula; qlow <= the exact |C| m). */
    double qmax = L->rel_finite ? ((1 + L->rel_c) * P + L->abs_c * L->n_good) * (1 + 8 * U64)
                                : INFINITY;
    double qlow = qc / (1 + L->g_w);
    double rq = qlow > qmax ? ratio_of(qlow, qmax) : 0;
    for (int64_t g = 0; g < L->ng; g++) {
        v4 wv = wq[g][ws];
        v4 zv = zt[g * m + i];
        for (int64_t lane = 0; lane < LANES && g * LANES + lane < L->nv; lane++) {
            int64_t v = g * LANES + lane;
            double w = wv[lane], z = zv[lane];
            double claim_det = L->rel_finite ? L->rel_c * P + L->abs_c * L->sr1[v] : INFINITY;
            /* (1 + 16 u64): the rounding of this formula and of d itself */
            double R = (fmin(claim_det, claim_h) + own) * (1 + 16 * U64);
            double sc = L->sig_k * fmin(na * L->nb[v], P);
            double T = L->tight_sigmas * sqrt(sc * sc + so * so) + L->abs_c * L->sr1[v] + abs_own;
            if (T > R) T = R;
            double d = fabs(w - z);
            double rr = ratio_of(d, R), rt = ratio_of(d, T);
            if (!(d == d)) rr = rt = INFINITY; /* overflow in C r: absurd values */
            if (rq > rr) rr = rq;
            if (rr > rt) rt = rr;
            t->checked++;
            if (rt > 1) t->above_tight++;
            if (rr > 1) t->above_bound++;
            if (rr > t->worst || (t->worst_row < 0 && rr >= t->worst)) {
                t->worst = rr;
                t->worst_row = i;
            }
            if (rt > t->worst_tight) t->worst_tight = rt;
        }
    }
}


/* ---- validation, creation, the passes' drivers ------------------------------ */

typedef struct fv_args {
    goblin_freivalds_params p;
    goblin_dtype dt;
    int64_t m, n, K; /* A [m, K-range], B [K-range, n] */
} fv_args;

/* The trusted arguments of a check: A, B, params. */
static goblin_err fv_validate(const goblin_tensor *a, const goblin_tensor *b,
                              const goblin_freivalds_params *pp, fv_args *x) {
    if (pp) x->p = *pp;
    else goblin_freivalds_params_default(&x->p);
    const goblin_freivalds_params *p = &x->p;
    if (p->vectors < 1 || p->vectors > GOBLIN_FREIVALDS_MAX_VECTORS || !(p->tight_sigmas > 0) ||
        !(p->bound_sigmas >= 0) || p->tight_sigmas == INFINITY || p->bound_sigmas == INFINITY)
        return GOBLIN_EINVAL;
    if (a->rank != 2 || b->rank != 2 || a->shape[0] < 0 || a->shape[1] < 0 || b->shape[0] < 0 ||
        b->shape[1] < 0 || a->shape[1] != b->shape[0])
        return GOBLIN_ESHAPE;
    goblin_dtype dt = a->dtype;
    if ((dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) || b->dtype != dt) return GOBLIN_EDTYPE;
    int64_t m = a->shape[0], kfull = a->shape[1], n = b->shape[1];
    if (m > GOBLIN_MAX_DIM || kfull > GOBLIN_MAX_DIM || n > GOBLIN_MAX_DIM) return GOBLIN_ESHAPE;
    if (p->k0 < 0 || p->k0 > kfull) return GOBLIN_EINVAL;
    int64_t K = p->kn < 0 ? kfull - p->k0 : p->kn;
    if (K > kfull - p->k0) return GOBLIN_EINVAL;
    if ((m && K && !a->data) || (K && n && !b->data)) return GOBLIN_EINVAL;
    x->dt = dt;
    x->m = m;
    x->n = n;
    x->K = K;
    return GOBLIN_OK;
}

/* *acc += a * b on sizes, false on overflow. */
static bool size_mac(uint64_t *acc, uint64_t a, uint64_t b) {
    uint64_t t;
    return !__builtin_mul_overflow(a, b, &t) && !__builtin_add_overflow(*acc, t, acc);
}

/* The levels of column panel @p p (after the pass over B and the masking). */
static void fv_levels_init(fvp *f, int32_t p, const fv_args *x) {
    fv_levels *L = &f->lv[p];
    memset(L, 0, sizeof *L);
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0;
    L->nv = f->nv;
    L->ng = f->ng;
    L->tight_sigmas = x->p.tight_sigmas;
    L->bound_sigmas = x->p.bound_sigmas;
    double u = goblin__unit_roundoff(f->dt);
    goblin_op_contract(GOBLIN_OP_MATMUL, f->dt, f->K, &L->rel_c, &L->abs_c);
    double dn = (double)n, dK = (double)f->K;
    L->dn = dn;
    L->dK = dK;
    /* our f64 error in A (B r): B r within gamma_n |B| |r| <= gamma_n |B| m, then A
     * times it within gamma_K, together gamma_{n+K} |A| |B| m (2 spare) */
    L->g_z = gamma_n(dn + dK + 2, U64);
    L->g_w = gamma_n(dn + 2, U64); /* our f64 error in C r: gamma_n |C| |r| <= gamma_n |C| m */
    /* computed sums of magnitudes -> upper bounds of the exact ones: |B| m and |C| m
     * are sums of n exact terms (m is 0 or 1), |A| s of K rounded products, so each
     * computed one is within gamma_{n+K-1} of the exact one (relative, all terms >= 0)
     * and exact <= computed / (1 - gamma_j) <= computed (1 + 2 gamma_j) */
    L->grow = 1 + 2 * gamma_n(dn + dK + 4, U64);
    const double *colsq = f->colsq + col0;
    double bf2 = 0;
    for (int64_t j = 0; j < n; j++) {
        bf2 += colsq[j];
        L->n_bad += f->bad[col0 + j];
    }
    L->bf = sqrt(bf2) * L->grow;
    L->n_good = (double)(n - L->n_bad);
    for (int64_t v = 0; v < f->nv; v++) {
        double s1 = 0, s2 = 0;
        for (int64_t j = 0; j < n; j++) {
            double rj = f->rw[v * f->ns + col0 + j];
            s1 += fabs(rj);
            s2 += colsq[j] * rj * rj;
        }
        L->sr1[v] = s1 * L->grow;
        L->nb[v] = sqrt(s2) * L->grow;
    }
    L->sig_k = u * sqrt((dK + 1) / 3);   /* claimed: K + 1 roundings, variance u^2/3 each */
    L->sig_z = U64 * sqrt((dn + dK) / 3); /* ours in A (B r) */
    L->sig_w = U64 * sqrt(dn / 3);        /* ours in C r */
    L->rel_finite = isfinite(L->rel_c);
}

static void fv_pass_b(fvp *f, bool sanitize);

/* The object for validated arguments @p x and checked bounds. */
static goblin_err fv_new(const goblin_tensor *a, const goblin_tensor *b, const fv_args *x,
                         int32_t np, const int64_t *cb, fvp **out) {
    *out = NULL;
    int64_t N = x->n, K = x->K, nv = x->p.vectors, ng = (nv + LANES - 1) / LANES;
    int64_t wmax = 0;
    for (int32_t p = 0; p < np; p++)
        if (cb[p + 1] - cb[p] > wmax) wmax = cb[p + 1] - cb[p];
    /* One allocation: the object, then the v4 arrays (64-byte aligned), the levels,
     * doubles, bounds and bytes. */
    uint64_t n_v4 = 0, bytes = 0;
    /* Rows of weights (the vectors, then m or s) are ns or ks doubles apart, an odd
     * number of cache lines: rows a multiple of 4 KiB apart would all fall into
     * the same L1 sets, which hold only eight lines each. */
    int64_t ns = ((N + 7) / 8 | 1) * 8, ks = ((K + 7) / 8 | 1) * 8;
    uint64_t nw = (uint64_t)ng * LANES, n_dbl = 0;
    bool ok = size_mac(&n_v4, (uint64_t)np * (uint64_t)ng, 5 * FV_ROWS) &&
              size_mac(&n_dbl, nw + 1, (uint64_t)ns) && size_mac(&n_dbl, 1, (uint64_t)N) &&
              size_mac(&n_dbl, 1, (uint64_t)N) &&
              size_mac(&n_dbl, (uint64_t)np * (nw + 1), (uint64_t)ks) &&
              size_mac(&n_dbl, 1, FV_ROWS * FV_CHUNK + (uint64_t)wmax) &&
              size_mac(&bytes, n_v4, sizeof(v4)) && size_mac(&bytes, np, sizeof(fv_levels)) &&
              size_mac(&bytes, n_dbl, sizeof(double)) &&
              size_mac(&bytes, (uint64_t)np + 1, sizeof(int64_t)) && size_mac(&bytes, N, 1) &&
              bytes <= SIZE_MAX;
    size_t head = (sizeof(fvp) + 63) & ~(size_t)63; /* the object, to a cache line */
    ok = ok && bytes <= SIZE_MAX - head;
    if (!ok) return GOBLIN_ENOMEM;
    fvp *f = goblin__alloc(head + (size_t)bytes);
    if (!f) return GOBLIN_ENOMEM;
    memset(f, 0, sizeof *f);
    void *block = (char *)f + head;
    f->ranges = f->inline_ranges;
    f->cap_ranges = (int32_t)(sizeof f->inline_ranges / sizeof *f->inline_ranges);
    f->dt = x->dt;
    f->es = goblin_dtype_size(x->dt);
    f->M = x->m;
    f->N = N;
    f->K = K;
    f->nv = nv;
    f->ng = ng;
    f->np = np;
    f->threads = x->p.threads >= 2 ? 2 : 1;
    f->v3 = goblin__fv_cpu_v3();
    f->as0 = a->strides[0];
    f->as1 = a->strides[1];
    f->bs0 = b->strides[0];
    f->bs1 = b->strides[1];
    /* (0, k0) of A and (k0, 0) of B; no arithmetic on a NULL of an empty operand */
    f->a0 = K && x->m ? (const char *)a->data + x->p.k0 * f->as1 * (int64_t)f->es : NULL;
    f->b0 = K && N ? (const char *)b->data + x->p.k0 * f->bs0 * (int64_t)f->es : NULL;
    f->acc = block;
    f->lv = (fv_levels *)(f->acc + (int64_t)np * ng * 5 * FV_ROWS);
    f->ns = ns;
    f->ks = ks;
    f->rw = (double *)(f->lv + np);
    f->mw = f->rw + (int64_t)nw * ns;
    f->ys = f->mw + ns;
    f->colsq = f->ys + (int64_t)np * (int64_t)(nw + 1) * ks;
    f->colsq2 = f->colsq + N;
    f->xb = f->colsq2 + N;
    f->buf = f->xb + FV_ROWS * FV_CHUNK;
    f->cb = (int64_t *)(f->buf + wmax);
    f->bad = (unsigned char *)(f->cb + np + 1);
    memcpy(f->cb, cb, ((size_t)np + 1) * sizeof(int64_t));
    memset(f->rw, 0, (size_t)nw * (size_t)ns * sizeof(double)); /* vectors beyond nv: r = 0 */
    memset(f->bad, 0, (size_t)N);
    for (int64_t j = 0; j < N; j++) f->mw[j] = 1; /* the envelope: no column masked yet */

    /* The secret vectors: r_j = +-(1/2 + U/2), U uniform [0, 1) from Philox, sign
     * from an independent bit. |r_j| >= 1/2 means one wrong element always moves
     * its row's check by at least half its error; the continuous magnitude (density
     * <= 1) bounds the chance that several errors cancel; |r_j| <= 1 and symmetry
     * give Hoeffding's tail bound for the honest rounding errors. Vector v, element j
     * is Philox draw v * N + j of the stream "FREV" under key = seed. */
    for (int64_t v = 0; v < nv; v++)
        for (int64_t j = 0; j < N; j++) {
            uint32_t r[4];
            goblin__rng_draw(x->p.seed, 0, VERIFY_STREAM_FREIVALDS,
                             (uint64_t)v * (uint64_t)N + (uint64_t)j, r);
            double mag = 0.5 + 0.5 * goblin__rng_u01(r, 53);
            f->rw[v * ns + j] = (r[2] & 1u) ? -mag : mag;
        }

    fv_pass_b(f, false);
    /* Columns of B with NaN/inf (or squares overflowing f64) cannot be checked
     * algebraically: mask them out of every vector and of the envelope (r_j = m_j = 0)
     * and redo the pass. */
    int64_t n_bad = 0;
    for (int64_t j = 0; j < N; j++)
        if (!isfinite(f->colsq[j])) {
            f->bad[j] = 1;
            n_bad++;
            f->mw[j] = 0;
            for (int64_t v = 0; v < (int64_t)nw; v++) f->rw[v * ns + j] = 0;
        }
    if (n_bad) {
        fv_pass_b(f, true);
        for (int64_t j = 0; j < N; j++)
            if (f->bad[j]) f->colsq[j] = 0;
    }
    for (int32_t p = 0; p < np; p++) fv_levels_init(f, p, x);
    goblin_err e = goblin__fv_el_new(f, x->p.seed);
    if (e) {
        goblin_freivalds_panels_free(f);
        return e;
    }
    *out = f;
    return GOBLIN_OK;
}

goblin_err goblin_freivalds_panels_new(const goblin_tensor *a, const goblin_tensor *b,
                                       int32_t n_col_panels, const int64_t *col_bounds,
                                       const goblin_freivalds_params *p,
                                       goblin_freivalds_panels **out) {
    if (!out) return GOBLIN_EINVAL;
    *out = NULL;
    if (!a || !b || !col_bounds) return GOBLIN_EINVAL;
    fv_args x;
    goblin_err e = fv_validate(a, b, p, &x);
    if (e) return e;
    /* strictly increasing bounds from 0 to N: at most N panels (checked before
     * reading the caller's array that far) */
    if (n_col_panels < 1 || n_col_panels > x.n || col_bounds[0] != 0) return GOBLIN_EINVAL;
    for (int32_t q = 0; q < n_col_panels; q++)
        if (!(col_bounds[q + 1] > col_bounds[q])) return GOBLIN_EINVAL;
    if (col_bounds[n_col_panels] != x.n) return GOBLIN_EINVAL;
    return fv_new(a, b, &x, n_col_panels, col_bounds, out);
}

static fv_range *fv_find(fvp *f, int64_t row0, int64_t rows) {
    for (int32_t q = 0; q < f->n_ranges; q++)
        if (f->ranges[q].row0 == row0 && f->ranges[q].rows == rows) return &f->ranges[q];
    return NULL;
}

/* The prepared range (row0, rows), computed now if it is not yet (one pass over
 * those rows of A). Arguments already checked. */
/* ---- two threads (goblin_freivalds_params.threads = 2) ------------------------ *
 *
 * The passes over A (a prepared row range) and over C (a check) split their rows in
 * two at a multiple of FV_ROWS: the calling thread takes the first half, a second
 * thread the rest, each with its own scratch (a copy of the object whose acc, xb and
 * buf point elsewhere). Every row is computed by the same code on the same blocks of
 * FV_ROWS rows as with one thread, so the sums and the verdict are the same bits; the
 * two halves write disjoint rows of the range, and the check's tallies are merged in
 * row order. Worth it where the checking thread shares its cores with busy ones (an
 * embedded grid): its work then falls on both cores instead of one (docs/verification.md). */
#define FV_SPLIT_ELEMS ((double)(1 << 18)) /* a pass this small stays on one thread */

/* A pass's second thread, with its CPU time: the caller adds it, once joined, to
 * its own thread's tally, which the node reads (goblin_node_stats.verify_cpu_ns). */
typedef struct fv_helper {
    void *(*fn)(void *);
    void *arg;
    int64_t cpu_ns;
    pthread_t th;
} fv_helper;

static _Thread_local int64_t fv_helper_cpu_ns;

int64_t goblin__freivalds_take_helper_cpu_ns(void) {
    int64_t x = fv_helper_cpu_ns;
    fv_helper_cpu_ns = 0;
    return x;
}

static void *fv_helper_main(void *arg) {
    fv_helper *h = arg;
    int64_t t0 = goblin__thread_cpu_ns();
    h->fn(h->arg);
    h->cpu_ns = goblin__thread_cpu_ns() - t0;
    return NULL;
}

static bool fv_spawn(fv_helper *h, void *(*fn)(void *), void *arg) {
    h->fn = fn;
    h->arg = arg;
    h->cpu_ns = 0;
    return pthread_create(&h->th, NULL, fv_helper_main, h) == 0;
}

static void fv_join(fv_helper *h) {
    pthread_join(h->th, NULL);
    fv_helper_cpu_ns += h->cpu_ns;
}

/* Passes run in two halves so far (tests: that the two-thread path ran). */
static atomic_llong fv_splits;
long long goblin__freivalds_splits(void);
long long goblin__freivalds_splits(void) { return atomic_load(&fv_splits); }

/* *twin: @p f with scratch of its own; false if @p f runs on one thread or no memory. */
static bool fv_twin(fvp *f, fvp *twin) {
    if (f->threads < 2) return false;
    if (!f->twin_block) {
        int64_t wmax = 0;
        for (int32_t p = 0; p < f->np; p++)
            if (f->cb[p + 1] - f->cb[p] > wmax) wmax = f->cb[p + 1] - f->cb[p];
        size_t n_acc = (size_t)f->np * (size_t)f->ng * 5 * FV_ROWS;
        size_t n_dbl = (size_t)FV_ROWS * FV_CHUNK + (size_t)wmax;
        void *b = goblin__alloc(n_acc * sizeof(v4) + n_dbl * sizeof(double));
        if (!b) return false;
        f->twin_block = b;
        f->acc2 = b;
        f->xb2 = (double *)(f->acc2 + n_acc);
        f->buf2 = f->xb2 + FV_ROWS * FV_CHUNK;
    }
    *twin = *f;
    twin->acc = f->acc2;
    twin->xb = f->xb2;
    twin->buf = f->buf2;
    return true;
}

/* The row where a pass of @p rows rows (of @p elems elements each) splits: a multiple
 * of FV_ROWS, or 0 to stay on one thread. */
static int64_t fv_split(const fvp *f, int64_t rows, double elems) {
    if (f->threads < 2 || rows < 4 * FV_ROWS || (double)rows * elems < FV_SPLIT_ELEMS) return 0;
    return rows / 2 / FV_ROWS * FV_ROWS;
}

/* The pass over B (pass_b_impl) of a long B in two halves of rows, whatever the
 * threads: the second half's column sums of squares go to colsq2 and are then added
 * to the first's, so that one and two threads give the same bits. With two threads
 * the second half runs on its own thread. */
typedef struct fv_pb_job {
    fvp *f;
    bool sanitize;
    int64_t lb, le;
    double *colsq;
} fv_pb_job;

static void *fv_pb_main(void *arg) {
    fv_pb_job *j = arg;
    goblin__fv_pass_b(j->f, j->sanitize, j->lb, j->le, j->colsq);
    return NULL;
}

static void fv_pass_b(fvp *f, bool sanitize) {
    int64_t K = f->K, h = 0;
    if (K >= 4 * FV_ROWS && (double)K * (double)f->N >= FV_SPLIT_ELEMS) h = K / 2 / FV_ROWS * FV_ROWS;
    fvp twin;
    fv_helper hp;
    fv_pb_job second = {f, sanitize, h, K, f->colsq2}, first = {f, sanitize, 0, h ? h : K, f->colsq};
    bool two = h > 0 && fv_twin(f, &twin);
    if (two) second.f = &twin;
    two = two && fv_spawn(&hp, fv_pb_main, &second);
    if (two) atomic_fetch_add(&fv_splits, 1);
    fv_pb_main(&first);
    if (two) fv_join(&hp);
    else if (h) {
        second.f = f;
        fv_pb_main(&second);
    }
    if (h)
        for (int64_t j = 0; j < f->N; j++) f->colsq[j] += f->colsq2[j];
}

typedef struct fv_pa_job {
    fvp *f;
    fv_range *r;
    int64_t ib, ie;
} fv_pa_job;

static void *fv_pa_main(void *arg) {
    fv_pa_job *j = arg;
    goblin__fv_pass_a(j->f, j->r, j->ib, j->ie);
    return NULL;
}

static goblin_err fv_prepare(fvp *f, int64_t row0, int64_t rows, fv_range **out) {
    fv_range *r = fv_find(f, row0, rows);
    if (r) {
        *out = r;
        return GOBLIN_OK;
    }
    if (f->n_ranges == f->cap_ranges) {
        if (f->cap_ranges > INT32_MAX / 2) return GOBLIN_ENOMEM;
        int32_t cap = f->cap_ranges ? 2 * f->cap_ranges : 4;
        fv_range *nr = goblin__alloc((size_t)cap * sizeof *nr);
        if (!nr) return GOBLIN_ENOMEM;
        if (f->n_ranges) memcpy(nr, f->ranges, (size_t)f->n_ranges * sizeof *nr);
        if (f->ranges != f->inline_ranges) goblin__free(f->ranges);
        f->ranges = nr;
        f->cap_ranges = cap;
    }
    uint64_t bytes = 0;
    uint64_t el = f->el_on ? (uint64_t)f->n_gpad : 0;
    if (!size_mac(&bytes, (uint64_t)f->np * (uint64_t)f->ng * sizeof(v4), (uint64_t)rows) ||
        !size_mac(&bytes, ((uint64_t)f->np + 2) * sizeof(double), (uint64_t)rows) ||
        !size_mac(&bytes, el * sizeof(double), (uint64_t)rows) ||
        bytes > SIZE_MAX)
        return GOBLIN_ENOMEM;
    void *block = goblin__alloc((size_t)bytes);
    if (!block) return GOBLIN_ENOMEM;
    r = &f->ranges[f->n_ranges];
    r->row0 = row0;
    r->rows = rows;
    r->zt = block;
    r->pt = (double *)(r->zt + (int64_t)f->np * f->ng * rows);
    r->asq = r->pt + (int64_t)f->np * rows;
    r->a1 = r->asq + rows;
    r->zg = el ? r->a1 + rows : NULL;
    int64_t h = fv_split(f, rows, (double)f->K * f->np);
    fvp twin;
    fv_helper hp;
    fv_pa_job pj = {&twin, r, h, rows};
    bool two = h > 0 && fv_twin(f, &twin) && fv_spawn(&hp, fv_pa_main, &pj);
    if (two) atomic_fetch_add(&fv_splits, 1);
    goblin__fv_pass_a(f, r, 0, two ? h : rows);
    if (two) fv_join(&hp);
    goblin__fv_el_prepare(f, r);
    f->n_ranges++;
    *out = r;
    return GOBLIN_OK;
}

static bool range_ok(const fvp *f, int64_t row0, int64_t rows) {
    return row0 >= 0 && rows >= 0 && row0 <= f->M - rows;
}

goblin_err goblin_freivalds_panels_prepare(goblin_freivalds_panels *fp, int64_t row0,
                                           int64_t rows) {
    if (!fp || !range_ok(fp, row0, rows)) return GOBLIN_EINVAL;
    fv_range *r;
    return fv_prepare(fp, row0, rows, &r);
}

void goblin_freivalds_panels_release(goblin_freivalds_panels *fp, int64_t row0, int64_t rows) {
    if (!fp) return;
    fv_range *r = fv_find(fp, row0, rows);
    if (!r) return;
    goblin__free(r->zt);
    *r = fp->ranges[--fp->n_ranges];
}

void goblin_freivalds_panels_free(goblin_freivalds_panels *fp) {
    if (!fp) return;
    for (int32_t q = 0; q < fp->n_ranges; q++) goblin__free(fp->ranges[q].zt);
    if (fp->ranges != fp->inline_ranges) goblin__free(fp->ranges);
    goblin__free(fp->twin_block);
    goblin__fv_el_free(fp);
    goblin__free(fp); /* and its arrays */
}

/* The rows [@p ib, @p ie) of a check: their tallies into *acc. */
typedef struct fv_jacc {
    fv_tally t;
    int64_t unchecked, nonfinite;
    bool reject_nonfinite;
} fv_jacc;

typedef struct fv_judge_job {
    fvp *f;
    const fv_range *r;
    int32_t p;
    const fv_tile *tile;
    int64_t ib, ie;
    fv_jacc acc;
} fv_judge_job;

static void fv_judge_rows(fvp *f, const fv_range *r, int32_t p, const fv_tile *tp, int64_t ib, int64_t ie,
                          fv_jacc *acc) {
    const fv_levels *L = &f->lv[p];
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, m = r->rows, nv = f->nv;
    goblin_dtype dt = f->dt;
    fv_tile tile = *tp;
    const v4 *zt = r->zt + (int64_t)p * f->ng * m;
    const double *pt = r->pt + (int64_t)p * m;
    double maxf = max_finite(dt);
    for (int64_t i0 = ib; i0 < ie; i0 += FV_ROWS) {
        int rows = m - i0 < FV_ROWS ? (int)(m - i0) : FV_ROWS;
        v4 wq[FV_MAXG][FV_ROWS];
        double qs[FV_ROWS];
        goblin__fv_pass_c(f, &tile, i0, rows, wq, qs);
        for (int q = 0; q < rows; q++) {
            int64_t i = i0 + q;
            double na = sqrt(r->asq[i]) * L->grow;
            bool row_ok = isfinite(r->asq[i]) && isfinite(r->a1[i]) && isfinite(pt[i]);
            for (int64_t v = 0; v < nv && row_ok; v++)
                row_ok = isfinite(zt[(v / LANES) * m + i][v % LANES]);
            /* |C| m finite: no NaN/inf in the row. Otherwise look at its elements (a
             * finite row whose |C| m overflows f64 is judged on its sums as they are). */
            bool finite = isfinite(qs[q]);
            if (!finite) {
                goblin__fv_load_row(dt, tile.c0 + i * tile.cs0 * (int64_t)f->es, tile.cs1, n, f->buf);
                finite = true;
                for (int64_t j = 0; j < n && finite; j++) finite = isfinite(f->buf[j]);
            }
            if (finite) {
                if (!row_ok) acc->unchecked++;
                else judge_row(L, zt, m, pt[i], qs[q], r->a1[i], i, na, wq, q, &acc->t);
                continue;
            }
            /* NaN/inf in C (f->buf holds the row): impossible for an honest result when
             * a_i and b_j are finite and ||a_i|| ||b_j|| (1 + rel) + abs < max finite
             * (no partial sum can overflow). */
            bool row_nonfinite = false, row_unsure = !row_ok;
            for (int64_t j = 0; j < n; j++) {
                if (isfinite(f->buf[j])) continue;
                f->buf[j] = 0;
                if (f->bad[col0 + j] || !row_ok) continue; /* unchecked column or row */
                double cap = L->rel_finite ? na * sqrt(f->colsq[col0 + j]) * L->grow *
                                                     (1 + L->rel_c) +
                                                 L->abs_c
                                           : INFINITY;
                if (cap < maxf) {
                    acc->nonfinite++;
                    row_nonfinite = true;
                } else {
                    row_unsure = true;
                }
            }
            if (row_nonfinite) {
                acc->reject_nonfinite = true;
                if (acc->t.worst != INFINITY) {
                    acc->t.worst = acc->t.worst_tight = INFINITY;
                    acc->t.worst_row = i;
                }
                continue;
            }
            if (row_unsure) {
                acc->unchecked++;
                continue;
            }
            v4 wr[FV_MAXG][FV_ROWS];
            double qr;
            goblin__fv_row_c(f, &tile, f->buf, wr, &qr);
            judge_row(L, zt, m, pt[i], qr, r->a1[i], i, na, wr, 0, &acc->t);
        }
    }
}

static void *fv_judge_main(void *arg) {
    fv_judge_job *j = arg;
    fv_judge_rows(j->f, j->r, j->p, j->tile, j->ib, j->ie, &j->acc);
    return NULL;
}

/* Judge tile @p c (shape and dtype checked) of panel @p p over the prepared range @p r. */
static void fv_judge(fvp *f, const fv_range *r, int32_t p, const goblin_tensor *c,
                     goblin_verdict *out) {
    const fv_levels *L = &f->lv[p];
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, m = r->rows;
    fv_tile tile = {(const char *)c->data, c->strides[0], c->strides[1], m, n,
                    f->rw + col0,         f->mw + col0, L->n_bad == 0};
    fv_jacc a = {{0, 0, 0, -1, 0, 0}, 0, 0, false};
    int64_t h = fv_split(f, m, (double)n);
    fvp twin;
    fv_helper hp;
    fv_judge_job jj = {&twin, r, p, &tile, h, m, {{0, 0, 0, -1, 0, 0}, 0, 0, false}};
    bool two = h > 0 && fv_twin(f, &twin) && fv_spawn(&hp, fv_judge_main, &jj);
    if (two) atomic_fetch_add(&fv_splits, 1);
    fv_judge_rows(f, r, p, &tile, 0, two ? h : m, &a);
    if (two) {
        fv_join(&hp);
        /* merged as if one thread had gone on: counts add, and the worst row is the
         * first with the largest ratio */
        const fv_jacc *b = &jj.acc;
        a.t.checked += b->t.checked;
        a.t.above_tight += b->t.above_tight;
        a.t.above_bound += b->t.above_bound;
        if (b->t.worst_row >= 0 && (b->t.worst > a.t.worst || (a.t.worst_row < 0 && b->t.worst >= a.t.worst))) {
            a.t.worst = b->t.worst;
            a.t.worst_row = b->t.worst_row;
        }
        if (b->t.worst_tight > a.t.worst_tight) a.t.worst_tight = b->t.worst_tight;
        a.unchecked += b->unchecked;
        a.nonfinite += b->nonfinite;
        a.reject_nonfinite = a.reject_nonfinite || b->reject_nonfinite;
    }
    fv_tally t = a.t;
    int64_t unchecked = a.unchecked, nonfinite = a.nonfinite;
    bool reject_nonfinite = a.reject_nonfinite;
    out->checked = t.checked;
    out->above_tight = t.above_tight;
    out->above_bound = t.above_bound;
    out->nonfinite = nonfinite;
    /* elements of C left unchecked: whole rows, and masked columns of the others */
    out->unchecked = unchecked * n + L->n_bad * (m - unchecked);
    out->worst_index = t.worst_row;
    out->worst_ratio = t.worst;
    out->worst_tight_ratio = t.worst_tight;
    if (reject_nonfinite || t.above_bound) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = reject_nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_EXCEEDS_BOUND;
    } else if (t.above_tight) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_BETWEEN;
    } else if (out->unchecked) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_UNCHECKABLE;
    }
    goblin__fv_el_judge(f, r, p, &tile, out);
}

/* The verdict left with an error: nothing was checked (never an ACCEPT). */
static goblin_err verdict_error(goblin_verdict *v, goblin_err e) {
    verdict_init(v);
    v->kind = GOBLIN_VERDICT_ESCALATE;
    v->reason = GOBLIN_VERIFY_UNCHECKABLE;
    return e;
}

goblin_err goblin_freivalds_panels_check(goblin_freivalds_panels *fp, int64_t row0, int64_t rows,
                                         int32_t col_panel, const goblin_tensor *c,
                                         goblin_verdict *out) {
    if (!fp || !c || !out || !range_ok(fp, row0, rows) || col_panel < 0 || col_panel >= fp->np)
        return GOBLIN_EINVAL;
    int64_t n = fp->cb[col_panel + 1] - fp->cb[col_panel];
    /* The claimed result is judged, not trusted. */
    if (c->dtype != fp->dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (c->rank != 2 || c->shape[0] != rows || c->shape[1] != n)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (rows && !c->data) return GOBLIN_EINVAL;
    verdict_init(out);
    if (rows == 0) return GOBLIN_OK; /* nothing claimed, nothing to check */
    fv_range *r;
    goblin_err e = fv_prepare(fp, row0, rows, &r);
    if (e) return verdict_error(out, e);
    fv_judge(fp, r, col_panel, c, out);
    return GOBLIN_OK;
}

/* One tile: one column panel and one row range. */
goblin_err goblin_verify_matmul(const goblin_tensor *a, const goblin_tensor *b,
                                const goblin_tensor *c, const goblin_freivalds_params *pp,
                                goblin_verdict *out) {
    if (!a || !b || !c || !out) return GOBLIN_EINVAL;
    fv_args x;
    goblin_err e = fv_validate(a, b, pp, &x);
    if (e) return e;
    int64_t m = x.m, n = x.n;
    /* The claimed result is judged, not trusted. */
    if (c->dtype != x.dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (c->rank != 2 || c->shape[0] != m || c->shape[1] != n)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (m && n && !c->data) return GOBLIN_EINVAL;
    verdict_init(out);
    if (m == 0 || n == 0) return GOBLIN_OK; /* nothing claimed, nothing to check */
    int64_t cb[2] = {0, n};
    fvp *f;
    e = fv_new(a, b, &x, 1, cb, &f);
    if (e) return verdict_error(out, e);
    fv_range *r;
    e = fv_prepare(f, 0, m, &r);
    if (!e) fv_judge(f, r, 0, c, out);
    goblin_freivalds_panels_free(f);
    return e ? verdict_error(out, e) : GOBLIN_OK;
}

