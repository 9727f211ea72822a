/* libgoblin/core/optim.c - SGD, AdamW, gradient clipping and LR schedules.
 *
 * Each update follows torch.optim's single-tensor code line by line, because
 * the node's replicas and a PyTorch run must agree: a tensor op with a Python
 * scalar rounds the scalar to the tensor's dtype first and then computes in that
 * dtype (T below), so that is what these loops do. torch's vectorized CPU
 * kernels evaluate add(alpha=), addcmul and lerp with a fused multiply-add
 * (checked against torch 2.13 CPU), so those use FMA here too; mul, addcdiv and
 * sqrt / divide / add round every operation. */
/* No a * b + c is fused unless written fma: the x86-64-v3 clones below must give the
 * baseline clone's bits (gnu11 would otherwise contract wherever FMA is available). Set
 * for the whole file, so that every function has the same options. */
#pragma GCC optimize("fp-contract=off")
#include <goblin/optim.h>
#include <math.h>
#include <string.h>
#include "base/names.h"
#include "base/target_clones.h"

void goblin_sgd_params_default(goblin_sgd_params *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->lr = 1e-3;
}

void goblin_adamw_params_default(goblin_adamw_params *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->weight_decay = 1e-2;
}

/* torch.lerp: self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w). */
#define LERP(FMA, s, e, w) ((fabs((double)(w)) < 0.5) ? FMA((w), (e) - (s), (s)) \
                                                       : FMA(-((e) - (s)), 1 - (w), (e)))

/* One copy per ISA level (FMA makes fmaf an instruction instead of a libm call), and
 * the options read once before the loop, so the common case (no maximize, no amsgrad)
 * vectorizes: every operation is elementwise and exactly rounded, so each clone and
 * any vector width gives the same bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#if __GNUC__ >= 12
#define OPT_CLONES GOBLIN_TARGET_CLONES("arch=x86-64-v3", "default")
#else
#define OPT_CLONES GOBLIN_TARGET_CLONES("arch=haswell", "default")
#endif
#else
#define OPT_CLONES
#endif

#pragma GCC push_options
#pragma GCC optimize("O3") /* -O2's cost model leaves these loops scalar */

#define DEFINE_SGD(T, FMA, NAME)                                                                    \
    static OPT_CLONES void NAME(const goblin_sgd_params *o, int64_t n, T *restrict p,         \
                                const T *restrict g, T *restrict buf, bool first) {            \
        const T wd = (T)o->weight_decay, mom = (T)o->momentum;                                 \
        const T damp1 = (T)(1 - o->dampening), neglr = (T)(-o->lr);                            \
        const bool maximize = o->maximize, nesterov = o->nesterov;                             \
        const bool has_wd = o->weight_decay != 0, has_mom = o->momentum != 0;                  \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T d = maximize ? -g[i] : g[i];                                                     \
            if (has_wd) d = FMA(wd, p[i], d);                                                  \
            if (has_mom) {                                                                     \
                T b = first ? d : buf[i] * mom;                                                \
                if (!first) b = FMA(damp1, d, b);                                              \
                buf[i] = b;                                                                    \
                d = nesterov ? FMA(mom, b, d) : b;                                             \
            }                                                                                  \
            p[i] = FMA(neglr, d, p[i]);                                                        \
        }                                                                                      \
    }
DEFINE_SGD(float, fmaf, sgd_f32)
DEFINE_SGD(double, fma, sgd_f64)
#pragma GCC pop_options

static bool sgd_ok(const goblin_sgd_params *o) {
    if (!(o->lr >= 0) || !(o->momentum >= 0) || !(o->weight_decay >= 0) || !isfinite(o->dampening))
        return false;
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0)) return false;
    return true;
}

goblin_err goblin_sgd_step(const goblin_sgd_params *o, goblin_dtype dt, int64_t n, void *param,
                           const void *grad, goblin_sgd_state *st) {
    if (!o || !st || n < 0 || (n > 0 && (!param || !grad)) || !sgd_ok(o)) return GOBLIN_EINVAL;
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) return GOBLIN_EDTYPE;
    if (o->momentum != 0 && n > 0 && !st->momentum_buffer) return GOBLIN_EINVAL;
    bool first = !st->initialized;
    if (dt == GOBLIN_DTYPE_F32) sgd_f32(o, n, param, grad, st->momentum_buffer, first);
    else sgd_f64(o, n, param, grad, st->momentum_buffer, first);
    if (o->momentum != 0) st->initialized = true;
    return GOBLIN_OK;
}

#pragma GCC push_options
#pragma GCC optimize("O3")
#define DEFINE_ADAMW(T, SQRT, FMA, NAME)                                                            \
    static OPT_CLONES void NAME(const goblin_adamw_params *o, int64_t n, T *restrict p,       \
                                const T *restrict g, T *restrict m, T *restrict v,             \
                                T *restrict vmax, int64_t step) {                              \
        const T decay = (T)(1 - o->lr * o->weight_decay), w1 = (T)(1 - o->beta1);              \
        const T b2 = (T)o->beta2, c2 = (T)(1 - o->beta2);                                      \
        double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);   \
        double step_size = o->lr / bc1, bc2_sqrt = pow(bc2, 0.5);                              \
        const T bc2s = (T)bc2_sqrt, eps = (T)o->eps, negss = (T)(-step_size);                  \
        const bool maximize = o->maximize, amsgrad = o->amsgrad, wd = o->weight_decay != 0;    \
        const bool near = fabs((double)w1) < 0.5; /* torch.lerp's two forms */               \
        const T dec = wd ? decay : (T)1;            /* p * 1 is p, bit for bit */              \
        if (!maximize && !amsgrad && near) {                                                   \
            for (int64_t i = 0; i < n; i++) {                                                  \
                T gi = g[i], pi = p[i] * dec;                                                  \
                T mi = FMA(w1, gi - m[i], m[i]);                                               \
                T vi = FMA(c2 * gi, gi, v[i] * b2);                                            \
                m[i] = mi;                                                                     \
                v[i] = vi;                                                                     \
                p[i] = pi + negss * mi / (SQRT(vi) / bc2s + eps);                              \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T gi = maximize ? -g[i] : g[i];                                                    \
            if (wd) p[i] = p[i] * decay;                                                       \
            m[i] = LERP(FMA, m[i], gi, w1);                                                    \
            v[i] = v[i] * b2;                                                                  \
            v[i] = FMA(c2 * gi, gi, v[i]);                                                     \
            T den;                                                                             \
            if (amsgrad) {                                                                     \
                /* torch.maximum: NaN propagates */                                            \
                vmax[i] = (vmax[i] != vmax[i] || v[i] != v[i]) ? (T)NAN                        \
                          : vmax[i] > v[i]                     ? vmax[i]                       \
                                                               : v[i];                         \
                den = SQRT(vmax[i]) / bc2s + eps;                                              \
            } else {                                                                           \
                den = SQRT(v[i]) / bc2s + eps;                                                 \
            }                                                                                  \
            p[i] = p[i] + negss * m[i] / den;                                                  \
        }                                                                                      \
    }
DEFINE_ADAMW(float, sqrtf, fmaf, adamw_f32)
DEFINE_ADAMW(double, sqrt, fma, adamw_f64)
#pragma GCC pop_options

goblin_err goblin_adamw_step(const goblin_adamw_params *o, goblin_dtype dt, int64_t n, void *param,
                             const void *grad, goblin_adamw_state *st) {
    if (!o || !st || n < 0 || st->step < 0) return GOBLIN_EINVAL;
    if (!(o->lr >= 0) || !(o->eps >= 0) || !(o->weight_decay >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) ||
        !(o->beta2 >= 0 && o->beta2 < 1))
        return GOBLIN_EINVAL;
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) return GOBLIN_EDTYPE;
    if (n > 0 && (!param || !grad || !st->exp_avg || !st->exp_avg_sq ||
                  (o->amsgrad && !st->max_exp_avg_sq)))
        return GOBLIN_EINVAL;
    st->step++;
    if (dt == GOBLIN_DTYPE_F32)
        adamw_f32(o, n, param, grad, st->exp_avg, st->exp_avg_sq, st->max_exp_avg_sq, st->step);
    else
        adamw_f64(o, n, param, grad, st->exp_avg, st->exp_avg_sq, st->max_exp_avg_sq, st->step);
    return GOBLIN_OK;
}

/* The norm of one tensor, accumulated in double and rounded to dt (torch's
 * vector_norm accumulates wider than f32 too). */
static double tensor_norm(goblin_dtype dt, const void *p, int64_t n, bool inf) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = dt == GOBLIN_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
        if (inf) {
            double a = fabs(x);
            if (a > acc || a != a) acc = a;
        } else {
            acc += x * x;
        }
    }
    double r = inf ? acc : sqrt(acc);
    return dt == GOBLIN_DTYPE_F32 ? (double)(float)r : r;
}

goblin_err goblin_clip_grad_norm(goblin_dtype dt, int32_t n_tensors, void *const *grads,
                                 const int64_t *numels, double max_norm, double norm_type,
                                 double *total_norm) {
    if (n_tensors < 0 || (n_tensors > 0 && (!grads || !numels)) || !(max_norm >= 0 || max_norm != max_norm))
        return GOBLIN_EINVAL;
    bool inf = isinf(norm_type) && norm_type > 0;
    if (!inf && norm_type != 2) return GOBLIN_EINVAL;
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) return GOBLIN_EDTYPE;
    for (int32_t t = 0; t < n_tensors; t++)
        if (numels[t] < 0 || (numels[t] > 0 && !grads[t])) return GOBLIN_EINVAL;
    /* total = norm of the per-tensor norms, as torch.linalg.vector_norm(stack(norms)) */
    double acc = 0;
    for (int32_t t = 0; t < n_tensors; t++) {
        double nt = tensor_norm(dt, grads[t], numels[t], inf);
        if (inf) {
            if (nt > acc || nt != nt) acc = nt;
        } else {
            acc += nt * nt;
        }
    }
    double total = inf ? acc : sqrt(acc);
    if (dt == GOBLIN_DTYPE_F32) {
        float tf = (float)total;
        float coef = (float)max_norm / (tf + 1e-6f);
        if (coef > 1.0f) coef = 1.0f;
        for (int32_t t = 0; t < n_tensors; t++)
            for (int64_t i = 0; i < numels[t]; i++) ((float *)grads[t])[i] *= coef;
        total = tf;
    } else {
        double coef = max_norm / (total + 1e-6);
        if (coef > 1.0) coef = 1.0;
        for (int32_t t = 0; t < n_tensors; t++)
            for (int64_t i = 0; i < numels[t]; i++) ((double *)grads[t])[i] *= coef;
    }
    if (total_norm) *total_norm = total;
    return GOBLIN_OK;
}

static const char *const g_lr_kind_names[GOBLIN_LR_KIND_COUNT] = {
    [GOBLIN_LR_CONSTANT] = "constant",
    [GOBLIN_LR_COSINE_WARMUP] = "cosine-warmup",
};

const char *goblin_lr_kind_name(goblin_lr_kind k) {
    return (unsigned)k < GOBLIN_LR_KIND_COUNT ? g_lr_kind_names[k] : NULL;
}

goblin_err goblin_lr_kind_from_name(const char *name, goblin_lr_kind *out) {
    int i = goblin__name_index(g_lr_kind_names, GOBLIN_LR_KIND_COUNT, name);
    if (i < 0 || !out) return GOBLIN_EINVAL;
    *out = (goblin_lr_kind)i;
    return GOBLIN_OK;
}

double goblin_lr_at(const goblin_lr_schedule *s, int64_t step) {
    if (!s || step < 0) return NAN;
    if (s->kind == GOBLIN_LR_CONSTANT) return s->base_lr;
    if (s->kind != GOBLIN_LR_COSINE_WARMUP || s->warmup_steps < 0 || s->total_steps <= s->warmup_steps ||
        !(s->warmup_start_factor > 0 && s->warmup_start_factor <= 1))
        return NAN;
    if (step < s->warmup_steps) {
        double f = s->warmup_start_factor;
        return s->base_lr * (f + (1 - f) * (double)step / (double)s->warmup_steps);
    }
    int64_t T = s->total_steps - s->warmup_steps, t = step - s->warmup_steps;
    if (t > T) t = T;
    return s->eta_min + (s->base_lr - s->eta_min) * (1 + cos(M_PI * (double)t / (double)T)) / 2;
}
