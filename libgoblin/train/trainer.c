/* libgoblin/train/trainer.c - the trainer's parameters, optimizer state and plans: the
 * trainer's construction (the model checked and analysed, see train_plan.c), the plan for
 * a batch under the grid's memory budget, and parameter access. A round is in round.c,
 * checkpoints in checkpoint.c; docs/training.md has the design. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "train_impl.h"
#include "base/names.h"

/* ---- small helpers ----------------------------------------------------------------- */

void goblin__train_log(goblin_trainer *t, goblin_log_level lvl, const char *fmt, ...) {
    if (!t->p.log || lvl > t->p.log_level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    t->p.log(t->p.log_user, lvl, line);
}

goblin_err goblin__train_alloc_like(goblin_tensor *out, goblin_dtype dt, int32_t rank, const int64_t *shape,
                                    bool zero) {
    memset(out, 0, sizeof *out);
    goblin_err e = goblin_tensor_init(out, dt, rank, shape, NULL);
    if (e) return e;
    size_t n = (size_t)goblin_tensor_numel(out) * goblin_dtype_size(dt);
    out->data = zero ? goblin__calloc(n ? n : 1, 1) : goblin__alloc(n ? n : 1);
    return out->data ? GOBLIN_OK : GOBLIN_ENOMEM;
}

/* ---- names ------------------------------------------------------------------------------ */

static const char *const g_optimizer_names[GOBLIN_OPTIMIZER_COUNT] = {
    [GOBLIN_OPTIMIZER_SGD] = "sgd",
    [GOBLIN_OPTIMIZER_ADAMW] = "adamw",
};

const char *goblin_optimizer_name(goblin_optimizer o) {
    return (unsigned)o < GOBLIN_OPTIMIZER_COUNT ? g_optimizer_names[o] : NULL;
}

goblin_err goblin_optimizer_from_name(const char *name, goblin_optimizer *out) {
    int i = goblin__name_index(g_optimizer_names, GOBLIN_OPTIMIZER_COUNT, name);
    if (i < 0 || !out) return GOBLIN_EINVAL;
    *out = (goblin_optimizer)i;
    return GOBLIN_OK;
}

/* ---- params --------------------------------------------------------------------------- */

void goblin_trainer_params_default(goblin_trainer_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->optimizer = GOBLIN_OPTIMIZER_ADAMW;
    goblin_sgd_params_default(&p->sgd);
    goblin_adamw_params_default(&p->adamw);
    p->schedule.kind = GOBLIN_LR_CONSTANT;
    p->schedule.warmup_start_factor = 1.0 / 3.0;
    p->max_stages = GOBLIN_TRAIN_MAX_STAGES;
    p->verify = GOBLIN_VERIFY_CHECKED;
    p->min_replication = 1.0;
    p->checked_max_share = 0.25;
    p->grad_jump_factor = 100.0;
    p->log_level = GOBLIN_LOG_WARN;
}

const char *goblin_trainer_error(const goblin_trainer *t) { return t ? t->err : ""; }
int64_t goblin_trainer_rounds(const goblin_trainer *t) { return t ? t->rounds : 0; }

void goblin__train_state_free(goblin_trainer *t) {
    for (int32_t i = 0; t->sgd && i < t->m.n_params; i++) goblin__free(t->sgd[i].momentum_buffer);
    for (int32_t i = 0; t->adam && i < t->m.n_params; i++) {
        goblin__free(t->adam[i].exp_avg);
        goblin__free(t->adam[i].exp_avg_sq);
        goblin__free(t->adam[i].max_exp_avg_sq);
    }
    goblin__free(t->sgd);
    goblin__free(t->adam);
    t->sgd = NULL;
    t->adam = NULL;
}

void goblin_trainer_free(goblin_trainer *t) {
    if (!t) return;
    goblin__train_plan_clear(&t->plan);
    goblin__train_state_free(t);
    for (int32_t i = 0; t->params && i < t->m.n_params; i++) goblin__free(t->params[i].data);
    goblin__free(t->params);
    double **bn[4] = {t->bn_mean, t->bn_var, t->bn_mean_next, t->bn_var_next};
    for (int a = 0; a < 4; a++) {
        for (int32_t k = 0; bn[a] && k < t->m.n_bn; k++) goblin__free(bn[a][k]);
        goblin__free(bn[a]);
    }
    goblin__train_model_clear(&t->m);
    goblin__free(t);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

goblin_err goblin__train_state_new(goblin_trainer *t, goblin_sgd_state **sgd, goblin_adamw_state **adam) {
    int32_t np = t->m.n_params;
    *sgd = NULL;
    *adam = NULL;
    if (t->p.optimizer == GOBLIN_OPTIMIZER_SGD) {
        *sgd = goblin__calloc((size_t)np, sizeof **sgd);
        if (!*sgd) return GOBLIN_ENOMEM;
        for (int32_t i = 0; i < np && t->p.sgd.momentum != 0; i++) {
            size_t n = (size_t)goblin_tensor_numel(&t->params[i]) * goblin_dtype_size(t->pdt);
            if (!((*sgd)[i].momentum_buffer = goblin__calloc(n ? n : 1, 1))) return GOBLIN_ENOMEM;
        }
    } else {
        *adam = goblin__calloc((size_t)np, sizeof **adam);
        if (!*adam) return GOBLIN_ENOMEM;
        for (int32_t i = 0; i < np; i++) {
            size_t n = (size_t)goblin_tensor_numel(&t->params[i]) * goblin_dtype_size(t->pdt);
            goblin_adamw_state *s = &(*adam)[i];
            s->exp_avg = goblin__calloc(n ? n : 1, 1);
            s->exp_avg_sq = goblin__calloc(n ? n : 1, 1);
            if (t->p.adamw.amsgrad) s->max_exp_avg_sq = goblin__calloc(n ? n : 1, 1);
            if (!s->exp_avg || !s->exp_avg_sq || (t->p.adamw.amsgrad && !s->max_exp_avg_sq))
                return GOBLIN_ENOMEM;
        }
    }
    return GOBLIN_OK;
}

#define NEWFAIL(code, ...)                                              \
    do {                                                                \
        if (err_msg && err_cap) snprintf(err_msg, err_cap, __VA_ARGS__); \
        e = (code);                                                     \
        goto fail;                                                      \
    } while (0)

goblin_err goblin_trainer_new(goblin_trainer **out, goblin_grid *grid, const goblin_trainer_params *p,
                              const goblin_tensor *init, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, err_msg, err_cap);
    if (err_msg && err_cap) err_msg[0] = 0;
    goblin_err e = GOBLIN_OK;
    goblin_trainer *t = NULL;
    uint8_t *ser = NULL;
    if (!out || !p || !p->model || !init) {
        if (err_msg && err_cap) snprintf(err_msg, err_cap, "out, params, model and init are required");
        return GOBLIN_EINVAL;
    }
    t = goblin__calloc(1, sizeof *t);
    if (!t) return GOBLIN_ENOMEM;
    t->p = *p;
    t->grid = grid;
    const goblin_graph *g = p->model;
    int32_t n_in = goblin_graph_input_count(g);
    if (p->n_params < 1 || p->n_params >= n_in)
        NEWFAIL(GOBLIN_EINVAL, "n_params %d: the model has %d inputs and needs at least one "
                "parameter and one data input", (int)p->n_params, (int)n_in);
    if ((unsigned)p->optimizer >= GOBLIN_OPTIMIZER_COUNT)
        NEWFAIL(GOBLIN_EINVAL, "unknown optimizer %d", (int)p->optimizer);
    if (p->max_stages < 1 || p->max_stages > GOBLIN_TRAIN_MAX_STAGES)
        NEWFAIL(GOBLIN_EINVAL, "max_stages %d outside 1..%d", (int)p->max_stages,
                GOBLIN_TRAIN_MAX_STAGES);
    if (!(p->checked_max_share > 0))
        NEWFAIL(GOBLIN_EINVAL, "checked_max_share %g is not > 0", p->checked_max_share);
    if (!(p->min_replication > 0 && p->min_replication <= 1))
        NEWFAIL(GOBLIN_EINVAL, "min_replication %g outside (0, 1]", p->min_replication);
    if (!(p->clip_norm >= 0) || isinf(p->clip_norm))
        NEWFAIL(GOBLIN_EINVAL, "clip_norm %g: needs a finite value >= 0", p->clip_norm);
    if (!(p->grad_jump_factor >= 0) || !isfinite(p->grad_jump_factor))
        NEWFAIL(GOBLIN_EINVAL, "grad_jump_factor %g: needs a finite value >= 0 (0: off)",
                p->grad_jump_factor);
    if (p->micro_batch < 0) NEWFAIL(GOBLIN_EINVAL, "micro_batch %lld < 0", (long long)p->micro_batch);
    if ((unsigned)p->verify >= GOBLIN_VERIFY_COUNT || p->verify == GOBLIN_VERIFY_FREIVALDS)
        NEWFAIL(GOBLIN_EINVAL, "verify mode %d does not apply to training", (int)p->verify);
    if (p->schedule.kind != GOBLIN_LR_CONSTANT) {
        goblin_lr_schedule s = p->schedule;
        if (!(s.base_lr > 0)) s.base_lr = p->optimizer == GOBLIN_OPTIMIZER_SGD ? p->sgd.lr : p->adamw.lr;
        if (p->schedule.kind != GOBLIN_LR_COSINE_WARMUP || isnan(goblin_lr_at(&s, 0)))
            NEWFAIL(GOBLIN_EINVAL, "invalid learning-rate schedule");
    }
    { /* the optimizer's own checks on an empty step */
        double dp = 0, dg = 0, b1 = 0, b2 = 0, b3 = 0;
        if (p->optimizer == GOBLIN_OPTIMIZER_SGD) {
            goblin_sgd_state s = {&b1, false};
            if (goblin_sgd_step(&p->sgd, GOBLIN_DTYPE_F64, 0, &dp, &dg, &s))
                NEWFAIL(GOBLIN_EINVAL, "invalid SGD options");
        } else {
            goblin_adamw_state s = {0, &b1, &b2, &b3};
            if (goblin_adamw_step(&p->adamw, GOBLIN_DTYPE_F64, 0, &dp, &dg, &s))
                NEWFAIL(GOBLIN_EINVAL, "invalid AdamW options");
        }
    }
    if (goblin_graph_output_count(g) < 1) NEWFAIL(GOBLIN_EINVAL, "the model has no output (the loss)");
    {
        goblin_tensor lt;
        goblin_graph_node(g, goblin_graph_output_id(g, 0), NULL, &lt, NULL, NULL);
        if (!goblin_dtype_is_float(lt.dtype))
            NEWFAIL(GOBLIN_EDTYPE, "the loss (output 0) has dtype %s; it must be a float",
                    goblin_dtype_name(lt.dtype));
        if (goblin_tensor_numel(&lt) != 1)
            NEWFAIL(GOBLIN_ESHAPE, "the loss (output 0) has %lld elements; it must have one",
                    (long long)goblin_tensor_numel(&lt));
    }
    int64_t batch0 = -1;
    for (int32_t i = 0; i < n_in; i++) {
        goblin_tensor d;
        goblin_graph_node(g, goblin_graph_input_id(g, i), NULL, &d, NULL, NULL);
        if (i < p->n_params) {
            if (d.dtype != GOBLIN_DTYPE_F32 && d.dtype != GOBLIN_DTYPE_F64)
                NEWFAIL(GOBLIN_EDTYPE, "parameter %d has dtype %s; parameters must be f32 or f64",
                        (int)i, goblin_dtype_name(d.dtype));
            if (i > 0 && d.dtype != t->pdt)
                NEWFAIL(GOBLIN_EDTYPE, "parameter %d has dtype %s, parameter 0 %s: all parameters "
                        "must share one dtype", (int)i, goblin_dtype_name(d.dtype),
                        goblin_dtype_name(t->pdt));
            t->pdt = d.dtype;
            const goblin_tensor *x = &init[i];
            if (x->dtype != d.dtype)
                NEWFAIL(GOBLIN_EDTYPE, "init %d has dtype %s, the model's parameter %s", (int)i,
                        goblin_dtype_name(x->dtype), goblin_dtype_name(d.dtype));
            bool same = x->rank == d.rank;
            for (int32_t k = 0; same && k < d.rank; k++) same = x->shape[k] == d.shape[k];
            if (!same) NEWFAIL(GOBLIN_ESHAPE, "init %d does not have the shape of parameter %d", (int)i, (int)i);
            if (!x->data && goblin_tensor_numel(x) > 0) NEWFAIL(GOBLIN_EINVAL, "init %d has no data", (int)i);
        } else {
            if (d.rank < 1 || d.shape[0] < 1)
                NEWFAIL(GOBLIN_ESHAPE, "data input %d must be batched along dim 0", (int)(i - p->n_params));
            if (batch0 >= 0 && d.shape[0] != batch0)
                NEWFAIL(GOBLIN_ESHAPE, "data input %d has %lld rows, data input 0 %lld",
                        (int)(i - p->n_params), (long long)d.shape[0], (long long)batch0);
            batch0 = d.shape[0];
        }
    }
    t->m.n_params = p->n_params;
    t->m.n_data = n_in - p->n_params;
    t->m.batch0 = batch0;
    char msg[512];
    e = goblin__train_instance(g, p->n_params, batch0, batch0, &t->m.g, msg, sizeof msg);
    if (e) NEWFAIL(e, "%s", msg);
    t->m.loss_id = goblin_graph_output_id(t->m.g, 0);
    if ((e = goblin__train_analyse(&t->m, msg, sizeof msg))) NEWFAIL(e, "%s", msg);
    if (!t->m.nodes[t->m.loss_id].batch_dep)
        NEWFAIL(GOBLIN_EINVAL, "the loss does not depend on the data inputs");
    t->loss_nonneg = goblin__train_loss_nonneg(&t->m);
    if (t->m.n_bn) { /* the batch-norms' statistics, this round's and the applied one's */
        double ***bn[4] = {&t->bn_mean, &t->bn_var, &t->bn_mean_next, &t->bn_var_next};
        for (int a = 0; a < 4; a++) {
            *bn[a] = goblin__calloc((size_t)t->m.n_bn, sizeof(double *));
            if (!*bn[a]) NEWFAIL(GOBLIN_ENOMEM, "out of memory");
            for (int32_t k = 0; k < t->m.n_bn; k++)
                if (!((*bn[a])[k] = goblin__calloc((size_t)t->m.bn_ch[k], sizeof(double))))
                    NEWFAIL(GOBLIN_ENOMEM, "out of memory");
        }
    }
    /* parameters */
    t->params = goblin__calloc((size_t)p->n_params, sizeof *t->params);
    if (!t->params) NEWFAIL(GOBLIN_ENOMEM, "out of memory");
    for (int32_t i = 0; i < p->n_params; i++) {
        if (goblin__train_alloc_like(&t->params[i], init[i].dtype, init[i].rank, init[i].shape, false))
            NEWFAIL(GOBLIN_ENOMEM, "out of memory");
        goblin__tensor_copy(&t->params[i], &init[i]);
    }
    if (goblin__train_state_new(t, &t->sgd, &t->adam)) NEWFAIL(GOBLIN_ENOMEM, "out of memory");
    /* every op on a parameter -> loss path needs a backward rule: build the whole graph */
    {
        tr_plan pl;
        e = goblin__train_make_plan(&t->m, batch0, batch0, UINT64_MAX / 4, 1, &pl, msg, sizeof msg);
        if (e) NEWFAIL(e, "%s", msg);
        tr_task_graph *tg = NULL;
        e = goblin__train_task_graph(&t->m, &pl, 0, TR_TASK_LAST, batch0, 0, &tg, msg, sizeof msg);
        goblin__train_plan_clear(&pl);
        goblin__train_task_graph_free(tg);
        if (e) NEWFAIL(e, "%s", msg);
    }
    size_t len = 0;
    if ((e = goblin_graph_serialize(t->m.g, &ser, &len))) NEWFAIL(e, "serializing the model failed");
    t->model_hash = fnv1a(0xcbf29ce484222325ull, ser, len);
    t->model_hash = fnv1a(t->model_hash, &p->n_params, sizeof p->n_params);
    goblin_buffer_free(ser);
    ser = NULL;
    static uint64_t counter;
    t->nonce = goblin__train_mix64((uint64_t)(goblin__train_now_s() * 1e9) ^ (uint64_t)(uintptr_t)t ^
                     goblin__train_mix64(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)));
    t->version = 1;
    *out = t;
    return GOBLIN_OK;
fail:
    goblin_buffer_free(ser);
    goblin_trainer_free(t);
    return e;
}

/* ---- plans -------------------------------------------------------------------------- */

/* The smallest memory a connected, trusted worker advertises (256 MiB if none), unless
 * the trainer was given a budget. */
static uint64_t resolve_budget(goblin_trainer *t) {
    if (t->p.task_memory_bytes) return t->p.task_memory_bytes;
    uint64_t best = 0;
    goblin_node_stats st;
    goblin_node_worker_stats few[64], *ws = few;
    int64_t n = 0, have = 0;
    if (t->grid && goblin_grid_stats(t->grid, &st, few, 64, &n) == GOBLIN_OK) have = n < 64 ? n : 64;
    if (n > 64 && (ws = goblin__calloc((size_t)n, sizeof *ws))) {
        /* more workers than fit on the stack: ask again for all of them */
        int64_t cap = n;
        if (goblin_grid_stats(t->grid, &st, ws, cap, &n) == GOBLIN_OK) {
            have = n < cap ? n : cap;
        } else {
            goblin__free(ws);
            ws = few;
        }
    }
    if (!ws) ws = few;
    for (int64_t i = 0; i < have; i++)
        if (ws[i].connected && !ws[i].quarantined && ws[i].memory_bytes && (!best || ws[i].memory_bytes < best))
            best = ws[i].memory_bytes;
    if (ws != few) goblin__free(ws);
    return best ? best : (uint64_t)256 << 20;
}

goblin_err goblin__train_ensure_plan(goblin_trainer *t, int64_t batch) {
    uint64_t budget = resolve_budget(t);
    if (t->plan.valid && t->plan.batch == batch && t->plan.budget == budget &&
        t->plan_micro_param == t->p.micro_batch)
        return GOBLIN_OK;
    goblin__train_plan_clear(&t->plan);
    char msg[512];
    goblin_err e = goblin__train_make_admitted_plan(&t->m, batch, t->p.micro_batch, budget, t->p.max_stages,
                                           &t->plan, msg, sizeof msg);
    if (e) return goblin__train_err(t, e, "%s", msg);
    t->plan_micro_param = t->p.micro_batch;
    goblin__train_log(t, GOBLIN_LOG_INFO, "train plan: batch %lld, %lld micro-batch(es) of %lld rows, %d stage(s), "
         "%lld tasks per round, budget %llu bytes", (long long)batch, (long long)t->plan.n_micro,
         (long long)t->plan.micro, (int)t->plan.n_stages, (long long)t->plan.tasks_per_round,
         (unsigned long long)budget);
    return GOBLIN_OK;
}

goblin_err goblin_trainer_plan(goblin_trainer *t, int64_t batch, goblin_train_plan_info *out) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    if (!out || batch < 1) return goblin__train_err(t, GOBLIN_EINVAL, "batch %lld must be >= 1", (long long)batch);
    goblin_err e = goblin__train_ensure_plan(t, batch);
    if (e) return e;
    memset(out, 0, sizeof *out);
    const tr_plan *p = &t->plan;
    out->batch = p->batch;
    out->micro_batch = p->micro;
    out->micro_batches = p->n_micro;
    out->n_stages = p->n_stages;
    out->budget_bytes = p->budget;
    out->tasks_per_round = p->tasks_per_round;
    for (int32_t s = 0; s < p->n_stages; s++) {
        const tr_stage *st = &p->stages[s];
        goblin_train_stage_info *o = &out->stages[s];
        o->first_node = st->first;
        o->last_node = st->last;
        o->n_params = st->n_params;
        o->tiles = st->tiles;
        o->forward_task_bytes = st->fwd_bytes;
        o->backward_task_bytes = st->bwd_bytes;
        o->flops_per_row = st->flops_row;
    }
    return GOBLIN_OK;
}

goblin_err goblin_trainer_plan_text(goblin_trainer *t, int64_t batch, char *buf, size_t cap) {
    if (!t || !buf || cap == 0) return GOBLIN_EINVAL;
    goblin_train_plan_info pi;
    goblin_err e = goblin_trainer_plan(t, batch, &pi);
    if (e) return e;
    size_t len = 0;
#define APP(...)                                                              \
    do {                                                                      \
        if (len < cap) {                                                      \
            int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);             \
            if (w_ > 0) len += (size_t)w_ < cap - len ? (size_t)w_ : cap - len; \
        }                                                                     \
    } while (0)
    APP("batch %lld: %lld micro-batch(es) of up to %lld rows; %d stage(s); %lld task(s) per round "
        "(before replication); task budget %llu bytes\n",
        (long long)pi.batch, (long long)pi.micro_batches, (long long)pi.micro_batch, (int)pi.n_stages,
        (long long)pi.tasks_per_round, (unsigned long long)pi.budget_bytes);
    for (int32_t s = 0; s < pi.n_stages; s++) {
        const goblin_train_stage_info *o = &pi.stages[s];
        goblin_op op = GOBLIN_OP_INPUT;
        goblin_graph_node(t->m.g, o->first_node, &op, NULL, NULL, NULL);
        APP("  stage %d: nodes %d..%d (%s%s), %d parameter(s), %s%d tile(s), forward task %llu B, "
            "backward task %llu B, %.3g flops/row\n",
            (int)s, (int)o->first_node, (int)o->last_node, goblin_op_name(op),
            o->first_node == o->last_node ? "" : " ...", (int)o->n_params,
            o->tiles > 1 ? "tiled into " : "", (int)o->tiles,
            (unsigned long long)o->forward_task_bytes, (unsigned long long)o->backward_task_bytes,
            o->flops_per_row);
    }
#undef APP
    return GOBLIN_OK;
}

/* ---- parameters --------------------------------------------------------------------------- */

static goblin_err check_like(goblin_trainer *t, int32_t i, const goblin_tensor *x) {
    if (i < 0 || i >= t->m.n_params)
        return goblin__train_err(t, GOBLIN_EINDEX, "parameter %d out of 0..%d", (int)i, (int)t->m.n_params - 1);
    if (!x || (!x->data && goblin_tensor_numel(x) > 0)) return goblin__train_err(t, GOBLIN_EINVAL, "tensor has no buffer");
    const goblin_tensor *p = &t->params[i];
    if (x->dtype != p->dtype)
        return goblin__train_err(t, GOBLIN_EDTYPE, "parameter %d has dtype %s, not %s", (int)i,
                    goblin_dtype_name(p->dtype), goblin_dtype_name(x->dtype));
    bool same = x->rank == p->rank;
    for (int32_t k = 0; same && k < p->rank; k++) same = x->shape[k] == p->shape[k];
    if (!same) return goblin__train_err(t, GOBLIN_ESHAPE, "tensor does not have parameter %d's shape", (int)i);
    return GOBLIN_OK;
}

goblin_err goblin_trainer_get_param(goblin_trainer *t, int32_t i, goblin_tensor *out) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    goblin_err e = check_like(t, i, out);
    if (e) return e;
    goblin__tensor_copy(out, &t->params[i]);
    return GOBLIN_OK;
}

goblin_err goblin_trainer_set_param(goblin_trainer *t, int32_t i, const goblin_tensor *value) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    goblin_err e = check_like(t, i, value);
    if (e) return e;
    goblin__tensor_copy(&t->params[i], value);
    t->version++;
    return GOBLIN_OK;
}
