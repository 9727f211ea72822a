/* libgoblin/backends/blis/blis_train3.c - CPU fast paths for the elementwise ops
 * that dominate a transformer's training step once matmul and attention are fast:
 *
 *  - add sub mul div (f32, f64) with any broadcast or strided input layout that the
 *    row/scalar kernel of blis_elementwise.c declines, e.g. [B, T, 1] against
 *    [B, T, C] (layer-norm backward). Dims are merged where every operand allows,
 *    then the innermost dim runs as a contiguous (or fixed-stride) loop calling the
 *    same scalar_ops.h function the reference kernel uses: bit-identical results.
 *  - exp on contiguous f32: the formula evaluator's vectorized float polynomial (at most
 *    0.98 ulp, within exp's 4u contract; not the reference's bits); f64: the reference's
 *    arithmetic (libm exp) without its block gather/store: bit-identical.
 *  - erf and gelu (erf form) on contiguous f32: a float rational erf where it is accurate
 *    (|x| < 2.5; gelu: -1.5 < x / sqrt2 < 3.5), a double-precision polynomial erf
 *    (error ~1e-11, then one rounding to f32) elsewhere: within the ops' contracts, not
 *    guaranteed bit-identical to the reference.
 *  - gelu_backward (f32, f64) and layer_norm_backward (f32, f64): see their sections.
 *  - softmax / log_softmax over a non-last axis: f64 the reference's double arithmetic
 *    in its order, with contiguous inner loops: bit-identical; f32 eight columns at a
 *    time with the vector exp (within the contract, not the reference's bits).
 *
 * Every other case goes on to the kernel that held the table slot before
 * (registered after blis_threaded.c), so nothing loses its earlier fast path.
 * Work is split into fixed blocks; elementwise results never depend on the split,
 * so they are the same bits for every thread count. */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <string.h>
#include "base/alloc.h"
#include "blis_impl.h"
#include "kernels/scalar_ops.h"
#include "kernels/expf.h"

#if defined(_OPENMP)
#define SIMD _Pragma("omp simd")
#define T3_SIMD_OR_BAD _Pragma("omp simd reduction(| : bad)")
#else
#define SIMD
#define T3_SIMD_OR_BAD
#endif

#define BLOCK ((int64_t)1 << 15) /* elements per work item (about) */

/* ---- broadcast binary ops ---------------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_COUNT };
static goblin__kernel_fn g_prev_bin[B_COUNT];
static goblin__kernel_fn g_prev_exp, g_prev_erf;

typedef void (*row_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);

#define ROW(name, T, F)                                                                     \
    static void name(const void *va, int64_t sa, const void *vb, int64_t sb, void *vo,       \
                     int64_t n) {                                                           \
        const T *restrict a = va;                                                           \
        const T *restrict b = vb;                                                           \
        T *restrict o = vo;                                                                 \
        if (sa == 1 && sb == 1) {                                                           \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = F(a[i], b[i]);                      \
        } else if (sa == 1 && sb == 0) {                                                    \
            const T y = b[0];                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = F(a[i], y);                         \
        } else if (sa == 0 && sb == 1) {                                                    \
            const T x = a[0];                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = F(x, b[i]);                         \
        } else {                                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = F(a[i * sa], b[i * sb]);                 \
        }                                                                                   \
    }

ROW(row_plus_f32, float, goblin__plus_f32)
ROW(row_minus_f32, float, goblin__minus_f32)
ROW(row_times_f32, float, goblin__times_f32)
ROW(row_div_f32, float, goblin__div_f32)
ROW(row_plus_f64, double, goblin__plus_f64)
ROW(row_minus_f64, double, goblin__minus_f64)
ROW(row_times_f64, double, goblin__times_f64)
ROW(row_div_f64, double, goblin__div_f64)

static const row_fn g_rows_f32[B_COUNT] = {row_plus_f32, row_minus_f32, row_times_f32, row_div_f32};
static const row_fn g_rows_f64[B_COUNT] = {row_plus_f64, row_minus_f64, row_times_f64, row_div_f64};

typedef struct bjob {
    row_fn f;
    int32_t rank;                  /* merged dims; the last one is the row */
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t st[3][GOBLIN_MAX_RANK]; /* element strides: out, a, b */
    const char *a, *b;
    char *o;
    size_t es;
    int64_t rows, rows_per; /* rows = product of all dims but the last */
} bjob;

static void brun(void *arg, int64_t item) {
    const bjob *j = arg;
    int64_t r0 = item * j->rows_per, r1 = r0 + j->rows_per;
    if (r1 > j->rows) r1 = j->rows;
    int32_t last = j->rank - 1;
    int64_t n = j->shape[last];
    for (int64_t r = r0; r < r1; r++) {
        /* offsets of row r: decompose r over dims [0, last) */
        int64_t rem = r, off[3] = {0, 0, 0};
        for (int32_t d = last - 1; d >= 0; d--) {
            int64_t i = rem % j->shape[d];
            rem /= j->shape[d];
            for (int q = 0; q < 3; q++) off[q] += i * j->st[q][d];
        }
        int64_t es = (int64_t)j->es;
        j->f(j->a + off[1] * es, j->st[1][last], j->b + off[2] * es, j->st[2][last],
             j->o + off[0] * es, n);
    }
}

static goblin_err bin_kernel(int which, goblin__kctx *k, const goblin__node *node,
                             const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    goblin_err e = g_prev_bin[which] ? g_prev_bin[which](k, node, in, n_in, out) : GOBLIN_ENOTSUP;
    if (e != GOBLIN_ENOTSUP) return e;
    if (n_in != 2 || in[0].dtype != in[1].dtype || out->dtype != in[0].dtype) return GOBLIN_ENOTSUP;
    if (in[0].rank > out->rank || in[1].rank > out->rank) return GOBLIN_ENOTSUP;
    bjob j = {0};
    if (out->dtype == GOBLIN_DTYPE_F32) j.f = g_rows_f32[which];
    else if (out->dtype == GOBLIN_DTYPE_F64) j.f = g_rows_f64[which];
    else return GOBLIN_ENOTSUP;
    j.es = goblin_dtype_size(out->dtype);
    int64_t numel = goblin__numel(out);
    if (numel == 0) return GOBLIN_OK;
    /* per-output-dim strides (0 where an input broadcasts), dropping size-1 dims and
     * merging a dim into the previous kept one where all three operands allow it */
    int32_t r = 0;
    for (int32_t d = 0; d < out->rank; d++) {
        int64_t sz = out->shape[d];
        if (sz == 1) continue;
        int64_t s[3];
        s[0] = out->strides[d];
        for (int q = 0; q < 2; q++) {
            int32_t dd = d - (out->rank - in[q].rank);
            if (dd < 0 || in[q].shape[dd] == 1) s[q + 1] = 0;
            else if (in[q].shape[dd] == sz) s[q + 1] = in[q].strides[dd];
            else return GOBLIN_ENOTSUP;
        }
        if (r > 0 && s[0] * sz == j.st[0][r - 1] && s[1] * sz == j.st[1][r - 1] &&
            s[2] * sz == j.st[2][r - 1]) {
            j.shape[r - 1] *= sz;
            for (int q = 0; q < 3; q++) j.st[q][r - 1] = s[q];
            continue;
        }
        j.shape[r] = sz;
        for (int q = 0; q < 3; q++) j.st[q][r] = s[q];
        r++;
    }
    if (r == 0) { /* a single element */
        j.shape[0] = 1;
        r = 1;
    }
    j.rank = r;
    j.a = in[0].data;
    j.b = in[1].data;
    j.o = out->data;
    j.rows = numel / j.shape[r - 1];
    int64_t per = BLOCK / j.shape[r - 1];
    j.rows_per = per < 1 ? 1 : per;
    int64_t items = (j.rows + j.rows_per - 1) / j.rows_per;
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, items, brun, &j);
    return GOBLIN_OK;
}

#define BIN(name, which)                                                                    \
    static goblin_err name(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, \
                           int32_t n_in, goblin_tensor *out) {                              \
        return bin_kernel(which, k, node, in, n_in, out);                                   \
    }
BIN(t3_add, B_ADD)
BIN(t3_sub, B_SUB)
BIN(t3_mul, B_MUL)
BIN(t3_div, B_DIV)

/* ---- exp (f32, f64), erf and gelu (f32) ------------------------------------------------
 * exp on f64: the reference's own arithmetic (libm exp), so the same bits; f32: below.
 * The tails of erf and gelu (erf form) on f32: erf evaluated in double by an odd Taylor
 * series below 0.25 and piecewise polynomials above (abs error < 1e-11, relative error
 * < 1e-12 near 0; f32's u is 6e-8), then gelu = 0.5 x (1 + erf(x / sqrt2)) in double and one
 * rounding to f32. The cancellation of 1 + erf for x < 0 costs at most 1e-11 |x|
 * absolute: within gelu's contract (8u relative + 8u absolute) and erf's (4u + 4u). */

/* erf on [0.25 k, 0.25 (k + 1)), k = 1..23: sum_i c[k-1][i] (x - mid_k)^i, mid_k = 0.25 k + 0.125;
 * Chebyshev fits of degree 7 to math.erf, max abs error 5.2e-12 */
static const double ERF_TAB[23][8] = {
    {0.40411690942961687, 0.98035280954563597, -0.36763229291483807, -0.23487619372370702,
     0.16657997256853804, 0.045475297349767969, -0.049756502540692998, -0.0054544331316677009},
    {0.62324088218531659, 0.76349953576816232, -0.47718720349697935, -0.055671847602169873,
     0.17645781973988081, -0.02741192312257703, -0.04113639444833312, 0.013782844448674869},
    {0.78407506106070468, 0.52474504529694055, -0.45915191636139624, 0.092923595971621822,
     0.11239711783995299, -0.067214540727014382, -0.010424863598099835, 0.018481555277794402},
    {0.88838823170449743, 0.31827395850153761, -0.35805820902906904, 0.16245233232960821,
     0.027975127444207645, -0.061323532925367144, 0.015349148599571533, 0.0095940843104751882},
    {0.94817007278406906, 0.17035977368423585, -0.23424469287377436, 0.15793770965613513,
     -0.030499313058439635, -0.030606621929481357, 0.022028300555150856, -0.001363872188697119},
    {0.97844373324025813, 0.080472259019563799, -0.13076742147250098, 0.11484062216189249,
     -0.049718684056524701, -0.0021355044828333379, 0.014396521681372733, -0.006134768213524126},
    {0.99199005766946036, 0.033545828423450164, -0.06289842694339072, 0.067441093214216957,
     -0.042260314588219869, 0.011462433069353985, 0.0041496230928345802, -0.0049155929574897055},
    {0.9973459706398754, 0.012340820614933282, -0.026224242490064487, 0.033037404674234903,
     -0.02636124947199513, 0.012495600728970362, -0.0017782675291743387, -0.0018793651351070276},
    {0.99921706178183167, 0.0040064778623732323, -0.0095153843531380622, 0.013730532904591157,
     -0.013133395364784193, 0.008357531322942615, -0.0030954753707631228, 0.00011143647551643842},
    {0.99979462426384158, 0.0011478751262025018, -0.0030131721700628572, 0.0048904260445586942,
     -0.0054143050436064443, 0.0042179435247220879, -0.0022457002819726677, 0.0006754980783819206},
    {0.99995214516031894, 0.00029022828289630801, -0.00083440644147537231, 0.0015025359769425158,
     -0.0018817189912177675, 0.001713270026123738, -0.0011442891507647806, 0.00052799417449890605},
    {0.99999010326542648, 6.475868318162975e-05, -0.00020237099108342987, 0.00040001982814958146,
     -0.00055754003168775499, 0.00057695107418146091, -0.00045578933941258952, 0.00026737165951130573},
    {0.99999818471859814, 1.2751740755017405e-05, -4.3037177649126259e-05, 9.2582989527742639e-05,
     -0.00014187124308899775, 0.00016376517884281487, -0.00014812599648759801, 0.00010293371278120191},
    {0.99999970485981715, 2.2159202627438883e-06, -8.0327302803949367e-06, 1.8673763518592747e-05,
     -3.116243370293996e-05, 3.9588086940451841e-05, -4.0159181374754625e-05, 3.1872448052373709e-05},
    {0.99999995748605874, 3.3982237376102148e-07, -1.3168173415882643e-06, 3.2884962053346954e-06,
     -5.9307150036362345e-06, 8.2073353234794949e-06, -9.2048236967975052e-06, 8.158896526910177e-06},
    {0.99999999457659994, 4.5989955533870082e-08, -1.8970990748150943e-07, 5.0637076241711953e-07,
     -9.807216985533225e-07, 1.4665246824898451e-06, -1.7993070064690018e-06, 1.7559883007626739e-06},
    {0.99999999938751694, 5.4927166487839756e-09, -2.4030890999588005e-08, 6.8258919694517558e-08,
     -1.4122208130414883e-07, 2.2670372732103068e-07, -3.0172815452034845e-07, 3.2057130270157704e-07},
    {0.99999999993878375, 5.7892877065243177e-10, -2.6776057900083949e-09, 8.0624092604595304e-09,
     -1.7734652556525456e-08, 3.047493307052824e-08, -4.3824501833443693e-08, 4.6980528002213672e-08},
    {0.99999999999458677, 5.384794873441467e-11, -2.6250170134389987e-10, 8.3561189387278023e-10,
     -1.9500592100218316e-09, 3.4868362015467181e-09, -5.2628876618654669e-09, 9.2724660174735319e-09},
    {0.99999999999957667, 4.4188926835892713e-12, -2.2644271941121216e-11, 7.6551634891504358e-11,
     -1.8908414345943956e-10, 2.7484256316343622e-10, -4.6829055255511771e-10, 4.1749925196568316e-09},
    {0.99999999999997069, 3.1985604687834694e-13, -1.727259212651408e-12, 6.096384440490737e-12,
     -1.446191967601617e-11, 3.3619404283409501e-11, -1.1328690283796118e-10, -1.1440900098358665e-10},
    {0.99999999999999811, 2.0701888318321645e-14, -1.2059748594893823e-13, 2.9410173703181388e-13,
     -2.3748345142759563e-13, 2.082419339260304e-11, -4.4507278012845943e-11, -7.1810116834467498e-10},
    {0.99999999999999933, 2.4265223513476957e-15, -5.3153752905270552e-14, -9.2330435580293372e-13,
     1.1159704391351601e-11, 1.6481627244358664e-10, -6.0302293877125424e-10, -7.5258169989828179e-09},
};

/* noinline: compiled once for the baseline ISA, so the FMA clones below that call it
 * cannot contract its a + b * c into fused operations (the same bits on every CPU) */
__attribute__((noinline)) static double erf_d(double x) {
    double a = fabs(x);
    if (!(a < 6.0)) return isnan(x) ? x : copysign(1.0, x); /* 1 - erf(6) < 3e-17 */
    double r;
    if (a < 0.25) {
        /* 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), n <= 6: relative error < 3e-13 */
        double z = a * a, z2 = z * z, z4 = z2 * z2;
        double p01 = 1.0 - z * (1.0 / 3.0), p23 = 1.0 / 10.0 - z * (1.0 / 42.0);
        double p45 = 1.0 / 216.0 - z * (1.0 / 1320.0), p6 = 1.0 / 9360.0;
        r = (p01 + z2 * p23) + z4 * (p45 + z2 * p6);
        r = 1.12837916709551257390 * a * r;
    } else { /* Estrin's scheme: short dependency chains */
        int k = (int)(a * 4.0); /* 1..23 */
        const double *c = ERF_TAB[k - 1];
        double u = a - (0.25 * k + 0.125), u2 = u * u, u4 = u2 * u2;
        r = ((c[0] + c[1] * u) + u2 * (c[2] + c[3] * u)) +
            u4 * ((c[4] + c[5] * u) + u2 * (c[6] + c[7] * u));
    }
    return copysign(r, x);
}

/* ---- f32 exp, erf and gelu in float, many lanes at a time ----------------------------------
 * One copy of each loop per ISA level (ifunc), as formula_eval.c: the levels include FMA,
 * which fmaf needs to be fast; fmaf is exactly specified (the baseline clone calls libm's),
 * so every clone and CPU gives the same bits. Each element's result depends only on that
 * element: the same bits for every thread count and block split. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#if __GNUC__ >= 12
#define T3_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define T3_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#endif
#else
#define T3_CLONES
#endif

/* exp: the formula evaluator's f32 exp (expf_impl.h), at most 0.98 ulp over all 2^32
 * inputs against exp in double (exp's contract: 4u + tiny); overflow gives +inf,
 * exp(-inf) = 0, NaN stays NaN. Branch-free, so it vectorizes. */
static inline __attribute__((always_inline)) float t3_expf(float x) { return goblin__expf_inline(x); }

T3_CLONES static void expf_f32(const float *restrict x, float *restrict y, int64_t n) {
    SIMD for (int64_t i = 0; i < n; i++) y[i] = t3_expf(x[i]);
}

/* erf in float for |x| < 3.5 from three polynomials fitted for this project by
 * tools/fit_erf_f32.py (least squares reweighted towards the minimax error, against
 * mpmath's erf): |x| < 1.25: x P1(x^2) (degree 7 in x^2; odd, so erf(+-0) = +-0);
 * 1.25 <= |x| < 2.5: P2(|x| - 1.875) (degree 10); 2.5 <= |x| < 3.5: P3(|x| - 3)
 * (degree 9); the sign of x is put back. Horner with FMAs; every lane computes all three
 * and keeps one (no branches: it vectorizes). Fit error below 1e-9 relative; evaluated in
 * float, at most 0.37 of erf's contract bound (4u + 4u |erf|) over a sweep of the range
 * (the test in test_blis_train.c checks every 4096th float against long double). For
 * erf the fast path is used for |x| < 2.5, for gelu = 0.5 x (1 + erf(x / sqrt2)) for
 * -1.5 < x / sqrt2 < 3.5 (where 1 + erf does not cancel too much); elsewhere (the tails;
 * +-inf, NaN) the element is recomputed by erf_d above in double: a per-element choice,
 * so results do not depend on the neighbours. */
static const float T3_ERF_P1[8] = {1.128379107e+00f, -3.761262894e-01f, 1.128367484e-01f, -2.686024643e-02f, 5.209015682e-03f, -8.339565247e-04f, 1.039385024e-04f, -7.572908544e-06f};
static const float T3_ERF_P2[11] = {9.919900298e-01f, 3.354583308e-02f, -6.289841235e-02f, 6.744083762e-02f, -4.226035252e-02f, 1.146637090e-02f, 4.109880421e-03f, -4.951612558e-03f, 1.409097458e-03f, 4.266961187e-04f, -3.447879280e-04f};
static const float T3_ERF_P3[10] = {9.999778867e-01f, 1.392536651e-04f, -4.177687224e-04f, 7.890692214e-04f, -1.044130651e-03f, 1.016940339e-03f, -7.407192606e-04f, 3.892347740e-04f, -1.236715470e-04f, 1.213516589e-05f};

/* The three pieces of t3_erf_poly, straight-line Horner (a loop here would keep the
 * callers' loops from vectorizing); t3_erf_small and t3_erf_mid use the same ones, so
 * they give t3_erf_poly's bits where they apply. */
#define T3_H(v, c, k) fmaf((v), (k), (c))
static inline __attribute__((always_inline)) float t3_erf_p1(float t) {
    const float *c1 = T3_ERF_P1;
    float p1 = T3_H(t, c1[6], c1[7]);
    p1 = T3_H(t, c1[5], p1), p1 = T3_H(t, c1[4], p1), p1 = T3_H(t, c1[3], p1);
    p1 = T3_H(t, c1[2], p1), p1 = T3_H(t, c1[1], p1), p1 = T3_H(t, c1[0], p1);
    return p1;
}
static inline __attribute__((always_inline)) float t3_erf_p2(float u2) {
    const float *c2 = T3_ERF_P2;
    float p2 = T3_H(u2, c2[9], c2[10]);
    p2 = T3_H(u2, c2[8], p2), p2 = T3_H(u2, c2[7], p2), p2 = T3_H(u2, c2[6], p2);
    p2 = T3_H(u2, c2[5], p2), p2 = T3_H(u2, c2[4], p2), p2 = T3_H(u2, c2[3], p2);
    p2 = T3_H(u2, c2[2], p2), p2 = T3_H(u2, c2[1], p2), p2 = T3_H(u2, c2[0], p2);
    return p2;
}
static inline __attribute__((always_inline)) float t3_erf_p3(float u3) {
    const float *c3 = T3_ERF_P3;
    float p3 = T3_H(u3, c3[8], c3[9]);
    p3 = T3_H(u3, c3[7], p3), p3 = T3_H(u3, c3[6], p3), p3 = T3_H(u3, c3[5], p3);
    p3 = T3_H(u3, c3[4], p3), p3 = T3_H(u3, c3[3], p3), p3 = T3_H(u3, c3[2], p3);
    p3 = T3_H(u3, c3[1], p3), p3 = T3_H(u3, c3[0], p3);
    return p3;
}
#undef T3_H

static inline __attribute__((always_inline)) float t3_erf_poly(float x) {
    float a = fabsf(x), t = x * x, u2 = a - 1.875f, u3 = a - 3.0f;
    float p1 = t3_erf_p1(t), p2 = t3_erf_p2(u2), p3 = t3_erf_p3(u3);
    /* Branch-free: every value is computed, then chosen with integer masks on the bits
     * (|x| compared as an integer; NaN lands in a tail, recomputed anyway), which the
     * compiler vectorizes; float compares and selects kept this loop scalar. */
    union {
        float f;
        int32_t i;
    } ab = {a}, xb = {x}, nb = {x * p1}, b2 = {p2}, b3 = {p3}, r;
    int32_t m1 = -(int32_t)(ab.i < 0x3fa00000), m2 = -(int32_t)(ab.i < 0x40200000); /* 1.25f, 2.5f */
    int32_t far = ((b2.i & m2) | (b3.i & ~m2)) | (xb.i & INT32_MIN); /* P2, P3 > 0: the sign of x */
    r.i = (nb.i & m1) | (far & ~m1);
    return r.f;
}

#define T3_RSQRT2F 0.70710678118654752440f

/* t3_erf_poly for |x| < 1.25 only: its first piece alone, the same operations (the result
 * goes through the same integer mask, which also keeps the compiler from fusing x * p1
 * into a caller's addition: the bits are t3_erf_poly's) */
static inline __attribute__((always_inline)) float t3_erf_small(float x) {
    float a = fabsf(x), t = x * x;
    float p1 = t3_erf_p1(t);
    union {
        float f;
        int32_t i;
    } ab = {a}, nb = {x * p1}, r;
    int32_t m1 = -(int32_t)(ab.i < 0x3fa00000); /* 1.25f: all ones here */
    r.i = nb.i & m1;
    return r.f;
}

/* gelu's blocks of GELU_BLK elements: where every x / sqrt2 of a block is below 1.25 in
 * magnitude (most of them, for activations of moderate size) only the first polynomial is
 * evaluated; a per-block choice of work, not of result (each element's value is what
 * t3_erf_poly gives it either way), so results do not depend on the neighbours. */
#define GELU_BLK 32

/* n elements of erf (gelu = false) or gelu (erf form) on f32 */
T3_CLONES static void erf_gelu_f32(const float *restrict x, float *restrict y, int64_t n,
                                   bool gelu) {
    if (gelu) {
        for (int64_t i0 = 0; i0 < n; i0 += GELU_BLK) {
            int64_t e = i0 + GELU_BLK < n ? i0 + GELU_BLK : n;
            int bad = 0;
            T3_SIMD_OR_BAD
            for (int64_t i = i0; i < e; i++) bad |= !(fabsf(x[i] * T3_RSQRT2F) < 1.25f);
            if (!bad) {
                SIMD for (int64_t i = i0; i < e; i++) {
                    float t = x[i] * T3_RSQRT2F;
                    y[i] = 0.5f * x[i] * (1.0f + t3_erf_small(t));
                }
            } else {
                SIMD for (int64_t i = i0; i < e; i++) {
                    float t = x[i] * T3_RSQRT2F;
                    y[i] = 0.5f * x[i] * (1.0f + t3_erf_poly(t));
                }
                /* this block's tails (below): a block of the first kind has none */
                for (int64_t i = i0; i < e; i++) {
                    float t = x[i] * T3_RSQRT2F;
                    if ((t <= -1.5f) | (t >= 3.5f) | (t != t)) {
                        double v = x[i];
                        y[i] = (float)(0.5 * v * (1.0 + erf_d(v * 0.70710678118654752440)));
                    }
                }
            }
        }
        return;
    }
    SIMD for (int64_t i = 0; i < n; i++) y[i] = t3_erf_poly(x[i]);
    /* the tails (and inf, NaN: the comparisons fail) in double; a vector test per 64 first */
    for (int64_t i0 = 0; i0 < n; i0 += 64) {
        int64_t e = i0 + 64 < n ? i0 + 64 : n;
        int bad = 0;
        T3_SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) {
            float t = x[i];
            bad |= (t <= -2.5f) | (t >= 2.5f) | (t != t); /* no branches: it vectorizes */
        }
        if (__builtin_expect(!bad, 1)) continue;
        for (int64_t i = i0; i < e; i++) {
            float t = x[i];
            if ((t <= -2.5f) | (t >= 2.5f) | (t != t)) y[i] = (float)erf_d(x[i]);
        }
    }
}

enum { U_EXP, U_ERF, U_GELU };

typedef struct ujob {
    int kind;
    goblin_dtype dt;
    const void *x;
    void *y;
    int64_t n;
} ujob;

static void urun(void *arg, int64_t item) {
    const ujob *j = arg;
    int64_t lo = item * BLOCK, hi = lo + BLOCK < j->n ? lo + BLOCK : j->n;
    if (j->dt == GOBLIN_DTYPE_F64) { /* exp only */
        const double *restrict x = j->x;
        double *restrict y = j->y;
        for (int64_t i = lo; i < hi; i++) y[i] = exp(x[i]);
        return;
    }
    const float *restrict x = j->x;
    float *restrict y = j->y;
    switch (j->kind) {
    case U_EXP: expf_f32(x + lo, y + lo, hi - lo); break;
    case U_ERF: erf_gelu_f32(x + lo, y + lo, hi - lo, false); break;
    default: erf_gelu_f32(x + lo, y + lo, hi - lo, true); break;
    }
}

static goblin_err unary(goblin__kernel_fn prev, int kind, goblin__kctx *k, const goblin__node *node,
                        const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    bool ok = n_in == 1 && in[0].dtype == out->dtype && goblin_tensor_is_contiguous(&in[0]) &&
              goblin_tensor_is_contiguous(out) && goblin__numel(&in[0]) == goblin__numel(out) &&
              (out->dtype == GOBLIN_DTYPE_F32 || (kind == U_EXP && out->dtype == GOBLIN_DTYPE_F64));
    if (ok && kind == U_GELU &&
        goblin__attr_i(node, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF) != GOBLIN_GELU_ERF)
        ok = false;
    if (!ok) return prev ? prev(k, node, in, n_in, out) : GOBLIN_ENOTSUP;
    ujob j = {kind, out->dtype, in[0].data, out->data, goblin__numel(out)};
    if (j.n == 0) return GOBLIN_OK;
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, (j.n + BLOCK - 1) / BLOCK, urun, &j);
    return GOBLIN_OK;
}

static goblin__kernel_fn g_prev_gelu;

static goblin_err t3_exp(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    return unary(g_prev_exp, U_EXP, k, node, in, n_in, out);
}

static goblin_err t3_erf(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    return unary(g_prev_erf, U_ERF, k, node, in, n_in, out);
}

static goblin_err t3_gelu(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    return unary(g_prev_gelu, U_GELU, k, node, in, n_in, out);
}

/* ---- softmax / log_softmax over a non-last axis ----------------------------------------
 * f64: the reference's arithmetic in its order (double; max with NaN sticking, then the sum
 * of exp(x - max) in axis order, then log or division), run for all positions of the
 * trailing dims together so the inner loops are contiguous: the same bits. f32: sm_cols_f32
 * below. Last-axis cases go on to blis_reduce.c's kernel. */

static goblin__kernel_fn g_prev_softmax, g_prev_log_softmax;

typedef struct smjob {
    bool f64, lg;
    const void *x;
    void *y;
    int64_t A, R, L;
    double *work; /* 2 L doubles per row: running max and sum */
} smjob;

#define SM_BODY(T)                                                                          \
    do {                                                                                    \
        const T *x = (const T *)j->x + a * j->R * L;                                        \
        T *y = (T *)j->y + a * j->R * L;                                                    \
        for (int64_t l = 0; l < L; l++) {                                                   \
            m[l] = -INFINITY;                                                               \
            s[l] = 0;                                                                       \
        }                                                                                   \
        for (int64_t r = 0; r < j->R; r++)                                                  \
            for (int64_t l = 0; l < L; l++) {                                               \
                double v = x[r * L + l];                                                    \
                if (m[l] == m[l] && (v > m[l] || v != v)) m[l] = v;                         \
            }                                                                               \
        for (int64_t r = 0; r < j->R; r++)                                                  \
            for (int64_t l = 0; l < L; l++) s[l] += exp((double)x[r * L + l] - m[l]);       \
        if (j->lg) {                                                                        \
            for (int64_t l = 0; l < L; l++) s[l] = log(s[l]);                               \
            for (int64_t r = 0; r < j->R; r++)                                              \
                for (int64_t l = 0; l < L; l++)                                             \
                    y[r * L + l] = (T)(((double)x[r * L + l] - m[l]) - s[l]);               \
        } else {                                                                            \
            for (int64_t r = 0; r < j->R; r++)                                              \
                for (int64_t l = 0; l < L; l++)                                             \
                    y[r * L + l] = (T)(exp((double)x[r * L + l] - m[l]) / s[l]);            \
        }                                                                                   \
    } while (0)

/* f32: 8 trailing positions (columns l) side by side, each lane its own softmax over the
 * axis, every operation per lane (a column's bits do not depend on its neighbours, on L,
 * or on whether it is in a whole vector or the padded tail): max with NaN sticking; exp of
 * x - max by expf_impl.h's vector form (Cody-Waite, our fitted polynomial, about 1 ulp,
 * separately rounded operations: the same bits in both clones), summed in axis order in
 * double; then, as blis_reduce.c's last-axis kernel, log: (x - max) - (float)log(sum),
 * softmax: exp * (float)(1 / sum). A NaN or an infinite max gives the column NaN (what
 * the reference's exp(inf - inf) or NaN sum gives). Within the op's contract, not the
 * reference's bits. */
typedef float sm_v8f __attribute__((vector_size(32)));
typedef float sm_v4f __attribute__((vector_size(16)));
typedef int32_t sm_v8i __attribute__((vector_size(32)));
typedef double sm_v4d __attribute__((vector_size(32)));
#define SM_BLEND(m, a, b) ((sm_v8f)(((sm_v8i)(a) & (m)) | ((sm_v8i)(b) & ~(m))))

static inline __attribute__((always_inline)) sm_v8f sm_ld(const float *p, int64_t w) {
    sm_v8f v = {0};
    if (w == 8) memcpy(&v, p, sizeof v);
    else
        for (int64_t i = 0; i < w; i++) v[i] = p[i];
    return v;
}

static inline __attribute__((always_inline)) void sm_st(float *p, sm_v8f v, int64_t w) {
    if (w == 8) memcpy(p, &v, sizeof v);
    else
        for (int64_t i = 0; i < w; i++) p[i] = v[i];
}

__attribute__((target_clones("avx2", "default"))) static void
sm_cols_f32(const float *x, float *y, int64_t R, int64_t L, bool lg) {
    const sm_v8f zero = {0};
    for (int64_t l0 = 0; l0 < L; l0 += 8) {
        int64_t w = L - l0 < 8 ? L - l0 : 8;
        sm_v8f m = zero - INFINITY;
        sm_v8i bad = {0};
        for (int64_t r = 0; r < R; r++) {
            sm_v8f v = sm_ld(x + r * L + l0, w);
            bad |= v != v;
            m = SM_BLEND(v > m, v, m);
        }
        bad |= (m == INFINITY) | (m == -INFINITY);
        m = SM_BLEND(bad, zero, m);
        sm_v4d s0 = {0}, s1 = {0};
        for (int64_t r = 0; r < R; r++) {
            sm_v8f d = sm_ld(x + r * L + l0, w) - m;
            d = SM_BLEND(bad, zero, d);
            sm_v8f e = GOBLIN__VEXPF_NEG(sm_v8f, sm_v8i, d);
            sm_v4f lo = {e[0], e[1], e[2], e[3]}, hi = {e[4], e[5], e[6], e[7]};
            s0 += __builtin_convertvector(lo, sm_v4d);
            s1 += __builtin_convertvector(hi, sm_v4d);
            if (!lg) sm_st(y + r * L + l0, e, w);
        }
        sm_v8f f; /* lg: (float)log(sum); else (float)(1 / sum) */
        for (int q = 0; q < 4; q++) {
            f[q] = lg ? (float)log(s0[q]) : (float)(1.0 / s0[q]);
            f[q + 4] = lg ? (float)log(s1[q]) : (float)(1.0 / s1[q]);
        }
        const sm_v8f nanv = zero + NAN;
        for (int64_t r = 0; r < R; r++) {
            sm_v8f o = lg ? (sm_ld(x + r * L + l0, w) - m) - f : sm_ld(y + r * L + l0, w) * f;
            sm_st(y + r * L + l0, SM_BLEND(bad, nanv, o), w);
        }
    }
}

static void smrun(void *arg, int64_t a) {
    smjob *j = arg;
    int64_t L = j->L;
    if (!j->f64) {
        int64_t at = a * j->R * L;
        sm_cols_f32((const float *)j->x + at, (float *)j->y + at, j->R, L, j->lg);
        return;
    }
    double *m = j->work + a * 2 * L, *s = m + L;
    SM_BODY(double);
}

static goblin_err t3_softmax(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    bool lg = node->op == GOBLIN_OP_LOG_SOFTMAX;
    goblin__kernel_fn prev = lg ? g_prev_log_softmax : g_prev_softmax;
    const goblin_tensor *x = &in[0];
    int64_t ax = goblin__attr_i(node, GOBLIN_ATTR_AXIS, -1);
    if (ax < 0) ax += x->rank;
    bool ok = n_in == 1 && x->rank > 0 && ax >= 0 && ax < x->rank - 1 && x->dtype == out->dtype &&
              (x->dtype == GOBLIN_DTYPE_F32 || x->dtype == GOBLIN_DTYPE_F64) &&
              goblin_tensor_is_contiguous(x) && goblin_tensor_is_contiguous(out);
    int64_t A = 1, L = 1;
    if (ok) {
        for (int32_t d = 0; d < ax; d++) A *= x->shape[d];
        for (int32_t d = (int32_t)ax + 1; d < x->rank; d++) L *= x->shape[d];
        ok = L > 1;
    }
    if (!ok) return prev ? prev(k, node, in, n_in, out) : GOBLIN_ENOTSUP;
    smjob j = {x->dtype == GOBLIN_DTYPE_F64, lg, x->data, out->data, A, x->shape[ax], L, NULL};
    if (A == 0 || j.R == 0) return GOBLIN_OK;
    if (j.f64 && !(j.work = goblin__alloc((size_t)A * (size_t)L * 2 * sizeof(double))))
        return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "softmax: out of memory");
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, A, smrun, &j);
    goblin__free(j.work);
    return GOBLIN_OK;
}

/* ---- gelu_backward ----------------------------------------------------------------------
 * grad_out * gelu'(x). f32, erf form: gelu' = Phi(x) + x phi(x) with Phi = 0.5 + 0.5 erf(x/sqrt2)
 * from the forward's float erf (t3_erf_poly) and phi from the f32 exp above, in float with
 * explicit FMAs (the same bits in every clone), where the float erf is fitted (|x/sqrt2| < 3.5).
 * For x < 0, 0.5 + 0.5 erf cancels as in torch's own kernel: the error stays a few u absolute
 * in gelu' (about 1u of Phi's magnitude 1/2), within the contract's absolute part, though not
 * relative to a tiny gelu' far out on the left. Elsewhere (|x| > 4.95, +-inf, NaN) and for f64 or the tanh form,
 * each element is computed in double by gelu_grad_d (the reference's formulas: Phi as
 * 0.5 erfc(-x/sqrt2), no cancellation) and rounded once. Per-element choices only: results
 * do not depend on the neighbours or the split. */

/* noinline, baseline ISA: no fused multiply-adds, the same bits on every CPU */
__attribute__((noinline)) static double gelu_grad_d(double x, bool tanh_form) {
    if (tanh_form) {
        const double k0 = 0.79788456080286535588, k1 = 0.044715;
        double x2 = x * x, t = tanh(k0 * (x + k1 * x2 * x));
        return 0.5 * (1.0 + t) + 0.5 * x * ((1.0 - t * t) * (k0 * (1.0 + 3.0 * k1 * x2)));
    }
    double cdf = 0.5 * erfc(-x * 0.70710678118654752440);
    return cdf + x * (exp(-0.5 * x * x) * 0.39894228040143267794);
}

/* t3_erf_poly for |x| < 2.5 only: its first two pieces, the same operations and the
 * same selection of P1 or P2 by the bits (so the bits of t3_erf_poly there) */
static inline __attribute__((always_inline)) float t3_erf_mid(float x) {
    float a = fabsf(x), t = x * x, u2 = a - 1.875f;
    float p1 = t3_erf_p1(t), p2 = t3_erf_p2(u2);
    union {
        float f;
        int32_t i;
    } ab = {a}, xb = {x}, nb = {x * p1}, b2 = {p2}, r;
    int32_t m1 = -(int32_t)(ab.i < 0x3fa00000); /* 1.25f */
    int32_t far = b2.i | (xb.i & INT32_MIN);
    r.i = (nb.i & m1) | (far & ~m1);
    return r.f;
}

/* gelu_backward's blocks of GELU_BWD_BLK elements, as the forward's: where every |x / sqrt2|
 * of a block is below 1.25 only P1 is evaluated, else below 2.5 P1 and P2, else all three;
 * a per-block choice of work, not of result (each element gets t3_erf_poly's bits). */
#define GELU_BWD_BLK 64
#define GELU_BWD_ELEM(ERF)                                                                  \
    do {                                                                                    \
        float v = x[i];                                                                     \
        float cdf = fmaf(0.5f, ERF(v * T3_RSQRT2F), 0.5f);                                  \
        float pdf = t3_expf((v * v) * -0.5f) * 0.398942280401432678f;                       \
        y[i] = g[i] * fmaf(v, pdf, cdf);                                                    \
    } while (0)

T3_CLONES static void gelu_bwd_f32(const float *restrict g, const float *restrict x,
                                   float *restrict y, int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += GELU_BWD_BLK) {
        int64_t e = i0 + GELU_BWD_BLK < n ? i0 + GELU_BWD_BLK : n;
        int bad = 0; /* some |x / sqrt2| >= 1.25 (or NaN) */
        T3_SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) bad |= !(fabsf(x[i] * T3_RSQRT2F) < 1.25f);
        if (!bad) {
            SIMD for (int64_t i = i0; i < e; i++) GELU_BWD_ELEM(t3_erf_small);
            continue;
        }
        bad = 0; /* some |x / sqrt2| >= 2.5 (or NaN) */
        T3_SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) bad |= !(fabsf(x[i] * T3_RSQRT2F) < 2.5f);
        if (!bad) {
            SIMD for (int64_t i = i0; i < e; i++) GELU_BWD_ELEM(t3_erf_mid);
        } else {
            SIMD for (int64_t i = i0; i < e; i++) GELU_BWD_ELEM(t3_erf_poly);
            /* this block's tails (below): blocks of the first two kinds have none */
            for (int64_t i = i0; i < e; i++) {
                float t = x[i] * T3_RSQRT2F;
                if ((t <= -3.5f) | (t >= 3.5f) | (t != t))
                    y[i] = (float)((double)g[i] * gelu_grad_d(x[i], false));
            }
        }
    }
}

typedef struct gbjob {
    bool f64, th;
    const void *g, *x;
    void *y;
    int64_t n;
} gbjob;

static void gbrun(void *arg, int64_t item) {
    const gbjob *j = arg;
    int64_t lo = item * BLOCK, hi = lo + BLOCK < j->n ? lo + BLOCK : j->n;
    if (j->f64) {
        const double *g = j->g, *x = j->x;
        double *y = j->y;
        for (int64_t i = lo; i < hi; i++) y[i] = g[i] * gelu_grad_d(x[i], j->th);
    } else if (j->th) {
        const float *g = j->g, *x = j->x;
        float *y = j->y;
        for (int64_t i = lo; i < hi; i++) y[i] = (float)((double)g[i] * gelu_grad_d(x[i], true));
    } else {
        gelu_bwd_f32((const float *)j->g + lo, (const float *)j->x + lo, (float *)j->y + lo, hi - lo);
    }
}

static goblin__kernel_fn g_prev_gelu_bwd, g_prev_ln_bwd;

static bool f32_or_f64(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64; }

static bool all_contiguous(const goblin_tensor *in, int32_t n_in, const goblin_tensor *out) {
    for (int32_t i = 0; i < n_in; i++)
        if (in[i].dtype != out->dtype || !goblin_tensor_is_contiguous(&in[i])) return false;
    return goblin_tensor_is_contiguous(out);
}

static goblin_err t3_gelu_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    if (n_in != 2 || !f32_or_f64(out->dtype) || !all_contiguous(in, n_in, out) ||
        goblin__numel(&in[0]) != goblin__numel(out) || goblin__numel(&in[1]) != goblin__numel(out))
        return g_prev_gelu_bwd ? g_prev_gelu_bwd(k, node, in, n_in, out) : GOBLIN_ENOTSUP;
    gbjob j = {out->dtype == GOBLIN_DTYPE_F64,
               goblin__attr_i(node, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF) == GOBLIN_GELU_TANH,
               in[0].data, in[1].data, out->data, goblin__numel(out)};
    if (j.n == 0) return GOBLIN_OK;
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, (j.n + BLOCK - 1) / BLOCK, gbrun, &j);
    return GOBLIN_OK;
}

/* ---- layer_norm_backward ----------------------------------------------------------------
 * Per row of the last norm_ndim dims, the statistics exactly as blis_reduce.c's forward
 * computes them (the same bits): sums of x and then of (x - mu)^2 in 4*VN lanes of the
 * dtype (element i into lane i mod 4*VN, 32 lanes for f32, 16 for f64), the lanes added in
 * lane order in double; mu = (T)(sum / n), rs = (T)(1 / sqrt(sum2 / n + eps)). Then, with
 * xhat = (x - mu) rs and dxhat = grad_out * weight, index 0 gives
 * d x = rs ((dxhat - mean(dxhat)) - xhat mean(dxhat xhat)), the two means summed in the
 * same lanes, folded into double as a fixed pairwise tree (ln_fold_tree); index 1 gives
 * d weight, each column's sum of grad_out xhat over the rows in row order in double. The
 * statistics are also kept for the run (the lns table below): the forward's are used when
 * its node ran first, with the same bits. These clones do not enable FMA (as
 * blis_reduce.c's), so the bits do not depend on the CPU; rows (index 0) or columns
 * (index 1) are split among threads, never a sum: the same bits for every thread count. */
#define LN_CLONES __attribute__((target_clones("avx2", "default")))
#define LN_INL static inline __attribute__((always_inline))

typedef struct lnjob {
    bool f64;
    const void *g, *x, *w;
    void *y;
    void *stats; /* mu of every row, then rs of every row (NULL: d x computes its own) */
    int64_t rows, len, per; /* per: rows (index 0, stats) or columns (index 1) per item */
    double eps;
} lnjob;

typedef float ln_v8f __attribute__((vector_size(32)));
typedef double ln_v4d __attribute__((vector_size(32)));

#define LN_DEF(S, T, VT, VN, L)                                                                 \
    LN_INL VT S##_ln_ld(const T *p) {                                                           \
        VT v;                                                                                   \
        memcpy(&v, p, sizeof v);                                                                \
        return v;                                                                               \
    }                                                                                           \
    /* the L = 4 VN lane values of sum (x_i - mu)^p, p = 1 or 2, as the forward's S##_lanes:   \
     * its tail lanes add 0 where there is no element, which changes no bit (a lane is never   \
     * -0), so here the tail elements are added to their lanes directly */                    \
    LN_INL void S##_ln_lanes(const T *x, int64_t n, T mu, int sq, T *lanes) {                  \
        VT a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                              \
        int64_t i = 0;                                                                          \
        for (; i + L <= n; i += L) {                                                            \
            VT v0 = S##_ln_ld(x + i) - mu, v1 = S##_ln_ld(x + i + VN) - mu;                     \
            VT v2 = S##_ln_ld(x + i + 2 * VN) - mu, v3 = S##_ln_ld(x + i + 3 * VN) - mu;        \
            if (sq) {                                                                           \
                v0 *= v0;                                                                       \
                v1 *= v1;                                                                       \
                v2 *= v2;                                                                       \
                v3 *= v3;                                                                       \
            }                                                                                   \
            a0 += v0;                                                                           \
            a1 += v1;                                                                           \
            a2 += v2;                                                                           \
            a3 += v3;                                                                           \
        }                                                                                       \
        memcpy(lanes, &a0, sizeof a0);                                                          \
        memcpy(lanes + VN, &a1, sizeof a1);                                                     \
        memcpy(lanes + 2 * VN, &a2, sizeof a2);                                                 \
        memcpy(lanes + 3 * VN, &a3, sizeof a3);                                                 \
        for (int64_t l = 0; i + l < n; l++) {                                                   \
            T v = x[i + l] - mu;                                                                \
            lanes[l] += sq ? v * v : v;                                                         \
        }                                                                                       \
    }                                                                                           \
    /* the lanes of nr <= 4 rows, each folded in lane order into double; the rows' chains of  \
     * additions are independent, so they overlap */                                          \
    LN_INL void S##_ln_fold(T (*l)[L], int nr, double *out) {                                   \
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                  \
        for (int j = 0; j < L; j++) {                                                           \
            s0 += (double)l[0][j];                                                              \
            if (nr > 1) s1 += (double)l[1][j];                                                  \
            if (nr > 2) s2 += (double)l[2][j];                                                  \
            if (nr > 3) s3 += (double)l[3][j];                                                  \
        }                                                                                       \
        out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;                                     \
    }                                                                                           \
    /* the lanes of nr <= 4 rows, each folded into double as a fixed pairwise tree (lane j  \
     * with lane j + L/2, then j + L/4, ...): short chains; for the sums only the backward   \
     * takes (the statistics keep the forward's order above) */                              \
    LN_INL void S##_ln_fold_tree(T (*l)[L], int nr, double *out) {                              \
        for (int r = 0; r < nr; r++) {                                                          \
            double a[L];                                                                        \
            for (int q = 0; q < L; q++) a[q] = (double)l[r][q];                                 \
            for (int h = L / 2; h >= 1; h /= 2)                                                 \
                for (int q = 0; q < h; q++) a[q] += a[q + h];                                   \
            out[r] = a[0];                                                                      \
        }                                                                                       \
    }                                                                                           \
    /* mu and rs of nr <= 4 rows (row r at x + r n), the forward's bits */                     \
    LN_INL void S##_ln_stats(const T *x, int64_t n, int nr, double eps, T *mu, T *rs) {        \
        T l[4][L];                                                                              \
        double s[4];                                                                            \
        for (int r = 0; r < nr; r++) S##_ln_lanes(x + r * n, n, 0, 0, l[r]);                    \
        S##_ln_fold(l, nr, s);                                                                  \
        for (int r = 0; r < nr; r++) mu[r] = (T)(s[r] / (double)n);                             \
        for (int r = 0; r < nr; r++) S##_ln_lanes(x + r * n, n, mu[r], 1, l[r]);                \
        S##_ln_fold(l, nr, s);                                                                  \
        for (int r = 0; r < nr; r++) rs[r] = (T)(1.0 / sqrt(s[r] / (double)n + eps));           \
    }                                                                                           \
    /* the lanes of sum dxhat and sum dxhat xhat of one row (lane i mod L, as above) */         \
    LN_INL void S##_ln_dlanes(const T *g, const T *x, const T *w, int64_t n, T mu, T rs, T *la, \
                              T *lb) {                                                          \
        VT sa0 = {0}, sa1 = {0}, sb0 = {0}, sb1 = {0}, sa2 = {0}, sa3 = {0}, sb2 = {0}, sb3 = {0}; \
        int64_t i = 0;                                                                          \
        for (; i + L <= n; i += L) {                                                            \
            VT d0 = S##_ln_ld(g + i), d1 = S##_ln_ld(g + i + VN);                               \
            VT d2 = S##_ln_ld(g + i + 2 * VN), d3 = S##_ln_ld(g + i + 3 * VN);                  \
            if (w) {                                                                            \
                d0 *= S##_ln_ld(w + i);                                                         \
                d1 *= S##_ln_ld(w + i + VN);                                                    \
                d2 *= S##_ln_ld(w + i + 2 * VN);                                                \
                d3 *= S##_ln_ld(w + i + 3 * VN);                                                \
            }                                                                                   \
            VT h0 = (S##_ln_ld(x + i) - mu) * rs, h1 = (S##_ln_ld(x + i + VN) - mu) * rs;       \
            VT h2 = (S##_ln_ld(x + i + 2 * VN) - mu) * rs;                                      \
            VT h3 = (S##_ln_ld(x + i + 3 * VN) - mu) * rs;                                      \
            sa0 += d0, sa1 += d1, sa2 += d2, sa3 += d3;                                         \
            sb0 += d0 * h0, sb1 += d1 * h1, sb2 += d2 * h2, sb3 += d3 * h3;                     \
        }                                                                                       \
        memcpy(la, &sa0, sizeof sa0);                                                           \
        memcpy(la + VN, &sa1, sizeof sa1);                                                      \
        memcpy(la + 2 * VN, &sa2, sizeof sa2);                                                  \
        memcpy(la + 3 * VN, &sa3, sizeof sa3);                                                  \
        memcpy(lb, &sb0, sizeof sb0);                                                           \
        memcpy(lb + VN, &sb1, sizeof sb1);                                                      \
        memcpy(lb + 2 * VN, &sb2, sizeof sb2);                                                  \
        memcpy(lb + 3 * VN, &sb3, sizeof sb3);                                                  \
        for (int64_t l = 0; i + l < n; l++) {                                                   \
            T d = w ? g[i + l] * w[i + l] : g[i + l], xh = (x[i + l] - mu) * rs;                \
            la[l] += d;                                                                         \
            lb[l] += d * xh;                                                                    \
        }                                                                                       \
    }                                                                                           \
    /* d x of nr <= 4 rows with their mu and rs */                                             \
    LN_INL void S##_ln_dx(const T *g, const T *x, const T *w, T *y, int64_t n, int nr,          \
                          const T *mu, const T *rs) {                                           \
        T la[4][L], lb[4][L];                                                                   \
        double da[4], db[4];                                                                    \
        for (int r = 0; r < nr; r++)                                                            \
            S##_ln_dlanes(g + r * n, x + r * n, w, n, mu[r], rs[r], la[r], lb[r]);              \
        S##_ln_fold_tree(la, nr, da);                                                           \
        S##_ln_fold_tree(lb, nr, db);                                                           \
        for (int r = 0; r < nr; r++) {                                                          \
            const T *gr = g + r * n, *xr = x + r * n;                                           \
            T *yr = y + r * n, m = mu[r], s = rs[r];                                            \
            T ma = (T)(da[r] / (double)n), mb = (T)(db[r] / (double)n);                         \
            if (w) {                                                                            \
                for (int64_t j = 0; j < n; j++)                                                 \
                    yr[j] = s * ((gr[j] * w[j] - ma) - ((xr[j] - m) * s) * mb);                 \
            } else {                                                                            \
                for (int64_t j = 0; j < n; j++) yr[j] = s * ((gr[j] - ma) - ((xr[j] - m) * s) * mb); \
            }                                                                                   \
        }                                                                                       \
    }

LN_DEF(f32, float, ln_v8f, 8, 32)
LN_DEF(f64, double, ln_v4d, 4, 16)

/* d x of an item's rows; the statistics from j->stats when another node of the run
 * computed them (the same bits), else here */
LN_CLONES static void ln_dx_item(void *arg, int64_t item) {
    const lnjob *j = arg;
    int64_t r0 = item * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows, n = j->len;
    for (int64_t r = r0; r < r1; r += 4) {
        int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        if (j->f64) {
            double mu[4], rs[4];
            const double *st = j->stats;
            if (st) memcpy(mu, st + r, sizeof(double) * (size_t)nr), memcpy(rs, st + j->rows + r, sizeof(double) * (size_t)nr);
            else f64_ln_stats((const double *)j->x + r * n, n, nr, j->eps, mu, rs);
            f64_ln_dx((const double *)j->g + r * n, (const double *)j->x + r * n, j->w,
                      (double *)j->y + r * n, n, nr, mu, rs);
        } else {
            float mu[4], rs[4];
            const float *st = j->stats;
            if (st) memcpy(mu, st + r, sizeof(float) * (size_t)nr), memcpy(rs, st + j->rows + r, sizeof(float) * (size_t)nr);
            else f32_ln_stats((const float *)j->x + r * n, n, nr, j->eps, mu, rs);
            f32_ln_dx((const float *)j->g + r * n, (const float *)j->x + r * n, j->w,
                      (float *)j->y + r * n, n, nr, mu, rs);
        }
    }
}

LN_CLONES static void ln_stats_item(void *arg, int64_t item) {
    const lnjob *j = arg;
    int64_t r0 = item * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows, n = j->len;
    for (int64_t r = r0; r < r1; r += 4) {
        int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        if (j->f64) {
            double *st = j->stats;
            f64_ln_stats((const double *)j->x + r * n, n, nr, j->eps, st + r, st + j->rows + r);
        } else {
            float *st = j->stats;
            f32_ln_stats((const float *)j->x + r * n, n, nr, j->eps, st + r, st + j->rows + r);
        }
    }
}

/* d weight for the columns of one item: acc (double, per column) over the rows in order */
#define LN_DW(T)                                                                                \
    do {                                                                                        \
        const T *g = j->g, *x = j->x, *st = j->stats;                                           \
        T *y = j->y;                                                                            \
        for (int64_t r = 0; r < j->rows; r++) {                                                 \
            const T *gr = g + r * n + c0, *xr = x + r * n + c0;                                 \
            T mu = st[r], rs = st[j->rows + r];                                                 \
            for (int64_t c = 0; c < w; c++) acc[c] += (double)(gr[c] * ((xr[c] - mu) * rs));   \
        }                                                                                       \
        for (int64_t c = 0; c < w; c++) y[c0 + c] = (T)acc[c];                                  \
    } while (0)

enum { LN_COLS = 256 };

LN_CLONES static void ln_dw_item(void *arg, int64_t item) {
    const lnjob *j = arg;
    int64_t n = j->len, c0 = item * LN_COLS, w = c0 + LN_COLS < n ? LN_COLS : n - c0;
    double acc[LN_COLS];
    for (int64_t c = 0; c < w; c++) acc[c] = 0;
    if (j->f64) LN_DW(double);
    else LN_DW(float);
}

/* The statistics (mu, rs of every row) of a layer norm's x are needed by its forward and
 * by both backward nodes (d x, d weight): the first of them to run in a run computes them
 * and keeps them on this thread for the others, in one goblin__tl_buf shared by up to
 * LNS_SLOTS layer norms of the run, keyed by the run (goblin__kctx.run), the id and the
 * buffer of x and the shapes. Within a run a node's value never changes, so the key
 * cannot match anything else; the forward's statistics are the bits the backward would
 * compute (ln_stats above), so using them changes no bit. When the buffer must grow, the
 * run's earlier entries are dropped (their nodes then compute their own, as without). */
#define LNS_SLOTS 8

typedef struct lns_entry {
    int32_t xid;
    bool f64, valid;
    const void *x;
    int64_t rows, len;
    double eps;
    size_t off;
} lns_entry;

typedef struct lns_table {
    uint64_t run;
    int n;
    size_t used;
    lns_entry e[LNS_SLOTS];
    goblin__tl_buf buf;
} lns_table;

static _Thread_local lns_table t_lns;

static void *lns_find(uint64_t run, int32_t xid, const void *x, int64_t rows, int64_t len,
                      double eps, bool f64) {
    lns_table *t = &t_lns;
    if (!run || t->run != run) return NULL;
    for (int i = 0; i < t->n; i++) {
        const lns_entry *e = &t->e[i];
        if (e->valid && e->xid == xid && e->x == x && e->rows == rows && e->len == len &&
            e->eps == eps && e->f64 == f64)
            return (char *)t->buf.p + e->off;
    }
    return NULL;
}

void *goblin__blis_ln_stats_add(uint64_t run, int32_t xid, const void *x, int64_t rows, int64_t len,
                                double eps, bool f64, int *slot) {
    lns_table *t = &t_lns;
    size_t bytes;
    *slot = -1;
    if (!run || xid < 0 || rows <= 0 ||
        !goblin__mul_size((size_t)rows, 2 * (f64 ? sizeof(double) : sizeof(float)), &bytes) ||
        bytes > ((size_t)16 << 20))
        return NULL;
    bytes = (bytes + 63) / 64 * 64;
    if (t->run != run) t->run = run, t->n = 0, t->used = 0;
    if (t->n == LNS_SLOTS) return NULL;
    if (t->used + bytes > t->buf.cap) { /* growing loses the contents: start over */
        t->run = 0, t->n = 0;
        if (!goblin__tl_buf_reserve(&t->buf, 2 * (t->used + bytes))) return NULL;
        t->run = run, t->used = 0;
    }
    lns_entry *e = &t->e[t->n];
    *e = (lns_entry){xid, f64, false, x, rows, len, eps, t->used};
    t->used += bytes;
    *slot = t->n++;
    return (char *)t->buf.p + e->off;
}

void goblin__blis_ln_stats_commit(int slot) {
    if (slot >= 0 && slot < t_lns.n) t_lns.e[slot].valid = true;
}

static goblin_err t3_ln_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    bool wgrad = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0) == 1;
    if (n_in < 2 || !f32_or_f64(out->dtype) || !all_contiguous(in, n_in, out))
        return g_prev_ln_bwd ? g_prev_ln_bwd(k, node, in, n_in, out) : GOBLIN_ENOTSUP;
    const goblin_tensor *x = &in[1];
    int64_t nd = goblin__attr_i(node, GOBLIN_ATTR_NORM_NDIM, 1);
    lnjob j = {.f64 = out->dtype == GOBLIN_DTYPE_F64, .g = in[0].data, .x = x->data,
               .w = !wgrad && n_in > 2 ? in[2].data : NULL, .y = out->data, .rows = 1, .len = 1,
               .eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5)};
    for (int32_t d = 0; d < x->rank; d++) {
        if (d >= x->rank - nd) j.len *= x->shape[d];
        else j.rows *= x->shape[d];
    }
    int32_t th = k->threads > 0 ? k->threads : 1;
    if (j.len == 0) return GOBLIN_OK;
    if (j.rows == 0) { /* no rows: d x is empty, d weight is zeros */
        if (wgrad) memset(out->data, 0, (size_t)j.len * goblin_dtype_size(out->dtype));
        return GOBLIN_OK;
    }
    j.per = BLOCK / j.len > 1 ? BLOCK / j.len : 1;
    int64_t items = (j.rows + j.per - 1) / j.per;
    bool fresh = false, own = false;
    int32_t xid = node->n_inputs > 1 ? node->inputs[1] : -1;
    int slot = -1;
    j.stats = lns_find(k->run, xid, j.x, j.rows, j.len, j.eps, j.f64);
    if (!j.stats) {
        j.stats = goblin__blis_ln_stats_add(k->run, xid, j.x, j.rows, j.len, j.eps, j.f64, &slot);
        fresh = true;
    }
    if (!j.stats && wgrad) { /* no memo: d weight needs its own buffer */
        j.stats = goblin__alloc((size_t)j.rows * 2 * goblin_dtype_size(out->dtype));
        if (!j.stats) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "layer_norm_backward: out of memory");
        own = fresh = true;
    }
    if (j.stats && fresh) {
        goblin__parallel_for(th, items, ln_stats_item, &j);
        goblin__blis_ln_stats_commit(slot);
    }
    if (wgrad) goblin__parallel_for(th, (j.len + LN_COLS - 1) / LN_COLS, ln_dw_item, &j);
    else goblin__parallel_for(th, items, ln_dx_item, &j);
    if (own) goblin__free(j.stats);
    return GOBLIN_OK;
}

void goblin__blis_register_train3(goblin__kernel_fn *t) {
    if (t[GOBLIN_OP_GELU_BACKWARD] != t3_gelu_bwd) {
        g_prev_gelu_bwd = t[GOBLIN_OP_GELU_BACKWARD];
        t[GOBLIN_OP_GELU_BACKWARD] = t3_gelu_bwd;
    }
    if (t[GOBLIN_OP_LAYER_NORM_BACKWARD] != t3_ln_bwd) {
        g_prev_ln_bwd = t[GOBLIN_OP_LAYER_NORM_BACKWARD];
        t[GOBLIN_OP_LAYER_NORM_BACKWARD] = t3_ln_bwd;
    }
    static const goblin_op ops[B_COUNT] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL,
                                           GOBLIN_OP_DIV};
    static goblin__kernel_fn const mine[B_COUNT] = {t3_add, t3_sub, t3_mul, t3_div};
    for (int w = 0; w < B_COUNT; w++) {
        if (t[ops[w]] == mine[w]) continue; /* registered twice: keep the first chain */
        g_prev_bin[w] = t[ops[w]];
        t[ops[w]] = mine[w];
    }
    if (t[GOBLIN_OP_EXP] != t3_exp) {
        g_prev_exp = t[GOBLIN_OP_EXP];
        t[GOBLIN_OP_EXP] = t3_exp;
    }
    if (t[GOBLIN_OP_ERF] != t3_erf) {
        g_prev_erf = t[GOBLIN_OP_ERF];
        t[GOBLIN_OP_ERF] = t3_erf;
    }
    if (t[GOBLIN_OP_SOFTMAX] != t3_softmax) {
        g_prev_softmax = t[GOBLIN_OP_SOFTMAX];
        t[GOBLIN_OP_SOFTMAX] = t3_softmax;
    }
    if (t[GOBLIN_OP_LOG_SOFTMAX] != t3_softmax) {
        g_prev_log_softmax = t[GOBLIN_OP_LOG_SOFTMAX];
        t[GOBLIN_OP_LOG_SOFTMAX] = t3_softmax;
    }
    if (t[GOBLIN_OP_GELU] != t3_gelu) {
        g_prev_gelu = t[GOBLIN_OP_GELU];
        t[GOBLIN_OP_GELU] = t3_gelu;
    }
}
