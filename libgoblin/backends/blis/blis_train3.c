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
 *  - softmax / log_softmax over a non-last axis (f32, f64): the reference's double
 *    arithmetic in its order, with contiguous inner loops: bit-identical.
 *
 * Every other case goes on to the kernel that held the table slot before
 * (registered after blis_threaded.c), so nothing loses its earlier fast path.
 * Work is split into fixed blocks; elementwise results never depend on the split,
 * so they are the same bits for every thread count. */
#include <string.h>
#include "blis_impl.h"
#include "scalar_ops.h"
#include "expf_impl.h"

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

static inline __attribute__((always_inline)) float t3_erf_poly(float x) {
    float a = fabsf(x), t = x * x, u2 = a - 1.875f, u3 = a - 3.0f;
    /* straight-line Horner (a loop here would keep the caller's loop from vectorizing) */
#define T3_H(v, c, k) fmaf((v), (k), (c))
    const float *c1 = T3_ERF_P1, *c2 = T3_ERF_P2, *c3 = T3_ERF_P3;
    float p1 = T3_H(t, c1[6], c1[7]);
    p1 = T3_H(t, c1[5], p1), p1 = T3_H(t, c1[4], p1), p1 = T3_H(t, c1[3], p1);
    p1 = T3_H(t, c1[2], p1), p1 = T3_H(t, c1[1], p1), p1 = T3_H(t, c1[0], p1);
    float p2 = T3_H(u2, c2[9], c2[10]);
    p2 = T3_H(u2, c2[8], p2), p2 = T3_H(u2, c2[7], p2), p2 = T3_H(u2, c2[6], p2);
    p2 = T3_H(u2, c2[5], p2), p2 = T3_H(u2, c2[4], p2), p2 = T3_H(u2, c2[3], p2);
    p2 = T3_H(u2, c2[2], p2), p2 = T3_H(u2, c2[1], p2), p2 = T3_H(u2, c2[0], p2);
    float p3 = T3_H(u3, c3[8], c3[9]);
    p3 = T3_H(u3, c3[7], p3), p3 = T3_H(u3, c3[6], p3), p3 = T3_H(u3, c3[5], p3);
    p3 = T3_H(u3, c3[4], p3), p3 = T3_H(u3, c3[3], p3), p3 = T3_H(u3, c3[2], p3);
    p3 = T3_H(u3, c3[1], p3), p3 = T3_H(u3, c3[0], p3);
#undef T3_H
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

/* n elements of erf (gelu = false) or gelu (erf form) on f32 */
T3_CLONES static void erf_gelu_f32(const float *restrict x, float *restrict y, int64_t n,
                                   bool gelu) {
    if (gelu) {
        SIMD for (int64_t i = 0; i < n; i++) {
            float t = x[i] * T3_RSQRT2F;
            y[i] = 0.5f * x[i] * (1.0f + t3_erf_poly(t));
        }
    } else {
        SIMD for (int64_t i = 0; i < n; i++) y[i] = t3_erf_poly(x[i]);
    }
    /* the tails (and inf, NaN: the comparisons fail) in double; a vector test per 64 first */
    const float lo = gelu ? -1.5f : -2.5f, hi = gelu ? 3.5f : 2.5f;
    const float sc = gelu ? T3_RSQRT2F : 1.0f;
    for (int64_t i0 = 0; i0 < n; i0 += 64) {
        int64_t e = i0 + 64 < n ? i0 + 64 : n;
        int bad = 0;
        T3_SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) {
            float t = x[i] * sc;
            bad |= (t <= lo) | (t >= hi) | (t != t); /* no branches: it vectorizes */
        }
        if (__builtin_expect(!bad, 1)) continue;
        for (int64_t i = i0; i < e; i++) {
            float t = x[i] * sc;
            if (!((t <= lo) | (t >= hi) | (t != t))) continue;
            double v = x[i];
            y[i] = gelu ? (float)(0.5 * v * (1.0 + erf_d(v * 0.70710678118654752440)))
                        : (float)erf_d(v);
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
 * The reference's arithmetic in its order (double; max with NaN sticking, then the sum of
 * exp(x - max) in axis order, then log or division), run for all positions of the trailing
 * dims together so the inner loops are contiguous: the same bits. Last-axis cases go on
 * to blis_reduce.c's kernel. */

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

static void smrun(void *arg, int64_t a) {
    smjob *j = arg;
    int64_t L = j->L;
    double *m = j->work + a * 2 * L, *s = m + L;
    if (j->f64) SM_BODY(double);
    else SM_BODY(float);
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
    j.work = goblin__alloc((size_t)A * (size_t)L * 2 * sizeof(double));
    if (!j.work) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "softmax: out of memory");
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, A, smrun, &j);
    goblin__free(j.work);
    return GOBLIN_OK;
}

void goblin__blis_register_train3(goblin__kernel_fn *t) {
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
