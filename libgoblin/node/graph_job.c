/* libgoblin/node/graph_job.c - graph jobs: the caller's tensors checked, large constants
 * hoisted into cached inputs (hoist.c), the batch cut into chunks, the chunk graphs
 * (variants) built and serialized, and the job submitted. */
#include "base/names.h"
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "core/node.h"
#include "graph/graph_impl.h"
#include "graph/rebatch.h"

/* ---- parameters, freeing -------------------------------------------------------- */

void goblin_graph_job_params_default(goblin_graph_job_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    goblin_job_params_default(&p->job);
    p->verify = GOBLIN_VERIFY_CHECKED;
    p->min_replication = 0.25;
    p->trust_halflife = 20.0;
    p->checked_max_share = 0.25;
}

void goblin__node_gjob_free(gjob *G) {
    if (!G) return;
    for (int32_t k = 0; k < 2; k++) {
        goblin_graph_free(G->v[k].g);
        goblin_buffer_free(G->v[k].buf);
        goblin__free(G->v[k].oshape);
        goblin__free(G->v[k].oop);
        goblin__free(G->v[k].ok);
        goblin__node_checked_free(&G->v[k]);
    }
    if (G->packed)
        for (int32_t i = 0; i < G->n_in; i++) goblin__free(G->packed[i]);
    goblin__free(G->packed);
    goblin__free(G->in);
    goblin__free(G->out);
    goblin__free(G->batched);
    goblin__free(G->cid);
    goblin__free(G->comb);
    goblin__hoist_release(G->hoist);
    goblin_graph_free(G->spot_g);
    goblin__batch_axes_clear(G->ax);
    goblin__free(G->ax);
    goblin__free(G);
}

/* ---- chunk graphs: variants and their serialization ----------------------------- */

static const char *const g_combine_names[GOBLIN_COMBINE_COUNT] = {
    [GOBLIN_COMBINE_AUTO] = "auto", [GOBLIN_COMBINE_CONCAT] = "concat", [GOBLIN_COMBINE_SUM] = "sum",
    [GOBLIN_COMBINE_MEAN] = "mean", [GOBLIN_COMBINE_MAX] = "max",       [GOBLIN_COMBINE_MIN] = "min",
};

const char *goblin_combine_name(goblin_combine c) {
    return (unsigned)c < GOBLIN_COMBINE_COUNT ? g_combine_names[c] : NULL;
}

goblin_err goblin_combine_from_name(const char *name, goblin_combine *out) {
    int i = goblin__name_index(g_combine_names, GOBLIN_COMBINE_COUNT, name);
    if (i < 0 || !out) return GOBLIN_EINVAL;
    *out = (goblin_combine)i;
    return GOBLIN_OK;
}

static const char *combine_name(goblin_combine c) {
    const char *n = goblin_combine_name(c);
    return n ? n : "invalid";
}

/* Do @p a and @p b serialize to the same bytes? (Every field goblin_graph_serialize
 * writes, compared the same way; far cheaper than serializing, which checksums.) */
static bool same_graph(const goblin_graph *a, const goblin_graph *b) {
    if (a->n_nodes != b->n_nodes || a->n_outputs != b->n_outputs) return false;
    for (int32_t o = 0; o < a->n_outputs; o++)
        if (a->output_ids[o] != b->output_ids[o]) return false;
    for (int32_t i = 0; i < a->n_nodes; i++)
        if (!goblin__same_node(&a->nodes[i], &b->nodes[i])) return false;
    return true;
}

/* Serialize chunk graph @p g into a new buffer, reusing the bytes of an earlier job's
 * identical chunk graph (a model run batch after batch: the checksum over its constants
 * costs more than the rest of the planning), and keeping these for later jobs. */
static goblin_err serialize_chunk(goblin_node *n, goblin_graph *g, uint8_t **buf, size_t *len) {
    if (!n) return goblin_graph_serialize(g, buf, len);
    pthread_mutex_lock(&n->ser_mu);
    for (int32_t k = 0; k < 2; k++) {
        if (n->ser[k].g && same_graph(n->ser[k].g, g)) {
            uint8_t *cp = goblin__alloc(n->ser[k].len);
            if (cp) {
                memcpy(cp, n->ser[k].buf, n->ser[k].len);
                n->ser[k].last_use = ++n->ser_clock;
                *buf = cp;
                *len = n->ser[k].len;
            }
            pthread_mutex_unlock(&n->ser_mu);
            return cp ? GOBLIN_OK : GOBLIN_ENOMEM;
        }
    }
    pthread_mutex_unlock(&n->ser_mu);
    goblin_err e = goblin_graph_serialize(g, buf, len);
    if (e) return e;
    /* Keep a copy of the graph and of its bytes: worth it only for graphs that are slow
     * to serialize, i.e. that carry constants; bounded, as the node keeps them after the job. */
    if (g->const_bytes < ((int64_t)1 << 16) || *len > ((size_t)64 << 20)) return GOBLIN_OK;
    /* A copy: the graph re-instantiated at its own batch size (the default split rule). */
    goblin_graph *keep = NULL;
    int64_t B = 0;
    if (goblin__batch_inputs(g, NULL, NULL, &B, NULL, 0) != GOBLIN_OK ||
        goblin__graph_rebatch(g, NULL, B, &keep, NULL, 0) != GOBLIN_OK)
        return GOBLIN_OK;
    if (!same_graph(keep, g)) {
        goblin_graph_free(keep);
        return GOBLIN_OK;
    }
    uint8_t *kb = goblin__alloc(*len);
    if (!kb) {
        goblin_graph_free(keep);
        return GOBLIN_OK;
    }
    memcpy(kb, *buf, *len);
    pthread_mutex_lock(&n->ser_mu);
    int32_t v = n->ser[0].last_use <= n->ser[1].last_use ? 0 : 1;
    goblin_graph_free(n->ser[v].g);
    goblin_buffer_free(n->ser[v].buf);
    n->ser[v].g = keep;
    n->ser[v].buf = kb;
    n->ser[v].len = *len;
    n->ser[v].last_use = ++n->ser_clock;
    pthread_mutex_unlock(&n->ser_mu);
    return GOBLIN_OK;
}

/* Build chunk graph @p v for @p rows rows. */
static goblin_err make_variant(goblin_node *n, gjob *G, const goblin_graph *g, const goblin_split *split,
                               int64_t rows, gvariant *v, char *msg, size_t cap) {
    memset(v, 0, sizeof *v);
    v->rows = rows;
    (void)split;
    goblin_err e = goblin__graph_rebatch_at(g, G->ax, rows, &v->g, msg, cap);
    if (e) return e;
    v->bytes = goblin__graph_task_bytes(v->g);
    v->oshape = goblin__calloc((size_t)G->n_out, sizeof *v->oshape);
    v->oop = goblin__calloc((size_t)G->n_out, sizeof *v->oop);
    v->ok = goblin__calloc((size_t)G->n_out, sizeof *v->ok);
    if (!v->oshape || !v->oop || !v->ok) return GOBLIN_ENOMEM;
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_graph_node(v->g, goblin_graph_output_id(v->g, o), NULL, &v->oshape[o], NULL, NULL);
        goblin__graph_output_contract(v->g, o, &v->oop[o], &v->ok[o]);
        const goblin_tensor *full = &G->out[o], *s = &v->oshape[o];
        goblin__bax b = G->ax->bax[goblin_graph_output_id(g, o)];
        bool cat = G->comb[o] == GOBLIN_COMBINE_CONCAT;
        int32_t a = cat ? b.axis : -1;
        bool good = s->rank == full->rank && (!cat || (a >= 0 && s->shape[a] == b.outer * rows * b.inner));
        for (int32_t d = 0; good && d < s->rank; d++) good = d == a || s->shape[d] == full->shape[d];
        if (!good) {
            snprintf(msg, cap, "output %d: a chunk of %lld rows gives shape [%lld...] (rank %d), which the "
                     "%s combine cannot assemble into the output", (int)o, (long long)rows,
                     (long long)(s->rank ? s->shape[0] : 0), (int)s->rank, combine_name(G->comb[o]));
            return GOBLIN_EINVAL;
        }
    }
    if (G->verify == GOBLIN_VERIFY_CHECKED) {
        /* The first variant decides for the job (the other has the same nodes). */
        bool applies = false;
        char why[320] = "";
        goblin_err ce = goblin__node_checked_plan(G, g, v, v != &G->v[0], &applies, why, sizeof why);
        if (ce) return ce;
        if (!applies) {
            if (n) goblin__node_log(n, GOBLIN_LOG_INFO, "checked execution does not apply (%s): replicating instead", why);
            G->verify = GOBLIN_VERIFY_REPLICATE;
        } else {
            v->bytes = goblin__graph_task_bytes(v->wg);
        }
    }
    return serialize_chunk(n, v->wg ? v->wg : v->g, &v->buf, &v->len);
}

/* ---- planning: the caller's tensors, chunk sizes -------------------------------- */

static bool same_shape_t(const goblin_tensor *a, const goblin_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* The caller's tensor @p t for graph input or output @p i (node @p id): the graph's dtype
 * and shape, and data unless empty. */
static goblin_err check_io(const goblin_graph *g, int32_t id, const goblin_tensor *t, const char *what,
                           int32_t i, char *msg, size_t cap) {
    goblin_tensor s;
    goblin_graph_node(g, id, NULL, &s, NULL, NULL);
    if (t->dtype != s.dtype) {
        snprintf(msg, cap, "%s %d has dtype %s, the graph's is %s", what, (int)i, goblin_dtype_name(t->dtype),
                 goblin_dtype_name(s.dtype));
        return GOBLIN_EDTYPE;
    }
    if (!same_shape_t(t, &s)) {
        snprintf(msg, cap, "%s %d does not have the graph's %s shape", what, (int)i, what);
        return GOBLIN_ESHAPE;
    }
    if (goblin_tensor_numel(t) > 0 && !t->data) {
        snprintf(msg, cap, "%s %d has no data", what, (int)i);
        return GOBLIN_EINVAL;
    }
    return GOBLIN_OK;
}

/* The caller's inputs @p in of graph @p g against its graph, split and cache ids:
 * which are batched (@p batched) and the batch size (*B). */
static goblin_err check_inputs(const goblin_graph *g, const goblin_tensor *in, const goblin_graph_job_params *jp,
                               const int32_t *axes, goblin__batch_axes *ax, uint8_t *batched, int64_t *B,
                               char *msg, size_t cap) {
    int32_t ni = goblin_graph_input_count(g);
    goblin_err e;
    for (int32_t i = 0; i < ni; i++)
        if ((e = check_io(g, goblin_graph_input_id(g, i), &in[i], "input", i, msg, cap)) != GOBLIN_OK) return e;
    if ((e = goblin__batch_axes_find(g, jp->split, axes, ax, msg, cap)) != GOBLIN_OK) return e;
    for (int32_t i = 0; i < ni; i++) batched[i] = ax->in_axis[i] >= 0;
    *B = ax->batch;
    if (*B < 1) {
        snprintf(msg, cap, "the batch is empty");
        return GOBLIN_EINVAL;
    }
    for (int32_t i = 0; i < ni; i++)
        if (batched[i] && jp->cache_ids && jp->cache_ids[i]) {
            snprintf(msg, cap, "input %d is split along the batch: it cannot have a cache id", (int)i);
            return GOBLIN_EINVAL;
        }
    return GOBLIN_OK;
}

/* A job cut into several chunks: is every output assembled from the chunks the value
 * the whole batch gives (per-sample, or a reduction over the batch of per-sample values)? */
static goblin_err check_per_sample(const gjob *G, const goblin_graph *g, const goblin_graph_job_params *jp,
                                   char *msg, size_t cap) {
    if (G->nchunks <= 1) return GOBLIN_OK;
    const goblin__batch_axes *ax = G->ax;
    char why[240];
    for (int32_t o = 0; o < G->n_out; o++) {
        int32_t id = goblin_graph_output_id(g, o);
        goblin__bax b = ax->bax[id];
        int32_t src = id;
        if (G->comb[o] == GOBLIN_COMBINE_CONCAT && b.outer > 1) {
            snprintf(msg, cap, "output %d: its dim %d holds %lld x the batch x %lld (the batch merged with the dims "
                     "before it): a chunk's rows are not one block of it; reshape the output so the batch leads "
                     "its dim (e.g. [seq, batch, ...] rather than [seq * batch, ...])", (int)o, (int)b.axis,
                     (long long)b.outer, (long long)b.inner);
            return GOBLIN_ESHAPE;
        }
        /* A rule given by the caller is taken as meant (CONCAT of a graph that is not
         * per-sample: every chunk computed on its own rows, e.g. normalized by its own
         * statistics). */
        if (jp->combine && jp->combine[o] != GOBLIN_COMBINE_AUTO) continue;
        if (G->comb[o] != GOBLIN_COMBINE_CONCAT) {
            /* a reduction combined by the node: its own input must be per-sample */
            const goblin__node *n = &g->nodes[id];
            if (n->n_inputs < 1) continue;
            src = n->inputs[0];
        }
        if (ax->mix[src] < 0) continue;
        goblin__batch_mix_msg(g, ax, src, why, sizeof why);
        size_t k = (size_t)snprintf(msg, cap, "output %d is not per-sample, so the batch of %lld cannot be cut: "
                                    "%s", (int)o, (long long)G->batch, why);
        if (k < cap)
            snprintf(msg + k, cap - k, "; run it in one chunk (chunk_rows >= the batch), or give it the combine "
                     "rule concat to compute every chunk on its own rows");
        return GOBLIN_ESHAPE;
    }
    return GOBLIN_OK;
}

/* Everything of a graph job that does not need the node's lock. */
static goblin_err plan_graph(goblin_node *n, gjob *G, uint64_t job_id, const goblin_graph *g, const goblin_graph_job_params *jp,
                             const int32_t *axes, uint64_t mem, int64_t units, char *msg, size_t cap) {
    int32_t ni = G->n_in, no = G->n_out;
    goblin_err e;
    if (!(G->ax = goblin__calloc(1, sizeof *G->ax))) return GOBLIN_ENOMEM;
    if ((e = check_inputs(g, G->in, jp, axes, G->ax, G->batched, &G->batch, msg, cap)) != GOBLIN_OK) return e;
    for (int32_t o = 0; o < no; o++)
        if ((e = check_io(g, goblin_graph_output_id(g, o), &G->out[o], "output", o, msg, cap)) != GOBLIN_OK)
            return e;
    int64_t B = G->batch;
    for (int32_t i = 0; i < ni; i++) {
        uint64_t id = jp->cache_ids ? jp->cache_ids[i] : 0;
        if (!G->batched[i] && !id) {
            /* A job-scoped id, so a worker still receives the input once per job. */
            uint64_t z = (job_id + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 17);
            z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
            id = (z ^ (z >> 29)) | 1;
        }
        G->cid[i] = id;
        if (!G->batched[i] && !goblin_tensor_is_contiguous(&G->in[i])) {
            size_t bytes = goblin__node_out_bytes(&G->in[i]);
            if (!(G->packed[i] = goblin__alloc(bytes ? bytes : 1))) return GOBLIN_ENOMEM;
            goblin_tensor pt;
            goblin_tensor_init(&pt, G->in[i].dtype, G->in[i].rank, G->in[i].shape, G->packed[i]);
            goblin__tensor_copy(&pt, &G->in[i]);
        }
    }
    /* A probe at another batch size: which outputs follow the batch, and the memory
     * a task needs per row (task bytes are affine in the rows). */
    int64_t pr = B > 1 ? 1 : 2;
    goblin_graph *probe = NULL;
    char pm[320];
    bool one = jp->chunk_rows >= B; /* one chunk: the graph as it is */
    if ((e = goblin__graph_rebatch_at(g, G->ax, pr, &probe, pm, sizeof pm)) != GOBLIN_OK) {
        if (e == GOBLIN_ENOMEM || !one) {
            snprintf(msg, cap, "the graph cannot be cut along the batch: %s", pm);
            return e;
        }
        probe = NULL;
    }
    for (int32_t o = 0; o < no; o++) {
        goblin_combine c = jp->combine ? jp->combine[o] : GOBLIN_COMBINE_AUTO;
        if ((unsigned)c >= GOBLIN_COMBINE_COUNT) {
            snprintf(msg, cap, "output %d: combine %d is not a goblin_combine", (int)o, (int)c);
            goblin_graph_free(probe);
            return GOBLIN_EINVAL;
        }
        goblin_combine a = goblin__graph_auto_combine(g, G->ax, o);
        if (c == GOBLIN_COMBINE_AUTO && a == GOBLIN_COMBINE_AUTO) {
            snprintf(msg, cap, "output %d: AUTO cannot decide how to combine it (its leading dim does not "
                     "follow the batch and it is not a sum/mean/max/min over the batch axis); give a "
                     "combine rule", (int)o);
            goblin_graph_free(probe);
            return GOBLIN_EINVAL;
        }
        if (c == GOBLIN_COMBINE_AUTO) c = a;
        if (c == GOBLIN_COMBINE_CONCAT && a != GOBLIN_COMBINE_CONCAT) {
            snprintf(msg, cap, "output %d: CONCAT needs an output with a dim that follows the batch (%lld)",
                     (int)o, (long long)B);
            goblin_graph_free(probe);
            return GOBLIN_EINVAL;
        }
        goblin_dtype dt = G->out[o].dtype;
        bool fl = dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64;
        bool in = dt == GOBLIN_DTYPE_I32 || dt == GOBLIN_DTYPE_I64;
        if (c != GOBLIN_COMBINE_CONCAT && !(fl || (in && c != GOBLIN_COMBINE_MEAN))) {
            snprintf(msg, cap, "output %d: %s does not combine dtype %s (f32, f64; i32, i64 except mean)",
                     (int)o, combine_name(c), goblin_dtype_name(dt));
            goblin_graph_free(probe);
            return GOBLIN_EDTYPE;
        }
        G->comb[o] = c;
    }
    uint64_t bfull = goblin__graph_task_bytes(g), bprobe = probe ? goblin__graph_task_bytes(probe) : bfull;
    goblin_graph_free(probe);
    double slope = bfull > bprobe ? (double)(bfull - bprobe) / (double)(B - pr) : 0.0;
    if (B == 1) slope = 0.0;
    double base = (double)bfull - slope * (double)B;
    if (base < 0) base = 0;
    int64_t rows;
    bool fixed = jp->chunk_rows > 0;
    if (fixed) {
        rows = jp->chunk_rows < B ? jp->chunk_rows : B;
    } else {
        if (base + slope > (double)mem) {
            snprintf(msg, cap, "one row needs about %.0f bytes, more than the task memory budget of %llu (a row "
                     "is not cut further: give the workers more memory, goblin-worker --memory, or pass a larger "
                     "task_memory)", base + slope, (unsigned long long)mem);
            return GOBLIN_ERANGE;
        }
        double fit = slope > 0 ? ((double)mem - base) / slope : (double)B;
        rows = fit >= (double)B ? B : (int64_t)fit;
        if (rows < 1) rows = 1;
        /* 4 tasks per unit of capacity by default (2 under SPOT: each checked task costs the
         * node a recomputation of at least one row, so fewer, larger chunks check less of
         * the work) */
        int64_t per = G->verify == GOBLIN_VERIFY_SPOT ? 2 : 4;
        int64_t mt = jp->job.min_tasks > 0 ? jp->job.min_tasks : per * units;
        if ((B + rows - 1) / rows < mt) {
            int64_t r2 = B / mt;
            rows = r2 < 1 ? 1 : r2;
        }
    }
    for (int tries = 0;; tries++) {
        G->rows = rows;
        G->nchunks = (B + rows - 1) / rows;
        int64_t last = B - (G->nchunks - 1) * rows;
        G->nv = last != rows ? 2 : 1;
        for (int32_t k = 0; k < 2; k++) {
            goblin_graph_free(G->v[k].g);
            goblin_buffer_free(G->v[k].buf);
            goblin__free(G->v[k].oshape);
            goblin__free(G->v[k].oop);
            goblin__free(G->v[k].ok);
            goblin__node_checked_free(&G->v[k]);
            memset(&G->v[k], 0, sizeof G->v[k]);
        }
        for (int32_t k = 0; k < G->nv; k++) {
            char vm[320] = "";
            e = make_variant(n, G, g, jp->split, k == 0 ? rows : last, &G->v[k], vm, sizeof vm);
            if (e) {
                snprintf(msg, cap, "chunks of %lld rows: %s", (long long)(k == 0 ? rows : last),
                         vm[0] ? vm : goblin_strerror(e));
                return e;
            }
        }
        if (G->v[0].bytes <= mem) break;
        if (fixed || rows == 1 || tries >= 16) {
            snprintf(msg, cap, "a task of %lld rows needs about %llu bytes, more than the task memory budget "
                     "of %llu (%s)", (long long)rows, (unsigned long long)G->v[0].bytes, (unsigned long long)mem,
                     rows > 1 ? "fewer rows a task (chunk_rows), more worker memory (goblin-worker --memory) or a "
                                "larger task_memory"
                              : "a row is not cut further: give the workers more memory, goblin-worker --memory, or "
                                "pass a larger task_memory");
            return GOBLIN_ERANGE;
        }
        int64_t r2 = (int64_t)((double)rows * (double)mem / (double)G->v[0].bytes);
        rows = r2 < rows ? (r2 < 1 ? 1 : r2) : rows - 1;
    }
    if ((e = check_per_sample(G, g, jp, msg, cap)) != GOBLIN_OK) return e;
    if (G->verify == GOBLIN_VERIFY_SPOT) {
        for (int32_t i = 0; i < ni; i++)
            if (G->batched[i] && G->ax->in_axis[i] != 0) {
                snprintf(msg, cap, "input %d has the batch in dim %d: a spot-check recomputes rows of dim 0; "
                         "verify with REPLICATE", (int)i, (int)G->ax->in_axis[i]);
                return GOBLIN_EINVAL;
            }
        for (int32_t o = 0; o < no; o++) {
            goblin__bax b = G->ax->bax[goblin_graph_output_id(g, o)];
            if (G->comb[o] == GOBLIN_COMBINE_CONCAT && (b.axis != 0 || b.inner != 1)) {
                snprintf(msg, cap, "output %d has the batch in dim %d (x%lld): a spot-check recomputes rows of "
                         "dim 0; verify with REPLICATE", (int)o, (int)b.axis, (long long)b.inner);
                return GOBLIN_EINVAL;
            }
        }
        for (int32_t o = 0; o < no; o++)
            if (G->comb[o] != GOBLIN_COMBINE_CONCAT) {
                snprintf(msg, cap, "output %d is combined by %s over the chunks: a spot-check recomputes rows, "
                         "so it needs every output cut along the batch (concat); verify with REPLICATE",
                         (int)o, combine_name(G->comb[o]));
                return GOBLIN_EINVAL;
            }
        int64_t k = jp->spot_rows > 0 ? jp->spot_rows : (G->rows / 16 < 4 ? G->rows / 16 : 4);
        G->spot_k = k < 1 ? 1 : k > G->rows ? G->rows : k;
        char sm[256] = "";
        if ((e = goblin__graph_rebatch(g, jp->split, G->spot_k, &G->spot_g, sm, sizeof sm)) != GOBLIN_OK) {
            snprintf(msg, cap, "the graph for a spot-check of %lld rows: %s", (long long)G->spot_k,
                     sm[0] ? sm : goblin_strerror(e));
            return e;
        }
    }
    return GOBLIN_OK;
}

/* ---- graph jobs: API ------------------------------------------------------------ */

goblin_err goblin_node_submit_graph(goblin_node *n, const goblin_graph *g, const goblin_tensor *inputs,
                                    int32_t n_inputs, goblin_tensor *outputs, int32_t n_outputs,
                                    const goblin_graph_job_params *jp, goblin_job **out) {
    goblin__node_submit_begin();
    if (!n || !g || !out || n_inputs < 0 || n_outputs < 0 || (n_inputs && !inputs) || (n_outputs && !outputs))
        return GOBLIN_EINVAL;
    goblin_graph_job_params defp;
    goblin_graph_job_params_default(&defp);
    if (!jp) jp = &defp;
    int32_t ni = goblin_graph_input_count(g), no = goblin_graph_output_count(g);
    if (ni != n_inputs || no != n_outputs || no < 1 || ni > GOBLIN_GRAPH_JOB_MAX_IO ||
        no > GOBLIN_GRAPH_JOB_MAX_IO) {
        goblin__node_refuse(n, "cannot submit graph job: the graph has %d inputs and %d outputs, got %d and %d",
                         (int)ni, (int)no, (int)n_inputs, (int)n_outputs);
        return GOBLIN_EINVAL;
    }
    if ((unsigned)jp->verify >= GOBLIN_VERIFY_COUNT || jp->verify == GOBLIN_VERIFY_FREIVALDS || !(jp->min_replication > 0.0 && jp->min_replication <= 1.0) ||
        !(jp->trust_halflife > 0.0) || !(jp->checked_max_share > 0.0) || jp->chunk_rows < 0 || jp->job.min_tasks < 0 || jp->spot_rows < 0 ||
        jp->spot_rows > 65535) {
        goblin__node_refuse(n, "cannot submit graph job: bad parameters (verify, min_replication in (0, 1], "
                         "trust_halflife > 0, checked_max_share > 0, chunk_rows >= 0, min_tasks >= 0, spot_rows in 0..65535)");
        return GOBLIN_EINVAL;
    }
    goblin_job *j = goblin__calloc(1, sizeof *j);
    if (!j) return GOBLIN_ENOMEM;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cond, NULL);
    j->kind = JOB_GRAPH;
    if (n->share) { /* inputs lent in place to in-process workers (share.h) */
        j->share = goblin__share_ref(n->share); /* a detached job outlives the node */
        j->stok = goblin__share_job_new();
    }
    j->jp = jp->job;
    gjob *G = j->g = goblin__calloc(1, sizeof *G);
    if (!G) {
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    /* Large constants become cached BROADCAST inputs (hoist.c): G's inputs are then
     * the hoisted graph's, the caller's among them in their order. */
    goblin_err e = goblin__hoist_get(&n->hoist, g, GOBLIN_GRAPH_JOB_MAX_IO, &G->hoist);
    if (e) {
        goblin_job_free(j);
        return e;
    }
    const goblin_graph *jg = G->hoist ? G->hoist->g : g;
    int32_t gi = goblin_graph_input_count(jg);
    G->n_in = gi;
    G->n_out = no;
    G->verify = jp->verify;
    G->min_rep = jp->min_replication;
    G->halflife = jp->trust_halflife;
    G->max_share = jp->checked_max_share;
    size_t nin = (size_t)(gi > 0 ? gi : 1);
    G->in = goblin__calloc(nin, sizeof *G->in);
    G->out = goblin__calloc((size_t)no, sizeof *G->out);
    G->batched = goblin__calloc(nin, 1);
    G->cid = goblin__calloc(nin, sizeof *G->cid);
    G->packed = goblin__calloc(nin, sizeof *G->packed);
    G->comb = goblin__calloc((size_t)no, sizeof *G->comb);
    if (!G->in || !G->out || !G->batched || !G->cid || !G->packed || !G->comb) {
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    memcpy(G->out, outputs, (size_t)no * sizeof *G->out);
    char msg[512] = "";
    goblin_graph_job_params hjp; /* jp for the hoisted graph: split and cache ids per its inputs */
    goblin_split *hsplit = NULL;
    uint64_t *hcid = NULL;
    int32_t *haxes = NULL; /* the hoisted graph's inputs' batch dims, from the caller's graph */
    if (!G->hoist) {
        if (ni) memcpy(G->in, inputs, (size_t)ni * sizeof *G->in);
    } else {
        /* The caller's inputs are checked against the caller's graph first, so that
         * messages name the caller's input numbers. */
        const goblin__hoisted *h = G->hoist;
        int64_t B = 0;
        goblin__batch_axes cax;
        memset(&cax, 0, sizeof cax);
        hsplit = goblin__calloc(nin, sizeof *hsplit);
        hcid = goblin__calloc(nin, sizeof *hcid);
        haxes = goblin__calloc(nin, sizeof *haxes);
        if (!hsplit || !hcid || !haxes) {
            e = GOBLIN_ENOMEM;
        } else if ((e = check_inputs(g, inputs, jp, NULL, &cax, G->batched, &B, msg, sizeof msg)) == GOBLIN_OK) {
            for (int32_t i = 0; i < gi; i++) {
                int32_t s = h->src[i];
                G->in[i] = s >= 0 ? inputs[s] : h->ct[-1 - s];
                hsplit[i] = s >= 0 && G->batched[s] ? GOBLIN_SPLIT_BATCH : GOBLIN_SPLIT_BROADCAST;
                haxes[i] = s >= 0 ? cax.in_axis[s] : -1;
                hcid[i] = s >= 0 ? (jp->cache_ids ? jp->cache_ids[s] : 0) : h->cid[-1 - s];
            }
            goblin__batch_axes_clear(&cax);
            hjp = *jp;
            hjp.split = hsplit;
            hjp.cache_ids = hcid;
            jp = &hjp;
        }
        if (e) {
            goblin__node_refuse(n, "cannot submit graph job: %s", msg[0] ? msg : goblin_strerror(e));
            goblin__batch_axes_clear(&cax);
            goblin__free(hsplit);
            goblin__free(hcid);
            goblin__free(haxes);
            goblin_job_free(j);
            return e;
        }
    }
    pthread_mutex_lock(&n->mu);
    if (!n->started) {
        pthread_mutex_unlock(&n->mu);
        goblin__free(hsplit);
        goblin__free(hcid);
        goblin__free(haxes);
        goblin_job_free(j);
        return GOBLIN_ESTATE;
    }
    j->id = n->next_job_id++;
    /* Cut by the workers that will compute it (scheduler.c, docs/runtime.md "Capacity"). */
    goblin__node_capacity capn = goblin__node_capacity_now(n);
    uint64_t mem = jp->job.task_memory_bytes ? jp->job.task_memory_bytes : capn.memory;
    if (!mem) mem = (uint64_t)256 << 20;
    pthread_mutex_unlock(&n->mu);
    e = plan_graph(n, G, j->id, jg, jp, haxes, mem, capn.units, msg, sizeof msg);
    goblin__free(hsplit);
    goblin__free(hcid);
    goblin__free(haxes);
    if (e) {
        goblin__node_refuse(n, "cannot submit graph job: %s", msg[0] ? msg : goblin_strerror(e));
        goblin_job_free(j);
        return e;
    }
    j->ntasks = G->nchunks;
    j->tasks = goblin__calloc((size_t)j->ntasks, sizeof(task));
    if (!j->tasks) {
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    pthread_mutex_lock(&n->mu);
    int64_t cap = n->cap_jobs;
    if (!n->started || !goblin__node_grow((void **)&n->jobs, &cap, n->n_jobs + 1, sizeof(goblin_job *))) {
        bool st = n->started;
        pthread_mutex_unlock(&n->mu);
        goblin_job_free(j);
        return st ? GOBLIN_ENOMEM : GOBLIN_ESTATE;
    }
    n->cap_jobs = (int32_t)cap;
    j->node = n;
    j->running = true;
    n->jobs[n->n_jobs++] = j;
    n->sched_all = true;
    goblin__node_log(n, GOBLIN_LOG_INFO, "job %llu: graph over a batch of %lld in %lld tasks of %lld rows (%llu bytes each)",
                     (unsigned long long)j->id, (long long)G->batch, (long long)j->ntasks, (long long)G->rows,
                     (unsigned long long)G->v[0].bytes);
    pthread_mutex_unlock(&n->mu);
    goblin__node_wake(n);
    *out = j;
    return GOBLIN_OK;
}
