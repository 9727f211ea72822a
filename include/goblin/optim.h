/* goblin/optim.h - optimizer steps on host buffers.
 *
 * The node owns the parameters and applies the optimizer between steps; these
 * functions are the math: PyTorch's update formulas in PyTorch's order of
 * operations (torch.optim.SGD and AdamW single-tensor paths,
 * torch.nn.utils.clip_grad_norm_), in f32 or f64 (every intermediate in the
 * buffer's dtype, the scalar coefficients computed in double and rounded to it,
 * as torch does). Deterministic: plain loops, no threads. docs/training.md has
 * the formulas.
 *
 * Buffers are contiguous arrays of n elements of dtype dt, owned by the caller. */
#ifndef GOBLIN_OPTIM_H
#define GOBLIN_OPTIM_H

#include "api.h"
#include "dtype.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

/** torch.optim.SGD's hyper-parameters. */
typedef struct goblin_sgd_params {
    double lr;           /* >= 0 (default 1e-3) */
    double momentum;     /* >= 0 (default 0) */
    double dampening;    /* default 0 */
    double weight_decay; /* >= 0 (default 0), L2: added to the gradient */
    bool nesterov;       /* needs momentum > 0 and dampening == 0 */
    bool maximize;
} goblin_sgd_params;

/** Per-parameter SGD state. momentum_buffer (n elements of dt) is needed when momentum
 *  != 0; initialized is false until the first step writes it (torch's None). */
typedef struct goblin_sgd_state {
    void *momentum_buffer;
    bool initialized;
} goblin_sgd_state;

GOBLIN_API void goblin_sgd_params_default(goblin_sgd_params *o);

/** One SGD step on @p param (updated in place) with gradient @p grad.
 *  GOBLIN_EINVAL (bad options, NULL buffers, n < 0), GOBLIN_EDTYPE (not f32/f64). */
GOBLIN_API goblin_err goblin_sgd_step(const goblin_sgd_params *o, goblin_dtype dt, int64_t n,
                                      void *param, const void *grad, goblin_sgd_state *st);

/** torch.optim.AdamW's hyper-parameters. */
typedef struct goblin_adamw_params {
    double lr;           /* >= 0 (default 1e-3) */
    double beta1, beta2; /* in [0, 1) (defaults 0.9, 0.999) */
    double eps;          /* >= 0 (default 1e-8) */
    double weight_decay; /* >= 0 (default 1e-2), decoupled: param *= 1 - lr * wd */
    bool amsgrad;
    bool maximize;
} goblin_adamw_params;

/** Per-parameter AdamW state: step starts at 0; exp_avg and exp_avg_sq (and
 *  max_exp_avg_sq with amsgrad) are n zeroed elements of dt, caller-owned. */
typedef struct goblin_adamw_state {
    int64_t step;
    void *exp_avg;
    void *exp_avg_sq;
    void *max_exp_avg_sq;
} goblin_adamw_state;

GOBLIN_API void goblin_adamw_params_default(goblin_adamw_params *o);

/** One AdamW step: increments st->step and updates @p param and the moments in place.
 *  GOBLIN_EINVAL (bad options, NULL buffers, n < 0), GOBLIN_EDTYPE (not f32/f64). */
GOBLIN_API goblin_err goblin_adamw_step(const goblin_adamw_params *o, goblin_dtype dt, int64_t n,
                                        void *param, const void *grad, goblin_adamw_state *st);

/** torch.nn.utils.clip_grad_norm_: the total norm of @p n_tensors gradients (grads[i]
 *  has numels[i] elements of dt; norm_type 2 or INFINITY) is written to *total_norm;
 *  then every gradient is multiplied by min(1, max_norm / (total + 1e-6)) (always, as
 *  torch). The per-tensor norms are computed with a double accumulator, rounded to dt,
 *  and combined in dt. GOBLIN_EINVAL (bad arguments, norm_type other than 2 / inf),
 *  GOBLIN_EDTYPE. A non-finite total norm scales by NaN, as torch (error_if_nonfinite
 *  false). */
GOBLIN_API goblin_err goblin_clip_grad_norm(goblin_dtype dt, int32_t n_tensors, void *const *grads,
                                            const int64_t *numels, double max_norm, double norm_type,
                                            double *total_norm);

typedef enum goblin_lr_kind {
    GOBLIN_LR_CONSTANT = 0,
    /* Linear warm-up then cosine decay: for step < warmup_steps,
     * lr = base * (f + (1 - f) * step / warmup_steps) with f = warmup_start_factor
     * (torch LinearLR); then with t = min(step - warmup_steps, T), T = total_steps -
     * warmup_steps, lr = eta_min + (base - eta_min) * (1 + cos(pi * t / T)) / 2
     * (torch CosineAnnealingLR's closed form; SequentialLR joins the two). */
    GOBLIN_LR_COSINE_WARMUP = 1,
    GOBLIN_LR_KIND_COUNT
} goblin_lr_kind;

/** "constant" or "cosine-warmup"; NULL for a value outside the enum. */
GOBLIN_API const char *goblin_lr_kind_name(goblin_lr_kind k);
/** The schedule kind named @p name (as goblin_lr_kind_name gives it) into *out; GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_lr_kind_from_name(const char *name, goblin_lr_kind *out);

typedef struct goblin_lr_schedule {
    goblin_lr_kind kind;
    double base_lr;
    double eta_min;             /* cosine: the final lr */
    double warmup_start_factor; /* in (0, 1]; LinearLR's start_factor */
    int64_t warmup_steps;       /* >= 0 */
    int64_t total_steps;        /* > warmup_steps */
} goblin_lr_schedule;

/** The learning rate for (0-based) @p step; NaN if the schedule is invalid. */
GOBLIN_API double goblin_lr_at(const goblin_lr_schedule *s, int64_t step);

GOBLIN_END_DECLS

#endif
