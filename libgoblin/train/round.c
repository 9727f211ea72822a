/* libgoblin/train/round.c - one round of training: every (stage, micro-batch, tile) task as
 * a verified graph job on the grid, activations and their gradients passed between
 * stages, the gradients summed over micro-batches in micro-batch order (a fixed order),
 * clipping and the optimizer step. docs/training.md has the gradient weighting. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "train_impl.h"

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

/* ---- task execution ------------------------------------------------------------------ */

typedef struct tr_run {
    tr_task_graph *tg;
    goblin_graph *dg; /* tg's graph with this task's dropout masks, or NULL (no dropout) */
    int32_t stage, tile;
    int64_t mb, rows;
    goblin_tensor *in, *out;
    goblin_split *split;
    goblin_combine *comb;
    uint64_t *cids;
    bool *own; /* out[i].data is a temporary */
    goblin_grid_job *job;
    int state; /* 0 not submitted, 1 on the grid, 2 done */
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
    goblin_graph_free(r->dg);
    memset(r, 0, sizeof *r);
}

/* A task still on the grid when its round fails: canceled and released unread. */
static void run_abandon(tr_run *r) {
    goblin_grid_job_free(r->job);
    r->job = NULL;
    r->state = 0;
}

static goblin_err run_submit(goblin_trainer *t, tr_run *r) {
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.job.min_tasks = 1;
    jp.chunk_rows = r->rows;
    jp.job.task_memory_bytes = t->plan.budget; /* the budget the plan's tasks were measured against */
    jp.split = r->split;
    jp.combine = r->comb;
    jp.cache_ids = r->cids;
    jp.verify = t->p.verify;
    jp.min_replication = t->p.min_replication;
    jp.checked_max_share = t->p.checked_max_share;
    goblin_err e;
    int32_t ni = r->tg->n_in, no = r->tg->n_out;
    const goblin_graph *g = r->dg ? r->dg : r->tg->g;
    if (!t->grid) {
        e = goblin_graph_eval(g, NULL, r->in, ni, r->out, no);
        if (e) return goblin__train_err(t, e, "evaluating stage %d task (micro-batch %lld) failed: %s",
                                        (int)r->stage, (long long)r->mb, goblin_strerror(e));
        r->state = 2;
        return GOBLIN_OK;
    }
    e = goblin_grid_submit_graph(t->grid, g, r->in, ni, r->out, no, &jp, &r->job);
    if (e) {
        char why[400];
        goblin_grid_error(t->grid, why, sizeof why);
        return goblin__train_err(t, e, "submitting stage %d task (micro-batch %lld) failed: %s", (int)r->stage,
                                 (long long)r->mb, why);
    }
    r->state = 1;
    return GOBLIN_OK;
}

static goblin_err run_wait(goblin_trainer *t, tr_run *r) {
    if (r->state != 1) return GOBLIN_OK;
    goblin_err e = goblin_grid_job_wait(r->job, -1);
    if (e) goblin__train_err(t, e, "stage %d task (micro-batch %lld): %s", (int)r->stage, (long long)r->mb,
                             goblin_grid_job_error(r->job));
    goblin_grid_job_free(r->job);
    r->job = NULL;
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
    double **bn_m, **bn_v; /* per batch-norm: [nm * channels] micro-batch means, variances */
} tr_round;

static int64_t mb_rows(const tr_round *R, int64_t c) {
    int64_t r = R->B - c * R->m;
    return r < R->m ? r : R->m;
}

static goblin_err get_graph(goblin_trainer *t, int32_t s, tr_task_kind kind, int64_t rows,
                            int32_t tile, tr_task_graph **out) {
    char msg[512];
    goblin_err e = goblin__train_stage_graph(&t->m, &t->plan, s, kind, rows, tile, out, msg, sizeof msg);
    return e ? goblin__train_err(t, e, "%s", msg) : GOBLIN_OK;
}

static uint64_t cache_id(const goblin_trainer *t, int32_t p, int32_t tile) {
    uint64_t h = goblin__train_mix64(t->nonce ^ goblin__train_mix64(t->version ^ goblin__train_mix64((uint64_t)p * 1000003u + (uint64_t)tile)));
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
    char msg[512];
    if ((e = goblin__train_dropout_graph(r->tg, t->rounds, c * R->m, &r->dg, msg, sizeof msg)))
        return goblin__train_err(t, e, "stage %d task (micro-batch %lld): %s", (int)s, (long long)c, msg);
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
        return goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
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
        if (goblin__train_alloc_like(&r->out[i], d.dtype, d.rank, d.shape, false))
            return goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
        r->own[i] = true;
        r->comb[i] = io.kind == TR_IO_LOSS || io.kind == TR_IO_STAT ? GOBLIN_COMBINE_MEAN
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
                R->gacc[io.ref] = goblin__calloc((size_t)goblin_tensor_numel(full) + 1, sizeof(double));
                if (!R->gacc[io.ref]) return goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
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
        } else if (io.kind == TR_IO_STAT) {
            int32_t k = io.ref / 2;
            int64_t C = t->m.bn_ch[k];
            double *dst = (io.ref % 2 ? R->bn_v[k] : R->bn_m[k]) + r->mb * C;
            for (int64_t e = 0; e < C; e++) dst[e] = get_f(o->data, o->dtype, e);
        } else if (io.kind == TR_IO_XGRAD) {
            goblin_tensor *gv = &R->gx[r->mb * R->n_cross + R->xmap[io.ref]];
            int64_t n = goblin_tensor_numel(o);
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
    if (!runs) return goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
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
        if (runs[i].tg) run_abandon(&runs[i]);
        run_clear(&runs[i]);
    }
    goblin__free(runs);
    return e;
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
    for (int32_t k = 0; k < R->t->m.n_bn; k++) {
        if (R->bn_m) goblin__free(R->bn_m[k]);
        if (R->bn_v) goblin__free(R->bn_v[k]);
    }
    goblin__free(R->bn_m);
    goblin__free(R->bn_v);
}

/* The whole batch's statistics from the micro-batches' (Chan et al.): with weights
 * w_c = n_c / B, mean = sum w_c m_c and var = sum w_c (v_c + (m_c - mean)^2), in double. */
static void bn_combine(goblin_trainer *t, const tr_round *R) {
    for (int32_t k = 0; k < t->m.n_bn; k++) {
        int64_t C = t->m.bn_ch[k];
        for (int64_t ch = 0; ch < C; ch++) {
            double mean = 0, var = 0;
            for (int64_t c = 0; c < R->nm; c++) mean += (double)mb_rows(R, c) / (double)R->B * R->bn_m[k][c * C + ch];
            for (int64_t c = 0; c < R->nm; c++) {
                double d = R->bn_m[k][c * C + ch] - mean;
                var += (double)mb_rows(R, c) / (double)R->B * (R->bn_v[k][c * C + ch] + d * d);
            }
            t->bn_mean_next[k][ch] = mean;
            t->bn_var_next[k][ch] = var;
        }
    }
}

static goblin_err check_data(goblin_trainer *t, const goblin_tensor *data, int32_t n_data,
                             int64_t *batch) {
    if (n_data != t->m.n_data)
        return goblin__train_err(t, GOBLIN_EINVAL, "%d data tensors given, the model takes %d", (int)n_data,
                    (int)t->m.n_data);
    if (!data) return goblin__train_err(t, GOBLIN_EINVAL, "data is NULL");
    int64_t B = -1;
    for (int32_t i = 0; i < n_data; i++) {
        goblin_tensor d;
        goblin_graph_node(t->m.g, goblin_graph_input_id(t->m.g, t->m.n_params + i), NULL, &d, NULL, NULL);
        const goblin_tensor *x = &data[i];
        if (x->dtype != d.dtype)
            return goblin__train_err(t, GOBLIN_EDTYPE, "data %d has dtype %s, the model takes %s", (int)i,
                        goblin_dtype_name(x->dtype), goblin_dtype_name(d.dtype));
        bool ok = x->rank == d.rank && x->rank >= 1;
        for (int32_t k = 1; ok && k < d.rank; k++) ok = x->shape[k] == d.shape[k];
        char a[128], b[128];
        if (!ok)
            return goblin__train_err(t, GOBLIN_ESHAPE, "data %d has shape %s, the model takes %s (any batch size)",
                        (int)i, goblin__shape_str(x->rank, x->shape, a, sizeof a),
                        goblin__shape_str(d.rank, d.shape, b, sizeof b));
        if (x->shape[0] < 1) return goblin__train_err(t, GOBLIN_ESHAPE, "data %d has no rows", (int)i);
        if (B >= 0 && x->shape[0] != B)
            return goblin__train_err(t, GOBLIN_ESHAPE, "data %d has %lld rows, data 0 has %lld: the batch sizes "
                        "must match", (int)i, (long long)x->shape[0], (long long)B);
        if (!x->data) return goblin__train_err(t, GOBLIN_EINVAL, "data %d has no buffer", (int)i);
        B = x->shape[0];
    }
    *batch = B;
    return GOBLIN_OK;
}

/* The global 2-norm of @p grads (summed in double). */
static double grad_norm(const goblin_trainer *t, const goblin_tensor *grads) {
    double acc = 0;
    for (int32_t i = 0; i < t->m.n_params; i++) {
        int64_t n = goblin_tensor_numel(&grads[i]);
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

/* Clip @p grads to clip_norm (optim.h's rule, as torch's clip_grad_norm_). */
static void clip(goblin_trainer *t, goblin_tensor *grads) {
    int32_t np = t->m.n_params;
    void *ptrs[GOBLIN_GRAPH_JOB_MAX_IO];
    int64_t numels[GOBLIN_GRAPH_JOB_MAX_IO];
    if (np > GOBLIN_GRAPH_JOB_MAX_IO) return;
    for (int32_t i = 0; i < np; i++) {
        ptrs[i] = grads[i].data;
        numels[i] = goblin_tensor_numel(&grads[i]);
    }
    double total = 0;
    goblin_clip_grad_norm(t->pdt, np, ptrs, numels, t->p.clip_norm, 2.0, &total);
}

static void free_grads(const goblin_trainer *t, goblin_tensor *grads) {
    for (int32_t i = 0; grads && i < t->m.n_params; i++) goblin__free(grads[i].data);
    goblin__free(grads);
}

/* Do two computations of a round agree (within rounding: the grid and this thread may
 * sum in other orders)? */
static bool same_round(const goblin_trainer *t, double l1, const goblin_tensor *g1, double l2,
                       const goblin_tensor *g2) {
    double tol = t->pdt == GOBLIN_DTYPE_F32 ? 1e-4 : 1e-9;
    if (!(fabs(l1 - l2) <= tol * (1 + fabs(l2)))) return false;
    for (int32_t i = 0; i < t->m.n_params; i++) {
        int64_t n = goblin_tensor_numel(&g1[i]);
        for (int64_t k = 0; k < n; k++) {
            double a = get_f(g1[i].data, t->pdt, k), b = get_f(g2[i].data, t->pdt, k);
            if (!(fabs(a - b) <= tol * (1 + fabs(b)))) return false;
        }
    }
    return true;
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
    if (t->grid && goblin_grid_stats(t->grid, &st, NULL, 0, NULL) == GOBLIN_OK) return st.verify_ns;
    return -1;
}

/* The round's loss and gradients (in the parameters' dtype; *grads_out owned, free with
 * free_grads), its tasks on the grid or, with @p local, evaluated in this thread. */
static goblin_err round_grads(goblin_trainer *t, const goblin_tensor *data, int64_t B, bool local,
                              double *loss_out, int64_t *done_out, goblin_tensor **grads_out) {
    goblin_grid *grid = t->grid;
    if (local) t->grid = NULL; /* run_submit evaluates here without a grid */
    goblin_err e = GOBLIN_OK;
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
        e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    if (m->n_bn) {
        R.bn_m = goblin__calloc((size_t)m->n_bn, sizeof *R.bn_m);
        R.bn_v = goblin__calloc((size_t)m->n_bn, sizeof *R.bn_v);
        bool ok = R.bn_m && R.bn_v;
        for (int32_t k = 0; ok && k < m->n_bn; k++) {
            R.bn_m[k] = goblin__calloc((size_t)(R.nm * m->bn_ch[k]), sizeof(double));
            R.bn_v[k] = goblin__calloc((size_t)(R.nm * m->bn_ch[k]), sizeof(double));
            ok = R.bn_m[k] && R.bn_v[k];
        }
        if (!ok) {
            e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
            goto done;
        }
    }
    for (int32_t i = 0; i < nn; i++) R.xmap[i] = R.data_index[i] = -1;
    for (int32_t i = 0; i < m->n_data; i++) R.data_index[goblin_graph_input_id(m->g, np + i)] = i;
    for (int32_t s = 0; s < S - 1; s++)
        for (int32_t i = 0; i < t->plan.stages[s].n_out; i++) {
            int32_t id = t->plan.stages[s].out_nodes[i];
            goblin_dtype dt = m->g->nodes[id].dtype;
            if (m->nodes[id].needs_grad && dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) {
                e = goblin__train_err(t, GOBLIN_ENOTSUP, "node %d (%s) crosses a stage boundary with dtype %s; "
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
            e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
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
                if (goblin__train_alloc_like(&R.acts[k], nd->dtype, nd->rank, shp, false) ||
                    goblin__train_alloc_like(&R.gx[k], nd->dtype, nd->rank, shp, true)) {
                    e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
                    goto done;
                }
            }
    }
    /* tasks this round */
    R.total = 0;
    for (int32_t s = 0; s < S; s++) {
        const tr_stage *st = &t->plan.stages[s];
        if (s == S - 1) R.total += R.nm * st->tiles;
        else R.total += R.nm * st->tiles * (goblin__train_stage_has_seeds(m, st) ? 2 : 1);
    }
    for (int32_t s = 0; s < S - 1 && !e; s++) e = run_phase(&R, s, TR_TASK_FWD);
    if (!e) e = run_phase(&R, S - 1, TR_TASK_LAST);
    for (int32_t s = S - 2; s >= 0 && !e; s--)
        if (goblin__train_stage_has_seeds(m, &t->plan.stages[s])) e = run_phase(&R, s, TR_TASK_BWD);
    if (e) goto done;
    /* gradients in the parameters' dtype, clipping, the optimizer step */
    grads = goblin__calloc((size_t)np, sizeof *grads);
    if (!grads) {
        e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
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
        if (goblin__train_alloc_like(&grads[i], t->pdt, t->params[i].rank, t->params[i].shape, !R.gacc[i])) {
            e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
            goto done;
        }
        if (!R.gacc[i]) continue;
        int64_t n = goblin_tensor_numel(&grads[i]);
        if (t->pdt == GOBLIN_DTYPE_F32) {
            float *g = grads[i].data;
            for (int64_t k = 0; k < n; k++) g[k] = (float)R.gacc[i][k];
        } else {
            memcpy(grads[i].data, R.gacc[i], (size_t)n * sizeof(double));
        }
    }
    bn_combine(t, &R);
    *loss_out = R.loss;
    *done_out = R.done;
    *grads_out = grads;
    grads = NULL;
done:
    free_grads(t, grads);
    round_clear(&R);
    t->grid = grid;
    return e;
}

goblin_err goblin_trainer_round(goblin_trainer *t, const goblin_tensor *data, int32_t n_data,
                                goblin_train_round_info *out) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    double t0 = goblin__train_now_s();
    int64_t v0 = verify_clock(t);
    int64_t B = 0;
    goblin_err e = check_data(t, data, n_data, &B);
    if (e) return e;
    if ((e = goblin__train_ensure_plan(t, B))) return e;
    int32_t np = t->m.n_params;
    double loss = 0;
    int64_t done = 0;
    goblin_tensor *grads = NULL;
    if ((e = round_grads(t, data, B, false, &loss, &done, &grads))) return e;
    double gnorm = grad_norm(t, grads);
    bool rechecked = false, changed = false;
    char why[240];
    const char *bad = goblin__train_implausible(t, loss, gnorm, goblin__train_grads_finite(t, grads),
                                                why, sizeof why);
    if (bad && t->grid) {
        /* Replicas that agree cannot make this right: compute the round again here. */
        goblin__train_log(t, GOBLIN_LOG_WARN, "round %lld: %s; computing it again on this machine "
                          "before the step", (long long)t->rounds, bad);
        double l2 = 0;
        int64_t d2 = 0;
        goblin_tensor *g2 = NULL;
        if ((e = round_grads(t, data, B, true, &l2, &d2, &g2))) {
            free_grads(t, grads);
            return e;
        }
        rechecked = true;
        changed = !same_round(t, loss, grads, l2, g2);
        if (changed)
            goblin__train_log(t, GOBLIN_LOG_WARN, "round %lld: the grid's result was wrong (loss %.9g, "
                              "here %.9g); the step uses this machine's", (long long)t->rounds, loss, l2);
        free_grads(t, grads);
        grads = g2;
        loss = l2;
        gnorm = grad_norm(t, grads);
        bad = goblin__train_implausible(t, loss, gnorm, goblin__train_grads_finite(t, grads), why,
                                        sizeof why);
    }
    /* A jump that holds when recomputed is the model's own: taken. A loss or gradient that
     * is not finite, or a loss that cannot be negative and is, is not applied. */
    if (bad && (!isfinite(loss) || !goblin__train_grads_finite(t, grads) ||
                (loss < 0 && t->loss_nonneg))) {
        e = goblin__train_err(t, GOBLIN_ERANGE, "round %lld: %s%s; the parameters are unchanged "
                              "(a smaller learning rate, or clip_norm, may help)", (long long)t->rounds,
                              bad, t->grid ? ", also when computed again on this machine" : "");
        free_grads(t, grads);
        return e;
    }
    if (t->p.clip_norm > 0) clip(t, grads);
    double lr = round_lr(t);
    for (int32_t i = 0; i < np && !e; i++) {
        int64_t n = goblin_tensor_numel(&grads[i]);
        if (t->p.optimizer == GOBLIN_OPTIMIZER_SGD) {
            goblin_sgd_params o = t->p.sgd;
            o.lr = lr;
            e = goblin_sgd_step(&o, t->pdt, n, t->params[i].data, grads[i].data, &t->sgd[i]);
        } else {
            goblin_adamw_params o = t->p.adamw;
            o.lr = lr;
            e = goblin_adamw_step(&o, t->pdt, n, t->params[i].data, grads[i].data, &t->adam[i]);
        }
        if (e) e = goblin__train_err(t, e, "optimizer step on parameter %d failed (learning rate %g)", (int)i, lr);
    }
    if (e) goto done;
    t->version++;
    for (int32_t k = 0; k < t->m.n_bn; k++) { /* the applied round's statistics */
        double *a = t->bn_mean[k], *b = t->bn_var[k];
        t->bn_mean[k] = t->bn_mean_next[k];
        t->bn_var[k] = t->bn_var_next[k];
        t->bn_mean_next[k] = a;
        t->bn_var_next[k] = b;
    }
    t->bn_rows = B;
    if (out) {
        memset(out, 0, sizeof *out);
        out->round = t->rounds;
        out->loss = loss;
        out->grad_norm = gnorm;
        out->lr = lr;
        out->tasks = done;
        out->seconds = goblin__train_now_s() - t0;
        int64_t v1 = v0 >= 0 ? verify_clock(t) : -1;
        out->verify_seconds = v1 >= v0 && v0 >= 0 ? (double)(v1 - v0) * 1e-9 : 0.0;
        out->rechecked = rechecked;
        out->recheck_changed = changed;
    }
    goblin__train_note_norm(t, gnorm);
    goblin__train_log(t, GOBLIN_LOG_DEBUG, "round %lld: loss %.9g, grad norm %.6g, lr %g, %lld tasks",
         (long long)t->rounds, loss, gnorm, lr, (long long)done);
    t->rounds++;
done:
    free_grads(t, grads);
    return e;
}

int32_t goblin_trainer_batch_norm_count(const goblin_trainer *t) { return t ? t->m.n_bn : 0; }

goblin_err goblin_trainer_batch_norm_stats(const goblin_trainer *t, int32_t k, int32_t *node, int64_t *channels,
                                           int64_t *count, double *mean, double *var) {
    if (!t) return GOBLIN_EINVAL;
    if (k < 0 || k >= t->m.n_bn) return GOBLIN_EINDEX;
    if (node) *node = t->m.bn_ids[k];
    if (channels) *channels = t->m.bn_ch[k];
    if (count) *count = t->bn_rows * t->m.bn_per[k];
    int64_t C = t->m.bn_ch[k];
    if (mean) memcpy(mean, t->bn_mean[k], sizeof(double) * (size_t)C);
    if (var) memcpy(var, t->bn_var[k], sizeof(double) * (size_t)C);
    return GOBLIN_OK;
}
