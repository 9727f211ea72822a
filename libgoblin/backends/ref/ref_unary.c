/* libgoblin/backends/ref/ref_unary.c - reference kernels: unary math, cast,
 * activations, random ops, creation ops.
 *
 * Every kernel walks its output in blocks: gather a block of the (possibly
 * strided) input into a local array of double (float dtypes: exact) or of
 * uint64 (integer dtypes: two's-complement bits, so wraparound is defined),
 * compute on the block in a tight loop, then store the block with cast's
 * conversion rules. Float math runs in double for every float dtype and is
 * rounded once on store: that makes the oracle within ~u of exact for f32,
 * f16 and bf16 (f64 gets libm's accuracy). The rules the doc strings of
 * ops_unary.c promise are implemented here and in random.h. */
#include "backends/kernel_attrs.h"
#include "backends/kernel_util.h"
#include "kernels/random.h"

#define BLK 256

/* ---- strided source ---------------------------------------------------------- */

typedef struct src {
    const goblin_tensor *t;
    bool contig;
    goblin__nditer it; /* positioned at the next element when !contig */
} src;

static void src_init(src *s, const goblin_tensor *t) {
    s->t = t;
    s->contig = goblin_tensor_is_contiguous(t);
    if (!s->contig) {
        int64_t st[4][GOBLIN_MAX_RANK];
        for (int32_t d = 0; d < t->rank; d++) st[0][d] = t->strides[d];
        goblin__nditer_init(&s->it, t->rank, t->shape, 1, st);
    }
}

/* Elements [start, start + n) of a float tensor, exactly, as double. */
static void gather_f64(src *s, int64_t start, int64_t n, double *buf) {
    const goblin_tensor *t = s->t;
    if (!s->contig) {
        for (int64_t j = 0; j < n; j++) {
            buf[j] = goblin__load_f64(t->dtype, t->data, s->it.off[0]);
            goblin__nditer_next(&s->it);
        }
        return;
    }
    switch (t->dtype) {
    case GOBLIN_DTYPE_F32: {
        const float *p = (const float *)t->data + start;
        for (int64_t j = 0; j < n; j++) buf[j] = p[j];
        break;
    }
    case GOBLIN_DTYPE_F64: memcpy(buf, (const double *)t->data + start, (size_t)n * 8); break;
    case GOBLIN_DTYPE_F16: {
        const uint16_t *p = (const uint16_t *)t->data + start;
        for (int64_t j = 0; j < n; j++) buf[j] = goblin__f16_to_f32(p[j]);
        break;
    }
    case GOBLIN_DTYPE_BF16: {
        const uint16_t *p = (const uint16_t *)t->data + start;
        for (int64_t j = 0; j < n; j++) buf[j] = goblin__bf16_to_f32(p[j]);
        break;
    }
    default:
        for (int64_t j = 0; j < n; j++) buf[j] = goblin__load_f64(t->dtype, t->data, start + j);
        break;
    }
}

/* Elements of an integer or bool tensor, sign-extended to 64-bit patterns. */
static uint64_t load_u64(goblin_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
    case GOBLIN_DTYPE_I16: return (uint64_t)(int64_t)((const int16_t *)p)[i];
    case GOBLIN_DTYPE_I32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
    case GOBLIN_DTYPE_I64: return (uint64_t)((const int64_t *)p)[i];
    case GOBLIN_DTYPE_U8: return ((const uint8_t *)p)[i];
    case GOBLIN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

static void gather_u64(src *s, int64_t start, int64_t n, uint64_t *buf) {
    const goblin_tensor *t = s->t;
    if (!s->contig) {
        for (int64_t j = 0; j < n; j++) {
            buf[j] = load_u64(t->dtype, t->data, s->it.off[0]);
            goblin__nditer_next(&s->it);
        }
        return;
    }
    switch (t->dtype) {
    case GOBLIN_DTYPE_I32: {
        const int32_t *p = (const int32_t *)t->data + start;
        for (int64_t j = 0; j < n; j++) buf[j] = (uint64_t)(int64_t)p[j];
        break;
    }
    case GOBLIN_DTYPE_I64: memcpy(buf, (const int64_t *)t->data + start, (size_t)n * 8); break;
    default:
        for (int64_t j = 0; j < n; j++) buf[j] = load_u64(t->dtype, t->data, start + j);
        break;
    }
}

/* ---- stores with cast's rules ------------------------------------------------- */

static int64_t u64_as_i64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* float -> integer: truncate toward zero; NaN -> 0; saturate to [lo, hi]. */
static uint64_t sat_int(double d, goblin_dtype dt) {
    if (d != d) return 0;
    double t = trunc(d);
    switch (dt) {
    case GOBLIN_DTYPE_I8: return (uint64_t)(int64_t)(t > 127 ? 127 : t < -128 ? -128 : t);
    case GOBLIN_DTYPE_I16:
        return (uint64_t)(int64_t)(t > 32767 ? 32767 : t < -32768 ? -32768 : t);
    case GOBLIN_DTYPE_I32:
        return (uint64_t)(int64_t)(t > 2147483647.0 ? 2147483647.0
                                   : t < -2147483648.0 ? -2147483648.0
                                                       : t);
    case GOBLIN_DTYPE_U8: return (uint64_t)(t > 255 ? 255 : t < 0 ? 0 : t);
    default: /* i64: the limits 2^63 and -2^63 are exact doubles */
        if (t >= 0x1p63) return (uint64_t)INT64_MAX;
        if (t < -0x1p63) return (uint64_t)INT64_MIN;
        return (uint64_t)(int64_t)t;
    }
}

/* double -> f16/bf16, one correct rounding (round to odd in f32, then nearest even). */
static uint16_t to_f16(double v) { return goblin__f32_to_f16(goblin__f64_to_f32_odd(v)); }
static uint16_t to_bf16(double v) { return goblin__f32_to_bf16(goblin__f64_to_f32_odd(v)); }

/* Integer bits into the integer types: truncation modulo 2^bits. */
static void store_int_bits(goblin_dtype dt, void *p, int64_t i, uint64_t u) {
    switch (dt) {
    case GOBLIN_DTYPE_I8:
    case GOBLIN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
    case GOBLIN_DTYPE_I16: ((uint16_t *)p)[i] = (uint16_t)u; break;
    case GOBLIN_DTYPE_I32: ((uint32_t *)p)[i] = (uint32_t)u; break;
    case GOBLIN_DTYPE_I64: ((uint64_t *)p)[i] = u; break;
    case GOBLIN_DTYPE_BOOL: ((uint8_t *)p)[i] = u != 0; break;
    default: break;
    }
}

/* Store doubles into out elements [start, start + n) of dtype dt. */
static void store_f64(goblin_dtype dt, void *out, int64_t start, int64_t n, const double *buf) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: memcpy((double *)out + start, buf, (size_t)n * 8); break;
    case GOBLIN_DTYPE_F32: {
        float *p = (float *)out + start;
        for (int64_t j = 0; j < n; j++) p[j] = (float)buf[j];
        break;
    }
    case GOBLIN_DTYPE_F16: {
        uint16_t *p = (uint16_t *)out + start;
        for (int64_t j = 0; j < n; j++) p[j] = to_f16(buf[j]);
        break;
    }
    case GOBLIN_DTYPE_BF16: {
        uint16_t *p = (uint16_t *)out + start;
        for (int64_t j = 0; j < n; j++) p[j] = to_bf16(buf[j]);
        break;
    }
    case GOBLIN_DTYPE_BOOL: {
        uint8_t *p = (uint8_t *)out + start;
        for (int64_t j = 0; j < n; j++) p[j] = buf[j] != 0; /* NaN != 0: true */
        break;
    }
    default:
        for (int64_t j = 0; j < n; j++) store_int_bits(dt, out, start + j, sat_int(buf[j], dt));
        break;
    }
}

/* Store 64-bit integer patterns (signed values) into out elements of dtype dt. */
static void store_u64(goblin_dtype dt, void *out, int64_t start, int64_t n, const uint64_t *buf) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: {
        double *p = (double *)out + start;
        for (int64_t j = 0; j < n; j++) p[j] = (double)u64_as_i64(buf[j]);
        break;
    }
    case GOBLIN_DTYPE_F32: {
        float *p = (float *)out + start;
        for (int64_t j = 0; j < n; j++) p[j] = (float)u64_as_i64(buf[j]);
        break;
    }
    case GOBLIN_DTYPE_F16: {
        uint16_t *p = (uint16_t *)out + start;
        for (int64_t j = 0; j < n; j++)
            p[j] = goblin__f32_to_f16(goblin__i64_to_f32_odd(u64_as_i64(buf[j])));
        break;
    }
    case GOBLIN_DTYPE_BF16: {
        uint16_t *p = (uint16_t *)out + start;
        for (int64_t j = 0; j < n; j++)
            p[j] = goblin__f32_to_bf16(goblin__i64_to_f32_odd(u64_as_i64(buf[j])));
        break;
    }
    case GOBLIN_DTYPE_I64: memcpy((uint64_t *)out + start, buf, (size_t)n * 8); break;
    default:
        for (int64_t j = 0; j < n; j++) store_int_bits(dt, out, start + j, buf[j]);
        break;
    }
}

/* ---- scalar math (double) -------------------------------------------------------- */

static inline double f_sign(double x) {
    return x > 0 ? 1.0 : x < 0 ? -1.0 : x != x ? x : 0.0;
}

/* 0.5 x (1 + erf(x / sqrt2)) without the cancellation of 1 + erf for x < 0 */
static inline double f_gelu_erf(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752440); }

/* 0.5 x (1 + tanh(a)) = x / (1 + exp(-2a)), a = sqrt(2/pi) (x + 0.044715 x^3) */
static inline double f_gelu_tanh(double x) {
    double a = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * a));
}

#define MAP(expr)                                               \
    for (int64_t j = 0; j < n; j++) {                           \
        double x = b[j];                                        \
        b[j] = (expr);                                          \
    }                                                           \
    return true

/* Apply a float op to a block in place; false if @p op is not one of them. */
static bool apply_f(goblin_op op, int64_t approx, double *b, int64_t n) {
    switch (op) {
    case GOBLIN_OP_NEG: MAP(-x);
    case GOBLIN_OP_ABS: MAP(fabs(x));
    case GOBLIN_OP_SIGN: MAP(f_sign(x));
    case GOBLIN_OP_EXP: MAP(exp(x));
    case GOBLIN_OP_LOG: MAP(log(x));
    case GOBLIN_OP_SQRT: MAP(sqrt(x));
    case GOBLIN_OP_RSQRT: MAP(1.0 / sqrt(x));
    case GOBLIN_OP_RECIPROCAL: MAP(1.0 / x);
    case GOBLIN_OP_SIN: MAP(sin(x));
    case GOBLIN_OP_COS: MAP(cos(x));
    case GOBLIN_OP_TANH: MAP(tanh(x));
    case GOBLIN_OP_ERF: MAP(erf(x));
    case GOBLIN_OP_FLOOR: MAP(floor(x));
    case GOBLIN_OP_CEIL: MAP(ceil(x));
    case GOBLIN_OP_ROUND: MAP(nearbyint(x)); /* default rounding mode: halves to even */
    case GOBLIN_OP_TRUNC: MAP(trunc(x));
    case GOBLIN_OP_LOG1P: MAP(log1p(x));
    case GOBLIN_OP_EXPM1: MAP(expm1(x));
    case GOBLIN_OP_SQUARE: MAP(x * x);
    case GOBLIN_OP_RELU: MAP(x < 0 ? 0.0 : x);
    case GOBLIN_OP_GELU:
        if (approx == GOBLIN_GELU_TANH) {
            MAP(f_gelu_tanh(x));
        }
        MAP(f_gelu_erf(x));
    case GOBLIN_OP_SILU: MAP(x / (1.0 + exp(-x)));
    case GOBLIN_OP_SIGMOID: MAP(1.0 / (1.0 + exp(-x)));
    default: return false;
    }
}
#undef MAP

#define MAPI(expr)                                              \
    for (int64_t j = 0; j < n; j++) {                           \
        uint64_t x = b[j];                                      \
        b[j] = (expr);                                          \
    }                                                           \
    return true

/* Integer ops on 64-bit patterns; the store truncates, so the results wrap modulo
 * 2^bits of the dtype (u8 values arrive zero-extended, never "negative"). */
static bool apply_i(goblin_op op, uint64_t *b, int64_t n) {
    switch (op) {
    case GOBLIN_OP_NEG: MAPI(0u - x);
    case GOBLIN_OP_ABS: MAPI((x >> 63) ? 0u - x : x);
    case GOBLIN_OP_SIGN: MAPI(x == 0 ? 0u : (x >> 63) ? ~(uint64_t)0 : 1u);
    case GOBLIN_OP_SQUARE: MAPI(x * x);
    case GOBLIN_OP_RELU: MAPI((x >> 63) ? 0u : x);
    case GOBLIN_OP_FLOOR:
    case GOBLIN_OP_CEIL:
    case GOBLIN_OP_ROUND:
    case GOBLIN_OP_TRUNC: return true;
    default: return false;
    }
}
#undef MAPI

/* ---- unary math, activations, cast ---------------------------------------------- */

static goblin_err k_unary(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    src s;
    src_init(&s, &in[0]);
    int64_t n = goblin__numel(out);
    bool fl = goblin_dtype_is_float(in[0].dtype);
    int64_t approx = goblin__attr_i(node, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF);
    double fb[BLK];
    uint64_t ib[BLK];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        if (fl) {
            gather_f64(&s, b, m, fb);
            if (!apply_f(node->op, approx, fb, m)) goto bad;
            store_f64(out->dtype, out->data, b, m, fb);
        } else {
            gather_u64(&s, b, m, ib);
            if (!apply_i(node->op, ib, m)) goto bad;
            store_u64(out->dtype, out->data, b, m, ib);
        }
    }
    return GOBLIN_OK;
bad:
    return goblin__errf(k->msg, k->cap, GOBLIN_EDTYPE, "%s has no reference kernel for dtype %s",
                        goblin_op_name(node->op), goblin_dtype_name(in[0].dtype));
}

static goblin_err k_cast(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    (void)k; (void)node; (void)n_in;
    src s;
    src_init(&s, &in[0]);
    int64_t n = goblin__numel(out);
    bool fl = goblin_dtype_is_float(in[0].dtype);
    double fb[BLK];
    uint64_t ib[BLK];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        if (fl) {
            gather_f64(&s, b, m, fb);
            store_f64(out->dtype, out->data, b, m, fb);
        } else {
            gather_u64(&s, b, m, ib);
            store_u64(out->dtype, out->data, b, m, ib);
        }
    }
    return GOBLIN_OK;
}

/* ---- random ------------------------------------------------------------------------ */

/* v rounded to float dtype dt (round to nearest even, once), as a double. */
static double round_dt(goblin_dtype dt, double v) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return v;
    case GOBLIN_DTYPE_F32: return (float)v;
    case GOBLIN_DTYPE_F16: return goblin__f16_to_f32(to_f16(v));
    default: return goblin__bf16_to_f32(to_bf16(v));
    }
}

/* The next value of float dtype dt below r (r representable in dt, not -inf or NaN). */
static double next_down(goblin_dtype dt, double r) {
    if (dt == GOBLIN_DTYPE_F64) return nextafter(r, -INFINITY);
    if (dt == GOBLIN_DTYPE_F32) return nextafterf((float)r, -INFINITY);
    bool half = dt == GOBLIN_DTYPE_F16;
    uint16_t h = half ? goblin__f32_to_f16((float)r) : goblin__f32_to_bf16((float)r);
    if ((h & 0x7fffu) == 0) h = 0x8001u; /* +-0 -> the negative smallest subnormal */
    else if (h & 0x8000u) h++;
    else h--;
    return half ? goblin__f16_to_f32(h) : goblin__bf16_to_f32(h);
}

static goblin_err k_rand_uniform(goblin__kctx *k, const goblin__node *node,
                                 const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    (void)k; (void)in; (void)n_in;
    goblin__rng_key r = goblin__rng_of(node);
    goblin_dtype dt = out->dtype;
    double lo = goblin__attr_f(node, GOBLIN_ATTR_LOW, 0.0);
    double hi = goblin__attr_f(node, GOBLIN_ATTR_HIGH, 1.0);
    int bits = goblin__rng_bits(dt);
    /* the largest value of dt below hi: where results that round up to hi go */
    double below = round_dt(dt, hi);
    while (below >= hi) below = next_down(dt, below);
    int64_t n = goblin__numel(out);
    double fb[BLK];
    uint32_t x[4];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        for (int64_t j = 0; j < m; j++) {
            goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)(b + j), x);
            double v = round_dt(dt, goblin__rng_uniform(x, bits, lo, hi));
            fb[j] = v >= hi ? below : v;
        }
        store_f64(dt, out->data, b, m, fb);
    }
    return GOBLIN_OK;
}

static goblin_err k_rand_normal(goblin__kctx *k, const goblin__node *node,
                                const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    (void)k; (void)in; (void)n_in;
    goblin__rng_key r = goblin__rng_of(node);
    double mean = goblin__attr_f(node, GOBLIN_ATTR_MEAN, 0.0);
    double std = goblin__attr_f(node, GOBLIN_ATTR_STD, 1.0);
    bool wide = out->dtype == GOBLIN_DTYPE_F64;
    int64_t n = goblin__numel(out);
    double fb[BLK];
    uint32_t x[4];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        for (int64_t j = 0; j < m; j++) {
            goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)(b + j), x);
            fb[j] = goblin__rng_normal(x, wide, mean, std);
        }
        store_f64(out->dtype, out->data, b, m, fb);
    }
    return GOBLIN_OK;
}

static goblin_err k_bernoulli(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    (void)k;
    goblin__rng_key r = goblin__rng_of(node);
    int64_t n = goblin__numel(out);
    double p = goblin__attr_f(node, GOBLIN_ATTR_P, 0.5);
    src s;
    if (n_in == 1) src_init(&s, &in[0]);
    double fb[BLK];
    uint32_t x[4];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        if (n_in == 1) gather_f64(&s, b, m, fb); /* the probabilities */
        for (int64_t j = 0; j < m; j++) {
            goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)(b + j), x);
            fb[j] = goblin__rng_bernoulli(x, n_in == 1 ? fb[j] : p) ? 1.0 : 0.0;
        }
        store_f64(out->dtype, out->data, b, m, fb);
    }
    return GOBLIN_OK;
}

static goblin_err k_randint(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    (void)k; (void)in; (void)n_in;
    goblin__rng_key r = goblin__rng_of(node);
    /* inference checked: integers with |.| <= 2^53 + 1, low < high */
    int64_t lo = (int64_t)goblin__attr_f(node, GOBLIN_ATTR_LOW, 0.0);
    int64_t hi = (int64_t)goblin__attr_f(node, GOBLIN_ATTR_HIGH, 1.0);
    uint64_t span = (uint64_t)hi - (uint64_t)lo;
    int64_t n = goblin__numel(out);
    uint64_t ib[BLK];
    uint32_t x[4];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        for (int64_t j = 0; j < m; j++) {
            goblin__rng_draw(r.seed, r.offset, r.stream, (uint64_t)(b + j), x);
            ib[j] = (uint64_t)goblin__rng_randint(x, lo, span);
        }
        store_u64(out->dtype, out->data, b, m, ib);
    }
    return GOBLIN_OK;
}

static goblin_err k_dropout(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    (void)k; (void)n_in;
    goblin__rng_key r = goblin__rng_of(node);
    goblin__drop_axis da = goblin__drop_axis_of(node, out->rank, out->shape);
    double p = goblin__attr_f(node, GOBLIN_ATTR_P, 0.5);
    double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0; /* p = 1 keeps nothing */
    float scale32 = (float)scale;
    bool wide = out->dtype == GOBLIN_DTYPE_F64;
    src s;
    src_init(&s, &in[0]);
    int64_t n = goblin__numel(out);
    double fb[BLK];
    uint32_t x[4];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        gather_f64(&s, b, m, fb);
        for (int64_t j = 0; j < m; j++) {
            goblin__rng_draw(r.seed, r.offset, r.stream, goblin__drop_index(&da, (uint64_t)(b + j)), x);
            bool keep = goblin__rng_keep(x, p);
            if (wide) fb[j] = fb[j] * (keep ? scale : 0.0);
            else fb[j] = (double)((float)fb[j] * (keep ? scale32 : 0.0f));
        }
        store_f64(out->dtype, out->data, b, m, fb);
    }
    return GOBLIN_OK;
}

/* ---- creation ------------------------------------------------------------------------ */

static goblin_err k_full(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    (void)k; (void)in; (void)n_in;
    double v = goblin__attr_f(node, GOBLIN_ATTR_VALUE, 0.0);
    int64_t n = goblin__numel(out);
    double fb[BLK];
    for (int64_t j = 0; j < BLK; j++) fb[j] = v;
    for (int64_t b = 0; b < n; b += BLK)
        store_f64(out->dtype, out->data, b, n - b < BLK ? n - b : BLK, fb);
    return GOBLIN_OK;
}

static goblin_err k_arange(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    (void)k; (void)in; (void)n_in;
    double start = goblin__attr_f(node, GOBLIN_ATTR_START, 0.0);
    double step = goblin__attr_f(node, GOBLIN_ATTR_STEP, 1.0);
    bool fl = goblin_dtype_is_float(out->dtype);
    int64_t n = goblin__numel(out);
    double fb[BLK];
    uint64_t ib[BLK];
    for (int64_t b = 0; b < n; b += BLK) {
        int64_t m = n - b < BLK ? n - b : BLK;
        if (fl) {
            /* one rounding of the exact start + i*step (i < 2^46 is exact in double) */
            for (int64_t j = 0; j < m; j++) fb[j] = fma(step, (double)(b + j), start);
            store_f64(out->dtype, out->data, b, m, fb);
        } else {
            /* inference checked that every value fits the dtype: no overflow here */
            int64_t s0 = (int64_t)start, st = (int64_t)step;
            for (int64_t j = 0; j < m; j++) ib[j] = (uint64_t)(s0 + (b + j) * st);
            store_u64(out->dtype, out->data, b, m, ib);
        }
    }
    return GOBLIN_OK;
}

void goblin__ref_register_unary(goblin__kernel_fn *t) {
    static const goblin_op unary[] = {
        GOBLIN_OP_NEG,   GOBLIN_OP_ABS,   GOBLIN_OP_SIGN,  GOBLIN_OP_EXP,        GOBLIN_OP_LOG,
        GOBLIN_OP_SQRT,  GOBLIN_OP_RSQRT, GOBLIN_OP_RECIPROCAL, GOBLIN_OP_SIN,   GOBLIN_OP_COS,
        GOBLIN_OP_TANH,  GOBLIN_OP_ERF,   GOBLIN_OP_FLOOR, GOBLIN_OP_CEIL,       GOBLIN_OP_ROUND,
        GOBLIN_OP_TRUNC, GOBLIN_OP_LOG1P, GOBLIN_OP_EXPM1, GOBLIN_OP_SQUARE,     GOBLIN_OP_RELU,
        GOBLIN_OP_GELU,  GOBLIN_OP_SILU,  GOBLIN_OP_SIGMOID};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) t[unary[i]] = k_unary;
    t[GOBLIN_OP_CAST] = k_cast;
    t[GOBLIN_OP_RAND_UNIFORM] = k_rand_uniform;
    t[GOBLIN_OP_RAND_NORMAL] = k_rand_normal;
    t[GOBLIN_OP_BERNOULLI] = k_bernoulli;
    t[GOBLIN_OP_RANDINT] = k_randint;
    t[GOBLIN_OP_DROPOUT] = k_dropout;
    t[GOBLIN_OP_FULL] = k_full;
    t[GOBLIN_OP_ARANGE] = k_arange;
}
