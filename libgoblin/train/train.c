/* libgoblin/train/train.c - the trainer: parameters and optimizer state in the lab's process,
 * rounds of verified graph jobs (one per micro-batch and stage task), the optimizer
 * step, checkpoints. The model analysis, partitioner and task graphs are in
 * train_plan.c; docs/training.md has the design and the gradient weighting. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/crc32.h"
#include "base/errf.h"
#include "train_impl.h"

struct goblin_trainer {
    goblin_trainer_params p;
    goblin_node *node;
    goblin_client *client;
    tr_model m;
    goblin_dtype pdt;
    goblin_tensor *params; /* contiguous, owned */
    goblin_sgd_state *sgd;
    goblin_adamw_state *adam;
    int64_t rounds;
    uint64_t version, nonce, model_hash;
    tr_plan plan;
    int64_t plan_micro_param;
    char err[512];
};

/* ---- small helpers ----------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static goblin_err terr(goblin_trainer *t, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static goblin_err terr(goblin_trainer *t, goblin_err e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return e;
}

static void tlog(goblin_trainer *t, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tlog(goblin_trainer *t, goblin_log_level lvl, const char *fmt, ...) {
    if (!t->p.log || lvl > t->p.log_level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    t->p.log(t->p.log_user, lvl, line);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t tnumel(const goblin_tensor *x) { return goblin_tensor_numel(x); }

static double get_f(const void *p, goblin_dtype dt, int64_t i) {
    return dt == GOBLIN_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static void set_f(void *p, goblin_dtype dt, int64_t i, double v) {
    if (dt == GOBLIN_DTYPE_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* A view of rows [r0, r0 + n) of @p x. */
static goblin_tensor row_view(const goblin_tensor *x, int64_t r0, int64_t n) {
    goblin_tensor v = *x;
    v.data = (char *)x->data + r0 * x->strides[0] * (int64_t)goblin_dtype_size(x->dtype);
    v.shape[0] = n;
    return v;
}
/* A view of [lo, hi) along @p axis. */
static goblin_tensor axis_view(const goblin_tensor *x, int32_t axis, int64_t lo, int64_t hi) {
    goblin_tensor v = *x;
    v.data = (char *)x->data + lo * x->strides[axis] * (int64_t)goblin_dtype_size(x->dtype);
    v.shape[axis] = hi - lo;
    return v;
}

static goblin_err alloc_like(goblin_tensor *out, goblin_dtype dt, int32_t rank, const int64_t *shape,
                             bool zero) {
    memset(out, 0, sizeof *out);
    goblin_err e = goblin_tensor_init(out, dt, rank, shape, NULL);
    if (e) return e;
    size_t n = (size_t)goblin_tensor_numel(out) * goblin_dtype_size(dt);
    out->data = zero ? goblin__calloc(n ? n : 1, 1) : goblin__alloc(n ? n : 1);
    return out->data ? GOBLIN_OK : GOBLIN_ENOMEM;
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
    p->verify = GOBLIN_VERIFY_REPLICATE;
    p->min_replication = 1.0;
    p->log_level = GOBLIN_LOG_WARN;
}

const char *goblin_trainer_error(const goblin_trainer *t) { return t ? t->err : ""; }
int64_t goblin_trainer_rounds(const goblin_trainer *t) { return t ? t->rounds : 0; }

static void state_free(goblin_trainer *t) {
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
    state_free(t);
    for (int32_t i = 0; t->params && i < t->m.n_params; i++) goblin__free(t->params[i].data);
    goblin__free(t->params);
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

/* Fresh optimizer state (zeroed moments, step 0, no momentum buffer yet). */
static goblin_err state_new(goblin_trainer *t, goblin_sgd_state **sgd, goblin_adamw_state **adam) {
    int32_t np = t->m.n_params;
    *sgd = NULL;
    *adam = NULL;
    if (t->p.optimizer == GOBLIN_OPTIMIZER_SGD) {
        *sgd = goblin__calloc((size_t)np, sizeof **sgd);
        if (!*sgd) return GOBLIN_ENOMEM;
        for (int32_t i = 0; i < np && t->p.sgd.momentum != 0; i++) {
            size_t n = (size_t)tnumel(&t->params[i]) * goblin_dtype_size(t->pdt);
            if (!((*sgd)[i].momentum_buffer = goblin__calloc(n ? n : 1, 1))) return GOBLIN_ENOMEM;
        }
    } else {
        *adam = goblin__calloc((size_t)np, sizeof **adam);
        if (!*adam) return GOBLIN_ENOMEM;
        for (int32_t i = 0; i < np; i++) {
            size_t n = (size_t)tnumel(&t->params[i]) * goblin_dtype_size(t->pdt);
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

goblin_err goblin_trainer_new(goblin_trainer **out, goblin_node *node, goblin_client *client,
                              const goblin_trainer_params *p, const goblin_tensor *init,
                              goblin_errbuf *err) {
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
    t->node = node;
    t->client = client;
    const goblin_graph *g = p->model;
    int32_t n_in = goblin_graph_input_count(g);
    if (node && client) NEWFAIL(GOBLIN_EINVAL, "give a node or a client, not both");
    if (p->n_params < 1 || p->n_params >= n_in)
        NEWFAIL(GOBLIN_EINVAL, "n_params %d: the model has %d inputs and needs at least one "
                "parameter and one data input", (int)p->n_params, (int)n_in);
    if ((unsigned)p->optimizer >= GOBLIN_OPTIMIZER_COUNT)
        NEWFAIL(GOBLIN_EINVAL, "unknown optimizer %d", (int)p->optimizer);
    if (p->max_stages < 1 || p->max_stages > GOBLIN_TRAIN_MAX_STAGES)
        NEWFAIL(GOBLIN_EINVAL, "max_stages %d outside 1..%d", (int)p->max_stages,
                GOBLIN_TRAIN_MAX_STAGES);
    if (!(p->min_replication > 0 && p->min_replication <= 1))
        NEWFAIL(GOBLIN_EINVAL, "min_replication %g outside (0, 1]", p->min_replication);
    if (!(p->clip_norm >= 0) || isinf(p->clip_norm))
        NEWFAIL(GOBLIN_EINVAL, "clip_norm %g: needs a finite value >= 0", p->clip_norm);
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
        if (tnumel(&lt) != 1)
            NEWFAIL(GOBLIN_ESHAPE, "the loss (output 0) has %lld elements; it must have one",
                    (long long)tnumel(&lt));
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
            if (!x->data && tnumel(x) > 0) NEWFAIL(GOBLIN_EINVAL, "init %d has no data", (int)i);
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
    /* parameters */
    t->params = goblin__calloc((size_t)p->n_params, sizeof *t->params);
    if (!t->params) NEWFAIL(GOBLIN_ENOMEM, "out of memory");
    for (int32_t i = 0; i < p->n_params; i++) {
        if (alloc_like(&t->params[i], init[i].dtype, init[i].rank, init[i].shape, false))
            NEWFAIL(GOBLIN_ENOMEM, "out of memory");
        goblin__tensor_copy(&t->params[i], &init[i]);
    }
    if (state_new(t, &t->sgd, &t->adam)) NEWFAIL(GOBLIN_ENOMEM, "out of memory");
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
    t->nonce = mix64((uint64_t)(now_s() * 1e9) ^ (uint64_t)(uintptr_t)t ^
                     mix64(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)));
    t->version = 1;
    *out = t;
    return GOBLIN_OK;
fail:
    goblin_buffer_free(ser);
    goblin_trainer_free(t);
    return e;
}

/* ---- plans -------------------------------------------------------------------------- */

static uint64_t resolve_budget(goblin_trainer *t) {
    if (t->p.task_memory_bytes) return t->p.task_memory_bytes;
    uint64_t best = 0;
    if (t->node) {
        goblin_node_stats st;
        goblin_node_stats_get(t->node, &st);
        for (int64_t i = 0; i < st.workers_seen; i++) {
            goblin_node_worker_stats w;
            if (goblin_node_worker_stats_get(t->node, i, &w)) continue;
            if (w.connected && !w.quarantined && w.memory_bytes && (!best || w.memory_bytes < best))
                best = w.memory_bytes;
        }
    } else if (t->client) {
        goblin_node_stats st;
        goblin_node_worker_stats ws[64];
        int64_t n = 0;
        if (!goblin_client_stats(t->client, &st, ws, 64, &n))
            for (int64_t i = 0; i < n && i < 64; i++)
                if (ws[i].connected && !ws[i].quarantined && ws[i].memory_bytes &&
                    (!best || ws[i].memory_bytes < best))
                    best = ws[i].memory_bytes;
    }
    return best ? best : (uint64_t)256 << 20;
}

static goblin_err ensure_plan(goblin_trainer *t, int64_t batch) {
    uint64_t budget = resolve_budget(t);
    if (t->plan.valid && t->plan.batch == batch && t->plan.budget == budget &&
        t->plan_micro_param == t->p.micro_batch)
        return GOBLIN_OK;
    goblin__train_plan_clear(&t->plan);
    char msg[512];
    goblin_err e = goblin__train_make_plan(&t->m, batch, t->p.micro_batch, budget, t->p.max_stages,
                                           &t->plan, msg, sizeof msg);
    if (e) return terr(t, e, "%s", msg);
    t->plan_micro_param = t->p.micro_batch;
    tlog(t, GOBLIN_LOG_INFO, "train plan: batch %lld, %lld micro-batch(es) of %lld rows, %d stage(s), "
         "%lld tasks per round, budget %llu bytes", (long long)batch, (long long)t->plan.n_micro,
         (long long)t->plan.micro, (int)t->plan.n_stages, (long long)t->plan.tasks_per_round,
         (unsigned long long)budget);
    return GOBLIN_OK;
}

goblin_err goblin_trainer_plan(goblin_trainer *t, int64_t batch, goblin_train_plan_info *out) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    if (!out || batch < 1) return terr(t, GOBLIN_EINVAL, "batch %lld must be >= 1", (long long)batch);
    goblin_err e = ensure_plan(t, batch);
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

/* ---- task execution ------------------------------------------------------------------ */

typedef struct tr_run {
    tr_task_graph *tg;
    int32_t stage, tile;
    int64_t mb, rows;
    goblin_tensor *in, *out;
    goblin_split *split;
    goblin_combine *comb;
    uint64_t *cids;
    bool *own; /* out[i].data is a temporary */
    goblin_job *job;
    uint64_t cjob;
    int state; /* 0 not submitted, 1 in flight, 2 done */
} tr_run;

static void run_clear(tr_run *r) {
    if (r->out)
        for (int32_t i = 0; i < r->tg->n_out; i++)
            if (r->own[i]) goblin__free(r->out[i].data);
    goblin__free(r->in);
    goblin__free(r->out);
    goblin__free(r->split);
    goblin__free(r->comb);
    goblin__free(r->cids);
    goblin__free(r->own);
    memset(r, 0, sizeof *r);
}

static void run_abandon(goblin_trainer *t, tr_run *r) {
    if (r->state == 1) {
        if (t->node) {
            goblin_job_cancel(r->job);
            goblin_job_free(r->job);
        } else if (t->client) {
            goblin_client_cancel(t->client, r->cjob);
            int32_t n = r->tg->n_out;
            goblin_tensor *tmp = goblin__calloc((size_t)n + 1, sizeof *tmp);
            for (int tries = 0; tmp && tries < 200; tries++) {
                goblin_err e = goblin_client_fetch_outputs(t->client, r->cjob, tmp, n);
                if (e != GOBLIN_EBUSY) break;
                struct timespec ts = {0, 5000000};
                nanosleep(&ts, NULL);
            }
            for (int32_t i = 0; tmp && i < n; i++) goblin_buffer_free(tmp[i].data);
            goblin__free(tmp);
        }
    }
    r->state = 0;
}

static goblin_err run_submit(goblin_trainer *t, tr_run *r) {
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.job.min_tasks = 1;
    jp.chunk_rows = r->rows;
    jp.split = r->split;
    jp.combine = r->comb;
    jp.cache_ids = r->cids;
    jp.verify = t->p.verify;
    jp.min_replication = t->p.min_replication;
    goblin_err e;
    int32_t ni = r->tg->n_in, no = r->tg->n_out;
    if (t->node) {
        e = goblin_node_submit_graph(t->node, r->tg->g, r->in, ni, r->out, no, &jp, &r->job);
        if (e) return terr(t, e, "submitting stage %d task (micro-batch %lld) failed: %s (the node's "
                           "log says why)", (int)r->stage, (long long)r->mb, goblin_strerror(e));
    } else if (t->client) {
        e = goblin_client_submit_graph(t->client, r->tg->g, r->in, ni, &jp, &r->cjob);
        if (e) return terr(t, e, "submitting stage %d task (micro-batch %lld) failed: %s",
                           (int)r->stage, (long long)r->mb, goblin_client_error(t->client));
    } else {
        e = goblin_graph_eval(r->tg->g, NULL, r->in, ni, r->out, no);
        if (e) return terr(t, e, "evaluating stage %d task (micro-batch %lld) failed: %s",
                           (int)r->stage, (long long)r->mb, goblin_strerror(e));
        r->state = 2;
        return GOBLIN_OK;
    }
    r->state = 1;
    return GOBLIN_OK;
}

static goblin_err run_wait(goblin_trainer *t, tr_run *r) {
    if (r->state != 1) return GOBLIN_OK;
    goblin_err e = GOBLIN_OK;
    if (t->node) {
        e = goblin_job_wait(r->job, -1);
        if (e) terr(t, e, "stage %d task (micro-batch %lld): %s", (int)r->stage, (long long)r->mb,
                    goblin_job_error(r->job));
        goblin_job_free(r->job);
        r->job = NULL;
    } else {
        int32_t n = r->tg->n_out;
        goblin_tensor *tmp = goblin__calloc((size_t)n, sizeof *tmp);
        if (!tmp) return terr(t, GOBLIN_ENOMEM, "out of memory");
        long sleep_ns = 500000;
        for (;;) {
            e = goblin_client_fetch_outputs(t->client, r->cjob, tmp, n);
            if (e != GOBLIN_EBUSY) break;
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 20000000) sleep_ns *= 2;
        }
        if (e) {
            terr(t, e, "stage %d task (micro-batch %lld): %s", (int)r->stage, (long long)r->mb,
                 goblin_client_error(t->client));
        } else {
            for (int32_t i = 0; i < n; i++) goblin__tensor_copy(&r->out[i], &tmp[i]);
        }
        for (int32_t i = 0; i < n; i++) goblin_buffer_free(tmp[i].data);
        goblin__free(tmp);
    }
    r->state = 2;
    return e;
}

/* ---- rounds --------------------------------------------------------------------------- */

typedef struct tr_round {
    goblin_trainer *t;
    const goblin_tensor *data;
    int64_t B, m, nm;
    int32_t n_cross;
    int32_t *xmap;         /* node id -> crossing index, or -1 */
    int32_t *data_index;   /* node id -> data input index, or -1 */
    goblin_tensor *acts;   /* [nm * n_cross] */
    goblin_tensor *gx;     /* [nm * n_cross]: d loss_mb / d activation */
    double **gacc;         /* per parameter: sum over micro-batches of w_mb * d loss_mb / d p
                              (allocated at its first contribution that is not kept whole) */
    void **whole;          /* per parameter: its only contribution so far, when that is a
                              task's whole gradient with weight 1 in the parameters' dtype
                              (one micro-batch, untiled): the round's gradient is then that
                              buffer as it is, (T)(0.0 + 1.0 * (double)x) being x */
    double loss;
    int64_t done, total;
} tr_round;

static int64_t mb_rows(const tr_round *R, int64_t c) {
    int64_t r = R->B - c * R->m;
    return r < R->m ? r : R->m;
}

static goblin_err get_graph(goblin_trainer *t, int32_t s, tr_task_kind kind, int64_t rows,
                            int32_t tile, tr_task_graph **out) {
    tr_stage *st = &t->plan.stages[s];
    int slot = rows == t->plan.micro ? 0 : 1;
    if (st->graph_rows[slot] != rows) {
        for (int k = 0; k < 3; k++) {
            for (int32_t i = 0; st->graphs[slot][k] && i < st->tiles; i++)
                goblin__train_task_graph_free(st->graphs[slot][k][i]);
            goblin__free(st->graphs[slot][k]);
            st->graphs[slot][k] = NULL;
        }
        st->graph_rows[slot] = rows;
    }
    if (!st->graphs[slot][kind]) {
        st->graphs[slot][kind] = goblin__calloc((size_t)st->tiles, sizeof(tr_task_graph *));
        if (!st->graphs[slot][kind]) return terr(t, GOBLIN_ENOMEM, "out of memory");
    }
    if (!st->graphs[slot][kind][tile]) {
        char msg[512];
        goblin_err e = goblin__train_task_graph(&t->m, &t->plan, s, kind, rows, tile,
                                                &st->graphs[slot][kind][tile], msg, sizeof msg);
        if (e) return terr(t, e, "%s", msg);
    }
    *out = st->graphs[slot][kind][tile];
    return GOBLIN_OK;
}

static uint64_t cache_id(const goblin_trainer *t, int32_t p, int32_t tile) {
    uint64_t h = mix64(t->nonce ^ mix64(t->version ^ mix64((uint64_t)p * 1000003u + (uint64_t)tile)));
    return h ? h : 1;
}

/* Fill the run's inputs and outputs for stage s, micro-batch c, tile k. */
static goblin_err run_prepare(tr_round *R, tr_run *r, int32_t s, tr_task_kind kind, int64_t c,
                              int32_t k) {
    goblin_trainer *t = R->t;
    memset(r, 0, sizeof *r);
    r->stage = s;
    r->tile = k;
    r->mb = c;
    r->rows = mb_rows(R, c);
    goblin_err e = get_graph(t, s, kind, r->rows, k, &r->tg);
    if (e) return e;
    const tr_stage *st = &t->plan.stages[s];
    int32_t wp = -1, wa = 0, bp = -1, oa = 0;
    int64_t feat = 0, lo = 0, hi = 0;
    if (st->tiles > 1) {
        goblin__train_tile_layout(&t->m, st, &wp, &wa, &bp, &oa, &feat);
        goblin__train_tile_range(feat, st->tiles, k, &lo, &hi);
    }
    int32_t ni = r->tg->n_in, no = r->tg->n_out;
    r->in = goblin__calloc((size_t)ni + 1, sizeof *r->in);
    r->split = goblin__calloc((size_t)ni + 1, sizeof *r->split);
    r->cids = goblin__calloc((size_t)ni + 1, sizeof *r->cids);
    r->out = goblin__calloc((size_t)no + 1, sizeof *r->out);
    r->comb = goblin__calloc((size_t)no + 1, sizeof *r->comb);
    r->own = goblin__calloc((size_t)no + 1, sizeof *r->own);
    if (!r->in || !r->split || !r->cids || !r->out || !r->comb || !r->own)
        return terr(t, GOBLIN_ENOMEM, "out of memory");
    int64_t row0 = c * R->m;
    for (int32_t i = 0; i < ni; i++) {
        tr_io io = r->tg->in[i];
        if (io.kind == TR_IO_PARAM) {
            const goblin_tensor *pv = &t->params[io.ref];
            r->split[i] = GOBLIN_SPLIT_BROADCAST;
            if (io.ref == wp || io.ref == bp) {
                r->in[i] = axis_view(pv, io.ref == wp ? wa : pv->rank - 1, lo, hi);
                r->cids[i] = cache_id(t, io.ref, k + 1);
            } else {
                r->in[i] = *pv;
                r->cids[i] = cache_id(t, io.ref, 0);
            }
        } else if (io.kind == TR_IO_NODE) {
            r->split[i] = GOBLIN_SPLIT_BATCH;
            int32_t di = R->data_index[io.ref];
            r->in[i] = di >= 0 ? row_view(&R->data[di], row0, r->rows)
                               : R->acts[c * R->n_cross + R->xmap[io.ref]];
        } else { /* seed */
            r->split[i] = GOBLIN_SPLIT_BATCH;
            goblin_tensor sv = R->gx[c * R->n_cross + R->xmap[io.ref]];
            r->in[i] = st->tiles > 1 ? axis_view(&sv, oa, lo, hi) : sv;
        }
    }
    for (int32_t i = 0; i < no; i++) {
        tr_io io = r->tg->out[i];
        if (io.kind == TR_IO_ACT) {
            r->comb[i] = GOBLIN_COMBINE_CONCAT;
            goblin_tensor av = R->acts[c * R->n_cross + R->xmap[io.ref]];
            r->out[i] = st->tiles > 1 ? axis_view(&av, oa, lo, hi) : av;
            continue;
        }
        goblin_tensor d;
        goblin_graph_node(r->tg->g, goblin_graph_output_id(r->tg->g, i), NULL, &d, NULL, NULL);
        if (alloc_like(&r->out[i], d.dtype, d.rank, d.shape, false))
            return terr(t, GOBLIN_ENOMEM, "out of memory");
        r->own[i] = true;
        r->comb[i] = io.kind == TR_IO_LOSS    ? GOBLIN_COMBINE_MEAN
                     : io.kind == TR_IO_PGRAD ? GOBLIN_COMBINE_SUM
                                              : GOBLIN_COMBINE_CONCAT;
    }
    return GOBLIN_OK;
}

/* Add @p src (contiguous) times @p w into the double array @p acc of the full shape
 * @p full, at [lo, lo + src's extent) along @p axis (lo = 0 and src of the full shape
 * for the whole tensor). src's other dimensions are full's, so it lands in acc as
 * contiguous chunks: one per index of the dimensions before @p axis. */
static void acc_add(double *acc, const goblin_tensor *full, int32_t axis, int64_t lo,
                    const goblin_tensor *src, double w) {
    int64_t outer = 1, inner = 1;
    for (int32_t d = 0; d < axis; d++) outer *= full->shape[d];
    for (int32_t d = axis + 1; d < full->rank; d++) inner *= full->shape[d];
    int64_t chunk = (src->rank > axis ? src->shape[axis] : 1) * inner;
    int64_t stride = (full->rank > axis ? full->shape[axis] : 1) * inner;
    for (int64_t o = 0; o < outer; o++) {
        double *a = acc + o * stride + lo * inner;
        if (src->dtype == GOBLIN_DTYPE_F32) {
            const float *x = (const float *)src->data + o * chunk;
            for (int64_t e = 0; e < chunk; e++) a[e] += w * (double)x[e];
        } else {
            const double *x = (const double *)src->data + o * chunk;
            for (int64_t e = 0; e < chunk; e++) a[e] += w * x[e];
        }
    }
}

static goblin_err run_finish(tr_round *R, tr_run *r) {
    goblin_trainer *t = R->t;
    const tr_stage *st = &t->plan.stages[r->stage];
    double w = (double)r->rows / (double)R->B;
    int32_t wp = -1, wa = 0, bp = -1, oa = 0;
    int64_t feat = 0, lo = 0, hi = 0;
    if (st->tiles > 1) {
        goblin__train_tile_layout(&t->m, st, &wp, &wa, &bp, &oa, &feat);
        goblin__train_tile_range(feat, st->tiles, r->tile, &lo, &hi);
    }
    for (int32_t i = 0; i < r->tg->n_out; i++) {
        tr_io io = r->tg->out[i];
        const goblin_tensor *o = &r->out[i];
        if (io.kind == TR_IO_LOSS) {
            R->loss += w * get_f(o->data, o->dtype, 0);
        } else if (io.kind == TR_IO_PGRAD) {
            const goblin_tensor *full = &t->params[io.ref];
            bool tiled = io.ref == wp || io.ref == bp;
            if (!tiled && w == 1.0 && r->own[i] && o->dtype == t->pdt && !R->whole[io.ref] &&
                !R->gacc[io.ref]) {
                R->whole[io.ref] = o->data; /* taken from the run */
                r->own[i] = false;
                continue;
            }
            if (!R->gacc[io.ref]) {
                R->gacc[io.ref] = goblin__calloc((size_t)tnumel(full) + 1, sizeof(double));
                if (!R->gacc[io.ref]) return terr(t, GOBLIN_ENOMEM, "out of memory");
            }
            if (R->whole[io.ref]) { /* a second contribution: the first one joins the sum */
                goblin_tensor k = *full;
                k.data = R->whole[io.ref];
                acc_add(R->gacc[io.ref], full, 0, 0, &k, 1.0);
                goblin__free(R->whole[io.ref]);
                R->whole[io.ref] = NULL;
            }
            if (tiled)
                acc_add(R->gacc[io.ref], full, io.ref == wp ? wa : full->rank - 1, lo, o, w);
            else
                acc_add(R->gacc[io.ref], full, 0, 0, o, w);
        } else if (io.kind == TR_IO_XGRAD) {
            goblin_tensor *gv = &R->gx[r->mb * R->n_cross + R->xmap[io.ref]];
            int64_t n = tnumel(o);
            for (int64_t e = 0; e < n; e++)
                set_f(gv->data, gv->dtype, e, get_f(gv->data, gv->dtype, e) + get_f(o->data, o->dtype, e));
        }
    }
    R->done++;
    if (t->p.progress) t->p.progress(t->p.progress_user, R->done, R->total);
    return GOBLIN_OK;
}

/* Run every (micro-batch, tile) task of stage s: submit all, then wait and combine in
 * micro-batch and tile order. */
static goblin_err run_phase(tr_round *R, int32_t s, tr_task_kind kind) {
    goblin_trainer *t = R->t;
    int32_t T = t->plan.stages[s].tiles;
    int64_t n = R->nm * T;
    tr_run *runs = goblin__calloc((size_t)n, sizeof *runs);
    if (!runs) return terr(t, GOBLIN_ENOMEM, "out of memory");
    goblin_err e = GOBLIN_OK;
    int64_t i;
    for (i = 0; i < n && !e; i++) {
        e = run_prepare(R, &runs[i], s, kind, i / T, (int32_t)(i % T));
        if (!e) e = run_submit(t, &runs[i]);
    }
    for (i = 0; i < n && !e; i++) {
        e = run_wait(t, &runs[i]);
        if (!e) e = run_finish(R, &runs[i]);
    }
    for (i = 0; i < n; i++) {
        if (runs[i].tg) run_abandon(t, &runs[i]);
        run_clear(&runs[i]);
    }
    goblin__free(runs);
    return e;
}

static bool stage_has_seeds(const tr_model *m, const tr_stage *st) {
    for (int32_t i = 0; i < st->n_out; i++)
        if (m->nodes[st->out_nodes[i]].needs_grad) return true;
    return false;
}

static void round_clear(tr_round *R) {
    int32_t np = R->t->m.n_params;
    for (int64_t i = 0; R->acts && i < R->nm * R->n_cross; i++) goblin__free(R->acts[i].data);
    for (int64_t i = 0; R->gx && i < R->nm * R->n_cross; i++) goblin__free(R->gx[i].data);
    for (int32_t i = 0; R->gacc && i < np; i++) goblin__free(R->gacc[i]);
    for (int32_t i = 0; R->whole && i < np; i++) goblin__free(R->whole[i]);
    goblin__free(R->acts);
    goblin__free(R->gx);
    goblin__free(R->gacc);
    goblin__free(R->whole);
    goblin__free(R->xmap);
    goblin__free(R->data_index);
}

static goblin_err check_data(goblin_trainer *t, const goblin_tensor *data, int32_t n_data,
                             int64_t *batch) {
    if (n_data != t->m.n_data)
        return terr(t, GOBLIN_EINVAL, "%d data tensors given, the model takes %d", (int)n_data,
                    (int)t->m.n_data);
    if (!data) return terr(t, GOBLIN_EINVAL, "data is NULL");
    int64_t B = -1;
    for (int32_t i = 0; i < n_data; i++) {
        goblin_tensor d;
        goblin_graph_node(t->m.g, goblin_graph_input_id(t->m.g, t->m.n_params + i), NULL, &d, NULL, NULL);
        const goblin_tensor *x = &data[i];
        if (x->dtype != d.dtype)
            return terr(t, GOBLIN_EDTYPE, "data %d has dtype %s, the model takes %s", (int)i,
                        goblin_dtype_name(x->dtype), goblin_dtype_name(d.dtype));
        bool ok = x->rank == d.rank && x->rank >= 1;
        for (int32_t k = 1; ok && k < d.rank; k++) ok = x->shape[k] == d.shape[k];
        char a[128], b[128];
        if (!ok)
            return terr(t, GOBLIN_ESHAPE, "data %d has shape %s, the model takes %s (any batch size)",
                        (int)i, goblin__shape_str(x->rank, x->shape, a, sizeof a),
                        goblin__shape_str(d.rank, d.shape, b, sizeof b));
        if (x->shape[0] < 1) return terr(t, GOBLIN_ESHAPE, "data %d has no rows", (int)i);
        if (B >= 0 && x->shape[0] != B)
            return terr(t, GOBLIN_ESHAPE, "data %d has %lld rows, data 0 has %lld: the batch sizes "
                        "must match", (int)i, (long long)x->shape[0], (long long)B);
        if (!x->data) return terr(t, GOBLIN_EINVAL, "data %d has no buffer", (int)i);
        B = x->shape[0];
    }
    *batch = B;
    return GOBLIN_OK;
}

static double clip_or_norm(goblin_trainer *t, goblin_tensor *grads) {
    int32_t np = t->m.n_params;
    void *ptrs[GOBLIN_GRAPH_JOB_MAX_IO];
    int64_t numels[GOBLIN_GRAPH_JOB_MAX_IO];
    if (t->p.clip_norm > 0 && np <= GOBLIN_GRAPH_JOB_MAX_IO) {
        for (int32_t i = 0; i < np; i++) {
            ptrs[i] = grads[i].data;
            numels[i] = tnumel(&grads[i]);
        }
        double total = 0;
        goblin_clip_grad_norm(t->pdt, np, ptrs, numels, t->p.clip_norm, 2.0, &total);
        return total;
    }
    double acc = 0;
    for (int32_t i = 0; i < np; i++) {
        int64_t n = tnumel(&grads[i]);
        double s = 0;
        if (t->pdt == GOBLIN_DTYPE_F32) {
            const float *g = grads[i].data;
            for (int64_t k = 0; k < n; k++) s += (double)g[k] * (double)g[k];
        } else {
            const double *g = grads[i].data;
            for (int64_t k = 0; k < n; k++) s += g[k] * g[k];
        }
        acc += s;
    }
    return sqrt(acc);
}

static double round_lr(const goblin_trainer *t) {
    double base = t->p.optimizer == GOBLIN_OPTIMIZER_SGD ? t->p.sgd.lr : t->p.adamw.lr;
    if (t->p.schedule.kind == GOBLIN_LR_CONSTANT) return base;
    goblin_lr_schedule s = t->p.schedule;
    if (!(s.base_lr > 0)) s.base_lr = base;
    return goblin_lr_at(&s, t->rounds);
}

/* The node's verification clock (goblin_node_stats.verify_ns), or -1 without a grid
 * or when the node cannot be asked. The round reports its difference: time the lab's
 * process spent verifying while the round ran (other jobs on the same node count too). */
static int64_t verify_clock(goblin_trainer *t) {
    goblin_node_stats st;
    memset(&st, 0, sizeof st);
    if (t->node) {
        goblin_node_stats_get(t->node, &st);
        return st.verify_ns;
    }
    if (t->client && goblin_client_stats(t->client, &st, NULL, 0, NULL) == GOBLIN_OK) return st.verify_ns;
    return -1;
}

goblin_err goblin_trainer_round(goblin_trainer *t, const goblin_tensor *data, int32_t n_data,
                                goblin_train_round_info *out) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    double t0 = now_s();
    int64_t v0 = verify_clock(t);
    int64_t B = 0;
    goblin_err e = check_data(t, data, n_data, &B);
    if (e) return e;
    if ((e = ensure_plan(t, B))) return e;
    goblin_node_stats st0;
    memset(&st0, 0, sizeof st0);
    tr_round R;
    memset(&R, 0, sizeof R);
    R.t = t;
    R.data = data;
    R.B = B;
    R.m = t->plan.micro;
    R.nm = t->plan.n_micro;
    const tr_model *m = &t->m;
    int32_t nn = m->g->n_nodes, np = m->n_params, S = t->plan.n_stages;
    goblin_tensor *grads = NULL;
    R.xmap = goblin__alloc(sizeof(int32_t) * (size_t)nn);
    R.data_index = goblin__alloc(sizeof(int32_t) * (size_t)nn);
    R.gacc = goblin__calloc((size_t)np + 1, sizeof(double *));
    R.whole = goblin__calloc((size_t)np + 1, sizeof(void *));
    if (!R.xmap || !R.data_index || !R.gacc || !R.whole) {
        e = terr(t, GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < nn; i++) R.xmap[i] = R.data_index[i] = -1;
    for (int32_t i = 0; i < m->n_data; i++) R.data_index[goblin_graph_input_id(m->g, np + i)] = i;
    for (int32_t s = 0; s < S - 1; s++)
        for (int32_t i = 0; i < t->plan.stages[s].n_out; i++) {
            int32_t id = t->plan.stages[s].out_nodes[i];
            goblin_dtype dt = m->g->nodes[id].dtype;
            if (m->nodes[id].needs_grad && dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) {
                e = terr(t, GOBLIN_ENOTSUP, "node %d (%s) crosses a stage boundary with dtype %s; "
                         "stage boundaries carry f32 or f64 gradients", (int)id,
                         goblin_op_name(m->g->nodes[id].op), goblin_dtype_name(dt));
                goto done;
            }
            R.xmap[id] = R.n_cross++;
        }
    if (R.n_cross > 0) {
        R.acts = goblin__calloc((size_t)(R.nm * R.n_cross), sizeof *R.acts);
        R.gx = goblin__calloc((size_t)(R.nm * R.n_cross), sizeof *R.gx);
        if (!R.acts || !R.gx) {
            e = terr(t, GOBLIN_ENOMEM, "out of memory");
            goto done;
        }
        for (int64_t c = 0; c < R.nm; c++)
            for (int32_t id = 0; id < nn; id++) {
                if (R.xmap[id] < 0) continue;
                const goblin__node *nd = &m->g->nodes[id];
                int64_t shp[GOBLIN_MAX_RANK];
                memcpy(shp, nd->shape, sizeof shp);
                shp[0] = mb_rows(&R, c);
                int64_t k = c * R.n_cross + R.xmap[id];
                if (alloc_like(&R.acts[k], nd->dtype, nd->rank, shp, false) ||
                    alloc_like(&R.gx[k], nd->dtype, nd->rank, shp, true)) {
                    e = terr(t, GOBLIN_ENOMEM, "out of memory");
                    goto done;
                }
            }
    }
    /* tasks this round */
    R.total = 0;
    for (int32_t s = 0; s < S; s++) {
        const tr_stage *st = &t->plan.stages[s];
        if (s == S - 1) R.total += R.nm * st->tiles;
        else R.total += R.nm * st->tiles * (stage_has_seeds(m, st) ? 2 : 1);
    }
    if (t->node) goblin_node_stats_get(t->node, &st0);
    for (int32_t s = 0; s < S - 1 && !e; s++) e = run_phase(&R, s, TR_TASK_FWD);
    if (!e) e = run_phase(&R, S - 1, TR_TASK_LAST);
    for (int32_t s = S - 2; s >= 0 && !e; s--)
        if (stage_has_seeds(m, &t->plan.stages[s])) e = run_phase(&R, s, TR_TASK_BWD);
    if (e) goto done;
    /* gradients in the parameters' dtype, clipping, the optimizer step */
    grads = goblin__calloc((size_t)np, sizeof *grads);
    if (!grads) {
        e = terr(t, GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < np; i++) {
        if (R.whole[i]) { /* the task's gradient as it is (see tr_round.whole) */
            grads[i] = t->params[i];
            goblin__contig_strides(grads[i].rank, grads[i].shape, grads[i].strides);
            grads[i].data = R.whole[i];
            R.whole[i] = NULL;
            continue;
        }
        /* no contribution at all: the loss does not depend on it (zero gradient) */
        if (alloc_like(&grads[i], t->pdt, t->params[i].rank, t->params[i].shape, !R.gacc[i])) {
            e = terr(t, GOBLIN_ENOMEM, "out of memory");
            goto done;
        }
        if (!R.gacc[i]) continue;
        int64_t n = tnumel(&grads[i]);
        if (t->pdt == GOBLIN_DTYPE_F32) {
            float *g = grads[i].data;
            for (int64_t k = 0; k < n; k++) g[k] = (float)R.gacc[i][k];
        } else {
            memcpy(grads[i].data, R.gacc[i], (size_t)n * sizeof(double));
        }
    }
    double gnorm = clip_or_norm(t, grads);
    double lr = round_lr(t);
    for (int32_t i = 0; i < np && !e; i++) {
        int64_t n = tnumel(&grads[i]);
        if (t->p.optimizer == GOBLIN_OPTIMIZER_SGD) {
            goblin_sgd_params o = t->p.sgd;
            o.lr = lr;
            e = goblin_sgd_step(&o, t->pdt, n, t->params[i].data, grads[i].data, &t->sgd[i]);
        } else {
            goblin_adamw_params o = t->p.adamw;
            o.lr = lr;
            e = goblin_adamw_step(&o, t->pdt, n, t->params[i].data, grads[i].data, &t->adam[i]);
        }
        if (e) e = terr(t, e, "optimizer step on parameter %d failed (learning rate %g)", (int)i, lr);
    }
    if (e) goto done;
    t->version++;
    if (out) {
        memset(out, 0, sizeof *out);
        out->round = t->rounds;
        out->loss = R.loss;
        out->grad_norm = gnorm;
        out->lr = lr;
        out->tasks = R.done;
        out->seconds = now_s() - t0;
        int64_t v1 = v0 >= 0 ? verify_clock(t) : -1;
        out->verify_seconds = v1 >= v0 && v0 >= 0 ? (double)(v1 - v0) * 1e-9 : 0.0;
    }
    tlog(t, GOBLIN_LOG_DEBUG, "round %lld: loss %.9g, grad norm %.6g, lr %g, %lld tasks",
         (long long)t->rounds, R.loss, gnorm, lr, (long long)R.done);
    t->rounds++;
done:
    for (int32_t i = 0; grads && i < np; i++) goblin__free(grads[i].data);
    goblin__free(grads);
    round_clear(&R);
    return e;
}

/* ---- parameters --------------------------------------------------------------------------- */

static goblin_err check_like(goblin_trainer *t, int32_t i, const goblin_tensor *x) {
    if (i < 0 || i >= t->m.n_params)
        return terr(t, GOBLIN_EINDEX, "parameter %d out of 0..%d", (int)i, (int)t->m.n_params - 1);
    if (!x || (!x->data && tnumel(x) > 0)) return terr(t, GOBLIN_EINVAL, "tensor has no buffer");
    const goblin_tensor *p = &t->params[i];
    if (x->dtype != p->dtype)
        return terr(t, GOBLIN_EDTYPE, "parameter %d has dtype %s, not %s", (int)i,
                    goblin_dtype_name(p->dtype), goblin_dtype_name(x->dtype));
    bool same = x->rank == p->rank;
    for (int32_t k = 0; same && k < p->rank; k++) same = x->shape[k] == p->shape[k];
    if (!same) return terr(t, GOBLIN_ESHAPE, "tensor does not have parameter %d's shape", (int)i);
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

/* ---- checkpoints ------------------------------------------------------------------------ */

/* Layout (little-endian):
 *   "GOBLTRN1" | u32 format 1 | u64 model hash | u32 n_params | u32 param dtype
 *   | u32 optimizer | sgd: f64 lr momentum dampening weight_decay, u8 nesterov maximize
 *   | adamw: f64 lr beta1 beta2 eps weight_decay, u8 amsgrad maximize
 *   | schedule: u32 kind, f64 base_lr eta_min warmup_start_factor, i64 warmup total
 *   | f64 clip_norm | i64 rounds
 *   | per parameter: u32 rank, i64 shape[rank], its elements
 *   | per parameter: SGD: u8 initialized, momentum buffer if initialized and momentum != 0;
 *                    AdamW: i64 step, exp_avg, exp_avg_sq, max_exp_avg_sq if amsgrad
 *   | u32 crc32 of everything before */

static const char CK_MAGIC[8] = {'G', 'O', 'B', 'L', 'T', 'R', 'N', '1'};


typedef struct ck_buf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} ck_buf;

static void ck_put(ck_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n) nc *= 2;
        uint8_t *np = goblin__alloc(nc);
        if (!np) {
            b->oom = true;
            return;
        }
        if (b->len) memcpy(np, b->p, b->len);
        goblin__free(b->p);
        b->p = np;
        b->cap = nc;
    }
    /* values are stored in the host's order; the format is little-endian and the
     * library only builds on little-endian hosts (static check below) */
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");

#define PUT(b, v)                          \
    do {                                   \
        __typeof__(v) v_ = (v);            \
        ck_put((b), &v_, sizeof v_);       \
    } while (0)

static void put_hyper(ck_buf *b, const goblin_trainer_params *p) {
    PUT(b, (uint32_t)p->optimizer);
    PUT(b, p->sgd.lr);
    PUT(b, p->sgd.momentum);
    PUT(b, p->sgd.dampening);
    PUT(b, p->sgd.weight_decay);
    PUT(b, (uint8_t)p->sgd.nesterov);
    PUT(b, (uint8_t)p->sgd.maximize);
    PUT(b, p->adamw.lr);
    PUT(b, p->adamw.beta1);
    PUT(b, p->adamw.beta2);
    PUT(b, p->adamw.eps);
    PUT(b, p->adamw.weight_decay);
    PUT(b, (uint8_t)p->adamw.amsgrad);
    PUT(b, (uint8_t)p->adamw.maximize);
    PUT(b, (uint32_t)p->schedule.kind);
    PUT(b, p->schedule.base_lr);
    PUT(b, p->schedule.eta_min);
    PUT(b, p->schedule.warmup_start_factor);
    PUT(b, p->schedule.warmup_steps);
    PUT(b, p->schedule.total_steps);
    PUT(b, p->clip_norm);
}

goblin_err goblin_trainer_save(goblin_trainer *t, const char *path) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    if (!path || !*path) return terr(t, GOBLIN_EINVAL, "no path");
    ck_buf b = {0};
    ck_put(&b, CK_MAGIC, sizeof CK_MAGIC);
    PUT(&b, (uint32_t)1);
    PUT(&b, t->model_hash);
    PUT(&b, (uint32_t)t->m.n_params);
    PUT(&b, (uint32_t)t->pdt);
    put_hyper(&b, &t->p);
    PUT(&b, t->rounds);
    size_t es = goblin_dtype_size(t->pdt);
    for (int32_t i = 0; i < t->m.n_params; i++) {
        const goblin_tensor *p = &t->params[i];
        PUT(&b, (uint32_t)p->rank);
        for (int32_t k = 0; k < p->rank; k++) PUT(&b, p->shape[k]);
        ck_put(&b, p->data, (size_t)tnumel(p) * es);
    }
    for (int32_t i = 0; i < t->m.n_params; i++) {
        size_t n = (size_t)tnumel(&t->params[i]) * es;
        if (t->sgd) {
            bool has = t->sgd[i].initialized && t->p.sgd.momentum != 0;
            PUT(&b, (uint8_t)t->sgd[i].initialized);
            if (has) ck_put(&b, t->sgd[i].momentum_buffer, n);
        } else {
            PUT(&b, t->adam[i].step);
            ck_put(&b, t->adam[i].exp_avg, n);
            ck_put(&b, t->adam[i].exp_avg_sq, n);
            if (t->p.adamw.amsgrad) ck_put(&b, t->adam[i].max_exp_avg_sq, n);
        }
    }
    PUT(&b, goblin__crc32(0, b.p, b.len));
    if (b.oom) {
        goblin__free(b.p);
        return terr(t, GOBLIN_ENOMEM, "out of memory");
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        goblin__free(b.p);
        return terr(t, GOBLIN_EINVAL, "path too long");
    }
    goblin_err e = GOBLIN_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        e = terr(t, GOBLIN_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    size_t off = 0;
    while (off < b.len) {
        ssize_t w = write(fd, b.p + off, b.len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            e = terr(t, GOBLIN_EIO, "writing %s: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)w;
    }
    if (!e && fsync(fd) != 0) e = terr(t, GOBLIN_EIO, "syncing %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !e) e = terr(t, GOBLIN_EIO, "closing %s: %s", tmp, strerror(errno));
    if (!e && rename(tmp, path) != 0)
        e = terr(t, GOBLIN_EIO, "renaming %s to %s: %s", tmp, path, strerror(errno));
    if (e) unlink(tmp);
out:
    goblin__free(b.p);
    return e;
}

typedef struct ck_rd {
    const uint8_t *p;
    size_t len, off;
    bool bad;
} ck_rd;

static void ck_get(ck_rd *r, void *dst, size_t n) {
    if (r->bad || r->len - r->off < n) {
        r->bad = true;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p + r->off, n);
    r->off += n;
}

#define GET(r, v) ck_get((r), &(v), sizeof(v))

goblin_err goblin_trainer_load(goblin_trainer *t, const char *path) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    if (!path) return terr(t, GOBLIN_EINVAL, "no path");
    FILE *f = fopen(path, "rb");
    if (!f) return terr(t, GOBLIN_EIO, "cannot open %s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    goblin_err e = GOBLIN_OK;
    for (;;) {
        if (len == cap) {
            size_t nc = cap ? cap * 2 : 65536;
            uint8_t *nb = goblin__alloc(nc);
            if (!nb) {
                e = terr(t, GOBLIN_ENOMEM, "out of memory");
                break;
            }
            if (len) memcpy(nb, buf, len);
            goblin__free(buf);
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) {
            if (ferror(f)) e = terr(t, GOBLIN_EIO, "reading %s failed", path);
            break;
        }
    }
    fclose(f);
    goblin_trainer_params hp;
    uint8_t **pdata = NULL;
    goblin_sgd_state *sgd = NULL;
    goblin_adamw_state *adam = NULL;
    int32_t np = t->m.n_params;
    int64_t rounds = 0;
    if (e) goto out;
    if (len < sizeof CK_MAGIC + 8 || memcmp(buf, CK_MAGIC, sizeof CK_MAGIC) != 0) {
        e = terr(t, GOBLIN_EFORMAT, "%s is not a goblin trainer checkpoint", path);
        goto out;
    }
    uint32_t crc;
    memcpy(&crc, buf + len - 4, 4);
    if (crc != goblin__crc32(0, buf, len - 4)) {
        e = terr(t, GOBLIN_EFORMAT, "%s is corrupt (checksum mismatch)", path);
        goto out;
    }
    ck_rd r = {buf, len - 4, sizeof CK_MAGIC, false};
    uint32_t fmt, n_params, pdt, opt;
    uint64_t hash;
    GET(&r, fmt);
    GET(&r, hash);
    GET(&r, n_params);
    GET(&r, pdt);
    if (r.bad || fmt != 1) {
        e = terr(t, GOBLIN_EFORMAT, "%s: unknown checkpoint format %u", path, fmt);
        goto out;
    }
    if (hash != t->model_hash || n_params != (uint32_t)np || pdt != (uint32_t)t->pdt) {
        e = terr(t, GOBLIN_EINVAL, "%s is a checkpoint of another model", path);
        goto out;
    }
    memset(&hp, 0, sizeof hp);
    uint8_t b1, b2, b3, b4;
    uint32_t sk;
    GET(&r, opt);
    GET(&r, hp.sgd.lr);
    GET(&r, hp.sgd.momentum);
    GET(&r, hp.sgd.dampening);
    GET(&r, hp.sgd.weight_decay);
    GET(&r, b1);
    GET(&r, b2);
    GET(&r, hp.adamw.lr);
    GET(&r, hp.adamw.beta1);
    GET(&r, hp.adamw.beta2);
    GET(&r, hp.adamw.eps);
    GET(&r, hp.adamw.weight_decay);
    GET(&r, b3);
    GET(&r, b4);
    GET(&r, sk);
    GET(&r, hp.schedule.base_lr);
    GET(&r, hp.schedule.eta_min);
    GET(&r, hp.schedule.warmup_start_factor);
    GET(&r, hp.schedule.warmup_steps);
    GET(&r, hp.schedule.total_steps);
    GET(&r, hp.clip_norm);
    GET(&r, rounds);
    if (r.bad || rounds < 0) {
        e = terr(t, GOBLIN_EFORMAT, "%s: truncated header", path);
        goto out;
    }
    const goblin_trainer_params *cp = &t->p;
    if (opt != (uint32_t)cp->optimizer) {
        e = terr(t, GOBLIN_EINVAL, "%s was written by another optimizer (%s, this trainer uses %s)",
                 path, opt == GOBLIN_OPTIMIZER_SGD ? "SGD" : opt == GOBLIN_OPTIMIZER_ADAMW ? "AdamW" : "unknown",
                 cp->optimizer == GOBLIN_OPTIMIZER_SGD ? "SGD" : "AdamW");
        goto out;
    }
#define SAME(a, b) (memcmp(&(a), &(b), sizeof(a)) == 0)
    const char *diff = NULL;
    if (cp->optimizer == GOBLIN_OPTIMIZER_SGD) {
        if (!SAME(hp.sgd.lr, cp->sgd.lr)) diff = "sgd.lr";
        else if (!SAME(hp.sgd.momentum, cp->sgd.momentum)) diff = "sgd.momentum";
        else if (!SAME(hp.sgd.dampening, cp->sgd.dampening)) diff = "sgd.dampening";
        else if (!SAME(hp.sgd.weight_decay, cp->sgd.weight_decay)) diff = "sgd.weight_decay";
        else if (b1 != (uint8_t)cp->sgd.nesterov) diff = "sgd.nesterov";
        else if (b2 != (uint8_t)cp->sgd.maximize) diff = "sgd.maximize";
    } else {
        if (!SAME(hp.adamw.lr, cp->adamw.lr)) diff = "adamw.lr";
        else if (!SAME(hp.adamw.beta1, cp->adamw.beta1)) diff = "adamw.beta1";
        else if (!SAME(hp.adamw.beta2, cp->adamw.beta2)) diff = "adamw.beta2";
        else if (!SAME(hp.adamw.eps, cp->adamw.eps)) diff = "adamw.eps";
        else if (!SAME(hp.adamw.weight_decay, cp->adamw.weight_decay)) diff = "adamw.weight_decay";
        else if (b3 != (uint8_t)cp->adamw.amsgrad) diff = "adamw.amsgrad";
        else if (b4 != (uint8_t)cp->adamw.maximize) diff = "adamw.maximize";
    }
    if (!diff && sk != (uint32_t)cp->schedule.kind) diff = "schedule.kind";
    if (!diff && cp->schedule.kind != GOBLIN_LR_CONSTANT &&
        !(SAME(hp.schedule.base_lr, cp->schedule.base_lr) && SAME(hp.schedule.eta_min, cp->schedule.eta_min) &&
          SAME(hp.schedule.warmup_start_factor, cp->schedule.warmup_start_factor) &&
          hp.schedule.warmup_steps == cp->schedule.warmup_steps &&
          hp.schedule.total_steps == cp->schedule.total_steps))
        diff = "schedule";
    if (!diff && !SAME(hp.clip_norm, cp->clip_norm)) diff = "clip_norm";
#undef SAME
    if (diff) {
        e = terr(t, GOBLIN_EINVAL, "%s was written with another optimizer setting (%s differs)", path, diff);
        goto out;
    }
    size_t es = goblin_dtype_size(t->pdt);
    pdata = goblin__calloc((size_t)np, sizeof *pdata);
    if (!pdata) {
        e = terr(t, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < np; i++) {
        const goblin_tensor *p = &t->params[i];
        uint32_t rank;
        GET(&r, rank);
        bool same = !r.bad && rank == (uint32_t)p->rank;
        for (int32_t k = 0; same && k < p->rank; k++) {
            int64_t d;
            GET(&r, d);
            same = !r.bad && d == p->shape[k];
        }
        if (r.bad) break;
        if (!same) {
            e = terr(t, GOBLIN_EINVAL, "%s: parameter %d has another shape (another model)", path, (int)i);
            goto out;
        }
        size_t n = (size_t)tnumel(p) * es;
        if (r.len - r.off < n) {
            r.bad = true;
            break;
        }
        pdata[i] = (uint8_t *)r.p + r.off;
        r.off += n;
    }
    if (!r.bad && state_new(t, &sgd, &adam)) {
        e = terr(t, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < np && !r.bad; i++) {
        size_t n = (size_t)tnumel(&t->params[i]) * es;
        if (sgd) {
            uint8_t init;
            GET(&r, init);
            if (init > 1) r.bad = true;
            sgd[i].initialized = init;
            if (init && t->p.sgd.momentum != 0) ck_get(&r, sgd[i].momentum_buffer, n);
        } else {
            GET(&r, adam[i].step);
            if (adam[i].step < 0) r.bad = true;
            ck_get(&r, adam[i].exp_avg, n);
            ck_get(&r, adam[i].exp_avg_sq, n);
            if (t->p.adamw.amsgrad) ck_get(&r, adam[i].max_exp_avg_sq, n);
        }
    }
    if (r.bad || r.off != r.len) {
        e = terr(t, GOBLIN_EFORMAT, "%s: truncated or malformed body", path);
        goto out;
    }
    /* commit */
    for (int32_t i = 0; i < np; i++)
        memcpy(t->params[i].data, pdata[i], (size_t)tnumel(&t->params[i]) * es);
    {
        goblin_sgd_state *os = t->sgd;
        goblin_adamw_state *oa = t->adam;
        t->sgd = sgd;
        t->adam = adam;
        sgd = os;
        adam = oa;
    }
    t->rounds = rounds;
    t->version++;
out:
    if (sgd || adam) { /* free whichever state is not in use */
        goblin_sgd_state *ks = t->sgd;
        goblin_adamw_state *ka = t->adam;
        t->sgd = sgd;
        t->adam = adam;
        state_free(t);
        t->sgd = ks;
        t->adam = ka;
    }
    goblin__free(pdata);
    goblin__free(buf);
    return e;
}
