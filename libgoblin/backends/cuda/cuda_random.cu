/* libgoblin/backends/cuda/cuda_random.cu - random and creation ops on the
 * device. Element i of a random op calls the very same random.h functions as
 * the reference backend (Philox4x32-10 on (seed, offset + i, op), then the
 * value mapping), in double, rounded once with the reference's store rules;
 * the backend is compiled with --fmad=false so no product is contracted into
 * an fma that the header did not ask for. A seed therefore gives the same
 * numbers on the CPU and the GPU (f64 bit for bit, per random.h's rules). */
#include "cuda_scalar.h"
#include "backends/kernel_attrs.h"

/* v rounded once to float dtype dt, as a double (ref_unary.c's round_dt). */
__host__ __device__ static double round_dt(goblin_dtype dt, double v) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return v;
    case GOBLIN_DTYPE_F32: return (float)v;
    case GOBLIN_DTYPE_F16: return goblin__f16_to_f32(goblin__f32_to_f16(goblin__f64_to_f32_odd(v)));
    default: return goblin__bf16_to_f32(goblin__f32_to_bf16(goblin__f64_to_f32_odd(v)));
    }
}

/* The next value of dtype dt below r (host; ref_unary.c's next_down). */
static double next_down(goblin_dtype dt, double r) {
    if (dt == GOBLIN_DTYPE_F64) return nextafter(r, -INFINITY);
    if (dt == GOBLIN_DTYPE_F32) return nextafterf((float)r, -INFINITY);
    bool half = dt == GOBLIN_DTYPE_F16;
    uint16_t h = half ? goblin__f32_to_f16((float)r) : goblin__f32_to_bf16((float)r);
    if ((h & 0x7fffu) == 0) h = 0x8001u;
    else if (h & 0x8000u) h++;
    else h--;
    return half ? goblin__f16_to_f32(h) : goblin__bf16_to_f32(h);
}

#define GRID_LOOP(i, n)                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);       \
         i += (int64_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void k_uniform(T *y, int64_t n, goblin__rng_key r, goblin_dtype dt, int bits, double lo,
                          double hi, double below) {
    GRID_LOOP(i, n) {
        uint32_t x[4];
        goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)i, x);
        double v = round_dt(dt, goblin__rng_uniform(x, bits, lo, hi));
        y[i] = gc_st_d<T>(v >= hi ? below : v);
    }
}

template <typename T>
__global__ void k_normal(T *y, int64_t n, goblin__rng_key r, bool wide, double mean, double std) {
    GRID_LOOP(i, n) {
        uint32_t x[4];
        goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)i, x);
        y[i] = gc_st_d<T>(goblin__rng_normal(x, wide, mean, std));
    }
}

/* probs == NULL: the constant p. */
template <typename P, typename T>
__global__ void k_bernoulli(const P *probs, T *y, int64_t n, goblin__rng_key r, double p) {
    GRID_LOOP(i, n) {
        uint32_t x[4];
        goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)i, x);
        double pi = probs ? gc_ld_f(probs[i]) : p;
        y[i] = gc_st_d<T>(goblin__rng_bernoulli(x, pi) ? 1.0 : 0.0);
    }
}

template <typename T>
__global__ void k_randint(T *y, int64_t n, goblin__rng_key r, int64_t lo, uint64_t span) {
    GRID_LOOP(i, n) {
        uint32_t x[4];
        goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)i, x);
        y[i] = gc_st_u64<T>((uint64_t)goblin__rng_randint(x, lo, span));
    }
}

template <typename T>
__global__ void k_dropout(const T *in, T *y, int64_t n, goblin__rng_key r, double p, double scale,
                          float scale32, bool wide, goblin__drop_axis ax) {
    GRID_LOOP(i, n) {
        uint32_t x[4];
        uint64_t at = ax.moved ? goblin__rng_axis_index((uint64_t)i, ax.len, ax.inner, ax.rest) : (uint64_t)i;
        goblin__rng_draw(r.seed, r.offset, r.stream, at, x);
        bool keep = goblin__rng_keep(x, p);
        double v = gc_ld_f(in[i]);
        if (wide) v = v * (keep ? scale : 0.0);
        else v = (double)((float)v * (keep ? scale32 : 0.0f));
        y[i] = gc_st_d<T>(v);
    }
}

static goblin_err bad(gc_call *c, const goblin__node *n, goblin_dtype dt) {
    return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: %s cannot produce %s",
                        goblin_op_name(n->op), goblin_dtype_name(dt));
}

static goblin_err k_rand_uniform(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    goblin_dtype dt = out->dtype;
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    double lo = goblin__attr_f(n, GOBLIN_ATTR_LOW, 0.0), hi = goblin__attr_f(n, GOBLIN_ATTR_HIGH, 1.0);
    double below = round_dt(dt, hi);
    while (below >= hi) below = next_down(dt, below);
    bool done = false;
    GC_DISPATCH_FLOAT(dt, (k_uniform<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0, c->stream>>>(
                               (T *)out->data, cnt, goblin__rng_of(n), dt, goblin__rng_bits(dt), lo, hi,
                               below),
                           done = true));
    if (!done) return bad(c, n, dt);
    GC_LAUNCHED(c, "rand_uniform");
    return GOBLIN_OK;
}

static goblin_err k_rand_normal(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    goblin_dtype dt = out->dtype;
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    double mean = goblin__attr_f(n, GOBLIN_ATTR_MEAN, 0.0), std = goblin__attr_f(n, GOBLIN_ATTR_STD, 1.0);
    bool done = false;
    GC_DISPATCH_FLOAT(dt, (k_normal<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0, c->stream>>>(
                               (T *)out->data, cnt, goblin__rng_of(n), dt == GOBLIN_DTYPE_F64, mean, std),
                           done = true));
    if (!done) return bad(c, n, dt);
    GC_LAUNCHED(c, "rand_normal");
    return GOBLIN_OK;
}

template <typename P>
static void bernoulli_into(gc_call *c, const P *probs, goblin_tensor *out, int64_t cnt, goblin__rng_key r,
                           double p) {
    GC_DISPATCH_ALL(out->dtype, (k_bernoulli<P, T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0,
                                                     c->stream>>>(probs, (T *)out->data, cnt, r,
                                                                  p)));
}

static goblin_err k_bernoulli_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    goblin__rng_key r = goblin__rng_of(n);
    if (n_in == 1) {
        GC_DISPATCH_FLOAT(in[0].dtype, bernoulli_into<T>(c, (const T *)in[0].data, out, cnt, r, 0));
    } else {
        bernoulli_into<float>(c, (const float *)NULL, out, cnt, r,
                              goblin__attr_f(n, GOBLIN_ATTR_P, 0.5));
    }
    GC_LAUNCHED(c, "bernoulli");
    return GOBLIN_OK;
}

static goblin_err k_randint_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    int64_t lo = (int64_t)goblin__attr_f(n, GOBLIN_ATTR_LOW, 0.0);
    int64_t hi = (int64_t)goblin__attr_f(n, GOBLIN_ATTR_HIGH, 1.0);
    uint64_t span = (uint64_t)hi - (uint64_t)lo;
    bool done = false;
    GC_DISPATCH_NUMERIC(out->dtype, (k_randint<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0,
                                                    c->stream>>>((T *)out->data, cnt, goblin__rng_of(n),
                                                                 lo, span),
                                     done = true));
    if (!done) return bad(c, n, out->dtype);
    GC_LAUNCHED(c, "randint");
    return GOBLIN_OK;
}

static goblin_err k_dropout_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    double p = goblin__attr_f(n, GOBLIN_ATTR_P, 0.5);
    double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    bool done = false;
    GC_DISPATCH_FLOAT(out->dtype, (k_dropout<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0,
                                                  c->stream>>>(
                                       (const T *)in[0].data, (T *)out->data, cnt, goblin__rng_of(n), p,
                                       scale, (float)scale, out->dtype == GOBLIN_DTYPE_F64,
                                       goblin__drop_axis_of(n, out->rank, out->shape)),
                                   done = true));
    if (!done) return bad(c, n, out->dtype);
    GC_LAUNCHED(c, "dropout");
    return GOBLIN_OK;
}

/* ---- creation ---------------------------------------------------------------------- */

template <typename T> __global__ void k_full(T *y, int64_t n, double v) {
    GRID_LOOP(i, n) y[i] = gc_st_d<T>(v);
}

static goblin_err k_full_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    double v = goblin__attr_f(n, GOBLIN_ATTR_VALUE, 0.0);
    GC_DISPATCH_ALL(out->dtype, (k_full<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0,
                                             c->stream>>>((T *)out->data, cnt, v)));
    GC_LAUNCHED(c, "full");
    return GOBLIN_OK;
}

/* Floats: one rounding of fma(step, i, start); integers: exact start + i*step
 * (inference checked that every value fits). */
template <typename T>
__global__ void k_arange(T *y, int64_t n, double start, double step, int64_t s0, int64_t st) {
    GRID_LOOP(i, n) {
        if constexpr (gc_ty<T>::is_float) y[i] = gc_st_d<T>(fma(step, (double)i, start));
        else y[i] = gc_st_u64<T>((uint64_t)s0 + (uint64_t)i * (uint64_t)st);
    }
}

static goblin_err k_arange_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    double start = goblin__attr_f(n, GOBLIN_ATTR_START, 0.0);
    double step = goblin__attr_f(n, GOBLIN_ATTR_STEP, 1.0);
    int64_t s0 = 0, st = 0;
    if (!gc_is_float(out->dtype)) {
        s0 = (int64_t)start;
        st = (int64_t)step;
    }
    bool done = false;
    GC_DISPATCH_NUMERIC(out->dtype, (k_arange<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0,
                                                   c->stream>>>((T *)out->data, cnt, start, step,
                                                                s0, st),
                                     done = true));
    if (!done) return bad(c, n, out->dtype);
    GC_LAUNCHED(c, "arange");
    return GOBLIN_OK;
}

void gc_register_random(gc_entry *t) {
    t[GOBLIN_OP_RAND_UNIFORM].fn = k_rand_uniform;
    t[GOBLIN_OP_RAND_NORMAL].fn = k_rand_normal;
    t[GOBLIN_OP_BERNOULLI].fn = k_bernoulli_op;
    t[GOBLIN_OP_RANDINT].fn = k_randint_op;
    t[GOBLIN_OP_DROPOUT].fn = k_dropout_op;
    t[GOBLIN_OP_FULL].fn = k_full_op;
    t[GOBLIN_OP_ARANGE].fn = k_arange_op;
}
