/* libgoblin/backends/blis/blis_broadcast.c - ADD, SUB, MUL and DIV on the CPU backend: the
 * contiguous fast path of blis_elementwise.c first, then rows over broadcast operands. */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <string.h>
#include "base/alloc.h"
#include "blis_impl.h"
#include "kernels/scalar_ops.h"
#include "kernels/expf.h"

#if defined(_OPENMP)
#define SIMD _Pragma("omp simd")
#define SIMD_OR_BAD _Pragma("omp simd reduction(| : bad)")
#else
#define SIMD
#define SIMD_OR_BAD
#endif

#define BLOCK ((int64_t)1 << 15) /* elements per work item (about) */

/* ---- broadcast binary ops ---------------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_COUNT };
/* The contiguous kernels of blis_elementwise.c, tried first (by name, not a saved pointer). */
static goblin__kernel_fn const g_contig[B_COUNT] = {goblin__blis_add, goblin__blis_sub, goblin__blis_mul,
                                                    goblin__blis_div};

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
    goblin_err e = g_contig[which](k, node, in, n_in, out);
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
BIN(blis_add, B_ADD)
BIN(blis_sub, B_SUB)
BIN(blis_mul, B_MUL)
BIN(blis_div, B_DIV)

void goblin__blis_register_broadcast(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_ADD, blis_add);
    goblin__blis_set(t, GOBLIN_OP_SUB, blis_sub);
    goblin__blis_set(t, GOBLIN_OP_MUL, blis_mul);
    goblin__blis_set(t, GOBLIN_OP_DIV, blis_div);
}
