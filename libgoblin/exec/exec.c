/* libgoblin/exec/exec.c - evaluating a graph: walk the nodes in order, give each to
 * the chosen backend (or the reference backend when it lacks the op), free
 * intermediates after their last use, and hand results to the caller. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "backends/backend.h"
#include "base/clock.h"
#include "base/errf.h"
#include "backends/kernel_util.h"

struct goblin_exec {
    const goblin_graph *g;
    const goblin__backend_vtable *be;
    void *be_ctx;
    void *ref_ctx;
    goblin_exec_params p;
    int32_t *last_use;  /* per node: index of its last consumer, or n_nodes if a graph output */
    /* per node: the node whose buffer holds its value: itself, or for a movement op that
     * is a view of its input (see alias_plan) the buffer's owner */
    int32_t *root;
    /* per view node (root[i] != i): its element offset into the root's buffer and its
     * strides (GOBLIN_MAX_RANK per node) */
    int64_t *voff, *vstr;
    /* per node that owns a buffer: the last node reading it through itself or an alias
     * (n_nodes when the buffer is a graph output, -1 when nothing reads it) */
    int32_t *buf_last;
    int32_t *given; /* per node: index into p.given of its given value, or -1 */
    goblin_exec_stats stats;
    bool profile; /* GOBLIN_PROFILE set (non-empty, not "0"): per-node times to stderr */
    char err[512];
};

static const goblin__backend_vtable *backend_vt(goblin_backend_kind k) {
    switch (k) {
    case GOBLIN_BACKEND_REF: return &goblin__backend_ref;
#ifdef GOBLIN_HAVE_BLIS
    case GOBLIN_BACKEND_BLIS: return &goblin__backend_blis;
#endif
#ifdef GOBLIN_HAVE_CUDA
    case GOBLIN_BACKEND_CUDA: return &goblin__backend_cuda;
#endif
    default: return NULL;
    }
}

const char *goblin_backend_name(goblin_backend_kind kind) {
    static const char *names[] = {"ref", "blis", "cuda"};
    return (unsigned)kind < GOBLIN_BACKEND_COUNT ? names[kind] : NULL;
}

goblin_err goblin_backend_available(goblin_backend_kind kind) {
    if ((unsigned)kind >= GOBLIN_BACKEND_COUNT) return GOBLIN_EINVAL;
    const goblin__backend_vtable *vt = backend_vt(kind);
    if (!vt) return GOBLIN_ENOTSUP;
    return vt->available();
}

goblin_err goblin_backend_memory(goblin_backend_kind kind, uint64_t *total_bytes,
                                 uint64_t *free_bytes) {
    if (total_bytes) *total_bytes = 0;
    if (free_bytes) *free_bytes = 0;
    if (!total_bytes || !free_bytes || (unsigned)kind >= GOBLIN_BACKEND_COUNT)
        return GOBLIN_EINVAL;
    const goblin__backend_vtable *vt = backend_vt(kind);
    if (!vt || !vt->memory) return GOBLIN_ENOTSUP;
    return vt->memory(total_bytes, free_bytes);
}

void goblin_exec_params_default(goblin_exec_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
#ifdef GOBLIN_HAVE_BLIS
    p->backend = GOBLIN_BACKEND_BLIS;
#else
    p->backend = GOBLIN_BACKEND_REF;
#endif
}

/* The executor's message (goblin_exec_error) and @p e. */
#define xfail(ex, e, ...) goblin__errf((ex)->err, sizeof (ex)->err, (e), __VA_ARGS__)

/* Which nodes alias their input's buffer instead of computing. A movement op (RESHAPE,
 * PERMUTE, SLICE, SPLIT, SELECT) of a value the executor holds in its own memory (a node
 * it computed, or a constant, or a view of one) is a view of that memory: the same bytes
 * at an offset with other strides, no copy. A view is taken when
 *  - its strides are those of a contiguous tensor (a RESHAPE of a contiguous value, a
 *    slice of whole leading rows): any consumer reads it as before; or
 *  - every consumer is an op that reads strided inputs in place and gains from it
 *    (strided_reader: attention, and movement ops, which may make a view in turn or
 *    copy once), e.g. the q, k, v of a fused qkv product split, viewed as heads and
 *    transposed, go to the attention kernel without a copy;
 * and a RESHAPE only where its input's strides allow it (else its kernel copies).
 * Graph inputs (the caller's tensors may be strided; their strides are not known here)
 * and graph outputs (they may go straight into a caller's buffer) still run the kernel.
 * Kernels never write their inputs, so a shared buffer stays as it is; it is released
 * after the last read through any view (buf_last), not after its owner's own last use.
 * Every choice depends on the graph's ops and the shapes of its nodes only. */

/* Strides for viewing a tensor (shape os, strides ost, rank orank, numel > 0) as shape
 * ns (rank nrank, same numel), or false where no strides can. The input's dims (size-1 dims
 * play no part) fall into runs laid out one after the other (st[d] = st[d + 1] sh[d + 1]);
 * each run must be split by whole new dims (their product equal to its element count),
 * which then step through it row-major from its innermost stride. */
static bool reshape_view(int32_t orank, const int64_t *os, const int64_t *ost, int32_t nrank,
                         const int64_t *ns, int64_t *nst) {
    int64_t sh[GOBLIN_MAX_RANK], st[GOBLIN_MAX_RANK];
    int32_t m = 0;
    for (int32_t d = 0; d < orank; d++)
        if (os[d] != 1) sh[m] = os[d], st[m++] = ost[d];
    int32_t nd = nrank - 1;
    for (int32_t o = m - 1; o >= 0;) {
        int64_t base = st[o], count = sh[o];
        int32_t first = o;
        while (first > 0 && st[first - 1] == st[first] * sh[first]) count *= sh[--first];
        int64_t prod = 1;
        while (prod < count) {
            if (nd < 0) return false;
            nst[nd] = base * prod;
            prod *= ns[nd--];
        }
        if (prod != count) return false;
        o = first - 1;
    }
    for (; nd >= 0; nd--) {
        if (ns[nd] != 1) return false;
        nst[nd] = 1;
    }
    return true;
}

/* Ops whose kernels read strided inputs in place and are worth handing a view (see
 * above); each has GOBLIN__OPF_STRIDED, and exec_run copies a view into contiguous
 * memory for any op that lacks it, so a stale list here costs a copy, never a result. */
static bool strided_reader(goblin_op op) {
    switch (op) {
    case GOBLIN_OP_SDPA:
    case GOBLIN_OP_RESHAPE:
    case GOBLIN_OP_PERMUTE:
    case GOBLIN_OP_SLICE:
    case GOBLIN_OP_SPLIT:
    case GOBLIN_OP_SELECT: return true;
    default: return false;
    }
}

/* Node @p n (one input x: view offset xoff, strides xst) as a view: its offset and
 * strides, or false where it is not one (not a movement op, or a reshape no strides
 * give). */
static bool view_of(const goblin__node *n, const goblin__node *x, int64_t xoff, const int64_t *xst,
                    int64_t *off, int64_t *st) {
    *off = xoff;
    switch (n->op) {
    case GOBLIN_OP_RESHAPE: return reshape_view(x->rank, x->shape, xst, n->rank, n->shape, st);
    case GOBLIN_OP_PERMUTE: {
        int32_t np;
        const int64_t *perm = goblin__attr_ints(n, GOBLIN_ATTR_PERM, &np);
        if (!perm || np != x->rank || n->rank != x->rank) return false;
        for (int32_t d = 0; d < np; d++) {
            int64_t a = perm[d] < 0 ? perm[d] + x->rank : perm[d];
            if (a < 0 || a >= x->rank) return false;
            st[d] = xst[a];
        }
        return true;
    }
    case GOBLIN_OP_SLICE: {
        int32_t na, ns, nt, nsp;
        const int64_t *axes = goblin__attr_ints(n, GOBLIN_ATTR_AXES, &na);
        const int64_t *starts = goblin__attr_ints(n, GOBLIN_ATTR_STARTS, &ns);
        (void)goblin__attr_ints(n, GOBLIN_ATTR_STOPS, &nt);
        const int64_t *steps = goblin__attr_ints(n, GOBLIN_ATTR_STEPS, &nsp);
        if (n->rank != x->rank || (axes && na != ns) || nt != ns || (nsp && nsp != ns)) return false;
        for (int32_t d = 0; d < x->rank; d++) st[d] = xst[d];
        for (int32_t i = 0; i < ns; i++) {
            int64_t a = axes ? axes[i] : i;
            if (a < 0) a += x->rank;
            if (a < 0 || a >= x->rank) return false;
            int64_t dim = x->shape[a], b = starts[i], step = nsp ? steps[i] : 1;
            if (b < 0) b = b + dim < 0 ? 0 : b + dim; /* as infer_slice */
            if (b > dim) b = dim;
            if (n->shape[a] > 0) *off += b * xst[a];
            if (n->shape[a] > 1) st[a] = xst[a] * step;
        }
        return true;
    }
    case GOBLIN_OP_SPLIT: {
        if (n->rank != x->rank || x->rank == 0) return false;
        int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
        if (a < 0) a += x->rank;
        if (a < 0 || a >= x->rank) return false;
        int64_t chunks = goblin__attr_i(n, GOBLIN_ATTR_CHUNKS, 1), idx = goblin__attr_i(n, GOBLIN_ATTR_INDEX, 0);
        int64_t dim = x->shape[a], size = chunks > 0 ? (dim + chunks - 1) / chunks : 0;
        int64_t count = size ? (dim + size - 1) / size : chunks;
        if (idx < 0) idx += count;
        if (idx < 0 || idx >= count) return false;
        for (int32_t d = 0; d < x->rank; d++) st[d] = xst[d];
        if (n->shape[a] > 0) *off += idx * size * xst[a];
        return true;
    }
    case GOBLIN_OP_SELECT: {
        if (n->rank != x->rank - 1) return false;
        int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0), idx = goblin__attr_i(n, GOBLIN_ATTR_INDEX, 0);
        if (a < 0) a += x->rank;
        if (a < 0 || a >= x->rank) return false;
        if (idx < 0) idx += x->shape[a];
        if (idx < 0 || idx >= x->shape[a]) return false;
        *off += idx * xst[a];
        for (int32_t d = 0, o = 0; d < x->rank; d++)
            if (d != a) st[o++] = xst[d];
        return true;
    }
    default: return false;
    }
}

static bool contig_strides(const goblin__node *n, const int64_t *st) {
    int64_t expect = 1;
    for (int32_t d = n->rank - 1; d >= 0; d--) {
        if (n->shape[d] != 1 && st[d] != expect) return false;
        expect *= n->shape[d];
    }
    return true;
}

static void alias_plan(const goblin_graph *g, const int32_t *last_use, const int32_t *given, int32_t *root,
                       int32_t *buf_last, int64_t *voff, int64_t *vstr) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const goblin__node *n = &g->nodes[i];
        root[i] = i;
        buf_last[i] = last_use[i];
        voff[i] = 0;
        int64_t *st = vstr + (size_t)i * GOBLIN_MAX_RANK;
        goblin__contig_strides(n->rank, n->shape, st);
        if (n->n_inputs != 1 || last_use[i] == g->n_nodes || given[i] >= 0) continue;
        int32_t x = n->inputs[0], r = root[x];
        if (g->nodes[r].op == GOBLIN_OP_INPUT || n->dtype != g->nodes[x].dtype) continue;
        int64_t numel = 1;
        for (int32_t d = 0; d < n->rank; d++) numel *= n->shape[d];
        if (numel == 0) continue;
        int64_t off, vs[GOBLIN_MAX_RANK];
        if (!view_of(n, &g->nodes[x], voff[x], vstr + (size_t)x * GOBLIN_MAX_RANK, &off, vs)) continue;
        if (!contig_strides(n, vs)) {
            bool readers = last_use[i] >= 0;
            for (int32_t c = i + 1; readers && c <= last_use[i]; c++)
                for (int32_t j = 0; j < g->nodes[c].n_inputs; j++)
                    if (g->nodes[c].inputs[j] == i && !strided_reader(g->nodes[c].op)) readers = false;
            if (!readers) continue;
        }
        root[i] = r;
        voff[i] = off;
        memcpy(st, vs, sizeof vs);
        if (last_use[i] > buf_last[r]) buf_last[r] = last_use[i];
    }
}

static void exec_free_plan(goblin_exec *ex) {
    goblin__free(ex->last_use);
    goblin__free(ex->root);
    goblin__free(ex->buf_last);
    goblin__free(ex->voff);
    goblin__free(ex->vstr);
    goblin__free(ex->given);
}

goblin_err goblin_exec_new(goblin_exec **out, const goblin_graph *g, const goblin_exec_params *p) {
    if (!out || !g) return GOBLIN_EINVAL;
    goblin_exec_params params;
    if (p) params = *p;
    else goblin_exec_params_default(&params);
    if ((unsigned)params.backend >= GOBLIN_BACKEND_COUNT || params.threads < 0) return GOBLIN_EINVAL;
    if (params.shapes_like) { /* the same graph at another batch size: same nodes, same ops */
        const goblin_graph *l = params.shapes_like;
        if (l->n_nodes != g->n_nodes) return GOBLIN_EINVAL;
        for (int32_t i = 0; i < g->n_nodes; i++)
            if (l->nodes[i].op != g->nodes[i].op || l->nodes[i].n_inputs != g->nodes[i].n_inputs) return GOBLIN_EINVAL;
    }
    if (params.n_given < 0 || (params.n_given > 0 && (!params.given_ids || !params.given))) return GOBLIN_EINVAL;
    for (int32_t q = 0; q < params.n_given; q++) {
        int32_t id = params.given_ids[q];
        if (id < 0 || id >= g->n_nodes || g->nodes[id].op == GOBLIN_OP_INPUT || g->nodes[id].op == GOBLIN_OP_CONSTANT)
            return GOBLIN_EINVAL;
    }
    if (params.threads == 0) { /* all cores: resolved once so kernels see a real count */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        params.threads = n > 0 ? (int32_t)n : 1;
    }
    const goblin__backend_vtable *vt = backend_vt(params.backend);
    if (!vt) return GOBLIN_ENOTSUP;
    if (vt->abi != GOBLIN__BACKEND_ABI) return GOBLIN_EVERSION;
    goblin_err e = vt->available();
    if (e) return e;
    goblin_exec *ex = goblin__calloc(1, sizeof *ex);
    if (!ex) return GOBLIN_ENOMEM;
    ex->g = g;
    ex->be = vt;
    ex->p = params;
    const char *prof = getenv("GOBLIN_PROFILE");
    ex->profile = prof && prof[0] && strcmp(prof, "0") != 0;
    size_t nn1 = (size_t)(g->n_nodes ? g->n_nodes : 1);
    ex->last_use = goblin__calloc(nn1, sizeof(int32_t));
    ex->root = goblin__calloc(nn1, sizeof(int32_t));
    ex->buf_last = goblin__calloc(nn1, sizeof(int32_t));
    ex->voff = goblin__calloc(nn1, sizeof(int64_t));
    ex->vstr = goblin__calloc(nn1 * GOBLIN_MAX_RANK, sizeof(int64_t));
    ex->given = goblin__calloc(nn1, sizeof(int32_t));
    if (!ex->last_use || !ex->root || !ex->buf_last || !ex->voff || !ex->vstr || !ex->given) {
        exec_free_plan(ex);
        goblin__free(ex);
        return GOBLIN_ENOMEM;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) ex->given[i] = -1;
    for (int32_t q = 0; q < params.n_given; q++) {
        if (ex->given[params.given_ids[q]] >= 0) {
            exec_free_plan(ex);
            goblin__free(ex);
            return GOBLIN_EINVAL;
        }
        ex->given[params.given_ids[q]] = q;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        ex->last_use[i] = -1;
        for (int32_t j = 0; j < g->nodes[i].n_inputs; j++) ex->last_use[g->nodes[i].inputs[j]] = i;
    }
    for (int32_t o = 0; o < g->n_outputs; o++) ex->last_use[g->output_ids[o]] = g->n_nodes;
    alias_plan(g, ex->last_use, ex->given, ex->root, ex->buf_last, ex->voff, ex->vstr);
    char msg[256] = "";
    e = vt->init(&ex->be_ctx, &params, msg, sizeof msg);
    if (e) {
        exec_free_plan(ex);
        goblin__free(ex);
        return e;
    }
    if (vt != &goblin__backend_ref) {
        e = goblin__backend_ref.init(&ex->ref_ctx, &params, msg, sizeof msg);
        if (e) {
            vt->destroy(ex->be_ctx);
            exec_free_plan(ex);
            goblin__free(ex);
            return e;
        }
    }
    *out = ex;
    return GOBLIN_OK;
}

void goblin_exec_free(goblin_exec *ex) {
    if (!ex) return;
    ex->be->destroy(ex->be_ctx);
    if (ex->be != &goblin__backend_ref) goblin__backend_ref.destroy(ex->ref_ctx);
    exec_free_plan(ex);
    goblin__free(ex);
}

const char *goblin_exec_error(const goblin_exec *ex) { return ex ? ex->err : ""; }

void goblin_exec_stats_get(const goblin_exec *ex, goblin_exec_stats *out) {
    if (!out) return;
    if (ex) *out = ex->stats;
    else memset(out, 0, sizeof *out);
}

static bool same_shape(const goblin_tensor *t, const goblin__node *n) {
    if (t->dtype != n->dtype || t->rank != n->rank) return false;
    for (int32_t d = 0; d < n->rank; d++)
        if (t->shape[d] != n->shape[d]) return false;
    return true;
}

static void describe(goblin_tensor *t, const goblin__node *n, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = n->dtype;
    t->rank = n->rank;
    for (int32_t d = 0; d < n->rank; d++) t->shape[d] = n->shape[d];
    goblin__contig_strides(n->rank, t->shape, t->strides);
    t->data = data;
}

static size_t node_bytes(const goblin__node *n) {
    int64_t numel = 1;
    for (int32_t d = 0; d < n->rank; d++) numel *= n->shape[d];
    return (size_t)numel * goblin_dtype_size(n->dtype);
}

/* A node's output buffer. Big ones are advised to use transparent huge pages (where
 * the system leaves that to madvise): a fresh 16 MiB activation then costs 8 page
 * faults instead of 4096, which on a VM take longer than a fast elementwise kernel.
 * Advice only: whatever the allocator returned, errors are ignored. */
#define HUGE_MIN ((size_t)4 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

static void *node_alloc(size_t bytes) {
    void *p = goblin__alloc(bytes);
#ifdef MADV_HUGEPAGE
    if (p && bytes >= HUGE_MIN) {
        uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        uintptr_t hi = ((uintptr_t)p + bytes) & ~(HUGE_PAGE - 1);
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    return p;
}

/* Buffers kept across runs on a thread. A graph evaluated again (a worker's next task of
 * the same shape, the next training round) allocates the same intermediates: the
 * buffers the last run on this thread freed are kept and handed back by exact size, so
 * a repeated run touches no fresh pages (on a VM the page faults of a small CNN's
 * training step cost ~40 % of it). Only buffers of at least WARM_MIN bytes, at most
 * WARM_CAP bytes in all per thread, only while the default allocator is installed (a
 * goblin_set_allocator hook never sees them), and only until the end of the next run on
 * the thread (what it did not take is freed then) or the thread's exit. */
#define WARM_SLOTS 32
#define WARM_MIN ((size_t)64 << 10)
#define WARM_CAP ((size_t)256 << 20)

typedef struct warm_cache {
    void *p[WARM_SLOTS];
    size_t bytes[WARM_SLOTS];
    uint32_t run[WARM_SLOTS]; /* the run that kept it */
    size_t total;
    uint32_t cur;
    bool keyed;
} warm_cache;

static _Thread_local warm_cache t_warm;
static pthread_key_t g_warm_key;
static pthread_once_t g_warm_once = PTHREAD_ONCE_INIT;
static bool g_warm_key_ok;

static void warm_flush(warm_cache *w, bool all) {
    for (int s = 0; s < WARM_SLOTS; s++)
        if (w->p[s] && (all || w->run[s] != w->cur)) {
            goblin__free_default(w->p[s]);
            w->total -= w->bytes[s];
            w->p[s] = NULL;
        }
}

static void warm_thread_exit(void *arg) { warm_flush(arg, true); }
static void warm_key_init(void) { g_warm_key_ok = pthread_key_create(&g_warm_key, warm_thread_exit) == 0; }

/* This thread's cache, or NULL when buffers are not kept (a hook is installed: what
 * was kept under the default allocator is released first). */
static warm_cache *warm_get(void) {
    warm_cache *w = &t_warm;
    if (!goblin__alloc_is_default()) {
        if (w->total) warm_flush(w, true);
        return NULL;
    }
    if (!w->keyed) {
        pthread_once(&g_warm_once, warm_key_init);
        if (!g_warm_key_ok || pthread_setspecific(g_warm_key, w) != 0) return NULL;
        w->keyed = true;
    }
    return w;
}

static void *warm_take(size_t bytes) {
    warm_cache *w = bytes >= WARM_MIN ? warm_get() : NULL;
    for (int s = 0; w && s < WARM_SLOTS; s++)
        if (w->p[s] && w->bytes[s] == bytes) {
            void *b = w->p[s];
            w->p[s] = NULL;
            w->total -= bytes;
            return b;
        }
    return NULL;
}

/* Free @p buf (@p bytes long, from node_alloc or warm_take), or keep it for the next run. */
static void warm_put(void *buf, size_t bytes) {
    if (!buf) return;
    warm_cache *w = bytes >= WARM_MIN ? warm_get() : NULL;
    if (w && w->total + bytes <= WARM_CAP)
        for (int s = 0; s < WARM_SLOTS; s++)
            if (!w->p[s]) {
                w->p[s] = buf;
                w->bytes[s] = bytes;
                w->run[s] = w->cur;
                w->total += bytes;
                return;
            }
    goblin__free(buf);
}

/* Intermediates freed after their last use are kept for a few nodes when one of those
 * nodes will allocate exactly as many bytes, and handed to it: a chain of same-shaped
 * activations then reuses two buffers instead of touching fresh pages (page faults cost
 * as much as a fast elementwise kernel). A kept buffer lives at most REUSE_AHEAD nodes
 * past its last use, so peak memory grows by little. */
#define REUSE_AHEAD 4
#define REUSE_SLOTS 8

typedef struct reuse_pool {
    void *p[REUSE_SLOTS];
    size_t bytes[REUSE_SLOTS];
    int32_t until[REUSE_SLOTS]; /* last node index that may take it */
} reuse_pool;

/* Does a node in (i, i + REUSE_AHEAD] allocate @p bytes? Its index, or -1. */
static int32_t reuse_wanted(const goblin_graph *g, const int32_t *direct, const int32_t *root, int32_t i,
                            size_t bytes) {
    for (int32_t q = i + 1; q < g->n_nodes && q <= i + REUSE_AHEAD; q++) {
        const goblin__node *n = &g->nodes[q];
        if (n->op == GOBLIN_OP_INPUT || n->op == GOBLIN_OP_CONSTANT || direct[q] >= 0 || root[q] != q) continue;
        if (node_bytes(n) == bytes) return q;
    }
    return -1;
}

static void *reuse_take(reuse_pool *rp, size_t bytes) {
    for (int s = 0; s < REUSE_SLOTS; s++)
        if (rp->p[s] && rp->bytes[s] == bytes) {
            void *b = rp->p[s];
            rp->p[s] = NULL;
            return b;
        }
    return NULL;
}

/* Keep @p buf (freed after node i) if a coming node wants its size; else free it. */
static void reuse_give(reuse_pool *rp, const goblin_graph *g, const int32_t *direct, const int32_t *root,
                       int32_t i, void *buf, size_t bytes) {
    int32_t q = bytes > 0 ? reuse_wanted(g, direct, root, i, bytes) : -1;
    for (int s = 0; q >= 0 && s < REUSE_SLOTS; s++)
        if (!rp->p[s]) {
            rp->p[s] = buf;
            rp->bytes[s] = bytes;
            rp->until[s] = q;
            return;
        }
    warm_put(buf, bytes);
}

/* Free kept buffers no node up to @p i took (i = INT32_MAX: all). */
static void reuse_expire(reuse_pool *rp, int32_t i) {
    for (int s = 0; s < REUSE_SLOTS; s++)
        if (rp->p[s] && rp->until[s] <= i) {
            warm_put(rp->p[s], rp->bytes[s]);
            rp->p[s] = NULL;
        }
}

/* goblin__kctx.run: one number per run, process-wide. */
static _Atomic uint64_t g_run_ids;

goblin_err goblin_exec_run(goblin_exec *ex, const goblin_tensor *inputs, int32_t n_inputs,
                           goblin_tensor *outputs, int32_t n_outputs) {
    if (!ex) return GOBLIN_EINVAL;
    const goblin_graph *g = ex->g;
    const uint64_t run_id = atomic_fetch_add(&g_run_ids, 1) + 1;
    ex->err[0] = 0;
    if (n_inputs != g->n_inputs || (n_inputs > 0 && !inputs))
        return xfail(ex, GOBLIN_EINVAL, "graph takes %d inputs, %d given", (int)g->n_inputs,
                     (int)n_inputs);
    if (n_outputs != g->n_outputs || (n_outputs > 0 && !outputs))
        return xfail(ex, GOBLIN_EINVAL, "graph has %d outputs, %d descriptors given",
                     (int)g->n_outputs, (int)n_outputs);
    if (g->n_outputs == 0) return xfail(ex, GOBLIN_EINVAL, "graph has no outputs");
    char sa[160], sb[160];
    for (int32_t i = 0; i < n_inputs; i++) {
        const goblin__node *n = &g->nodes[g->input_ids[i]];
        if (!same_shape(&inputs[i], n))
            return xfail(ex, GOBLIN_ESHAPE, "input %d: expected %s %s, got %s %s", (int)i,
                         goblin_dtype_name(n->dtype), goblin__shape_str(n->rank, n->shape, sa, sizeof sa),
                         goblin_dtype_name(inputs[i].dtype),
                         goblin__shape_str(inputs[i].rank >= 0 && inputs[i].rank <= GOBLIN_MAX_RANK
                                               ? inputs[i].rank : 0,
                                           inputs[i].shape, sb, sizeof sb));
        if (!inputs[i].data && node_bytes(n) > 0)
            return xfail(ex, GOBLIN_EINVAL, "input %d: data is NULL", (int)i);
    }
    for (int32_t o = 0; o < n_outputs; o++) {
        const goblin__node *n = &g->nodes[g->output_ids[o]];
        if (outputs[o].data && !same_shape(&outputs[o], n))
            return xfail(ex, GOBLIN_ESHAPE, "output %d: caller buffer is not %s %s", (int)o,
                         goblin_dtype_name(n->dtype),
                         goblin__shape_str(n->rank, n->shape, sa, sizeof sa));
    }

    for (int32_t q = 0; q < ex->p.n_given; q++) {
        const goblin__node *n = &g->nodes[ex->p.given_ids[q]];
        const goblin_tensor *t = &ex->p.given[q];
        if (!same_shape(t, n) || !goblin_tensor_is_contiguous(t) || (!t->data && node_bytes(n) > 0))
            return xfail(ex, GOBLIN_ESHAPE, "given value %d (node %d): expected contiguous %s %s", (int)q,
                         (int)ex->p.given_ids[q], goblin_dtype_name(n->dtype),
                         goblin__shape_str(n->rank, n->shape, sa, sizeof sa));
    }
    goblin_err e = GOBLIN_OK;
    int32_t nn = g->n_nodes;
    reuse_pool pool;
    memset(&pool, 0, sizeof pool);
    goblin_tensor *vals = goblin__calloc((size_t)nn, sizeof *vals);
    void **owned = goblin__calloc((size_t)nn, sizeof *owned);
    /* caller output buffer a node writes straight into, if any (-1 = none) */
    int32_t *direct = goblin__calloc((size_t)nn, sizeof *direct);
    bool *gave = goblin__calloc((size_t)n_outputs, sizeof *gave); /* outputs we allocated */
    goblin_tensor *tin = NULL;
    void **tmp = NULL;
    int32_t max_in = 1;
    for (int32_t i = 0; i < nn; i++)
        if (g->nodes[i].n_inputs > max_in) max_in = g->nodes[i].n_inputs;
    tin = goblin__calloc((size_t)max_in, sizeof *tin);
    tmp = goblin__calloc((size_t)max_in, sizeof *tmp);
    if (!vals || !owned || !direct || !gave || !tin || !tmp) {
        e = xfail(ex, GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < nn; i++) direct[i] = -1;
    for (int32_t o = 0; o < n_outputs; o++) {
        int32_t id = g->output_ids[o];
        const goblin__node *n = &g->nodes[id];
        if (!outputs[o].data || !goblin_tensor_is_contiguous(&outputs[o])) continue;
        if (n->op == GOBLIN_OP_INPUT || n->op == GOBLIN_OP_CONSTANT || ex->given[id] >= 0) continue;
        bool dup = false;
        for (int32_t q = 0; q < n_outputs; q++) dup |= q != o && g->output_ids[q] == id;
        if (!dup) direct[id] = o;
    }

    for (int32_t i = 0; i < nn; i++) {
        const goblin__node *n = &g->nodes[i];
        if (n->op == GOBLIN_OP_INPUT) {
            int32_t k = 0;
            while (g->input_ids[k] != i) k++;
            vals[i] = inputs[k];
            continue;
        }
        if (n->op == GOBLIN_OP_CONSTANT) {
            describe(&vals[i], n, n->payload);
            continue;
        }
        if (ex->given[i] >= 0) { /* borrowed, contiguous: views of it work as of a buffer */
            describe(&vals[i], n, ex->p.given[ex->given[i]].data);
            continue;
        }
        if (ex->root[i] != i) { /* a view of its root's buffer (alias_plan) */
            const goblin_tensor *rv = &vals[ex->root[i]];
            describe(&vals[i], n, (char *)rv->data + ex->voff[i] * (int64_t)goblin_dtype_size(n->dtype));
            memcpy(vals[i].strides, ex->vstr + (size_t)i * GOBLIN_MAX_RANK, sizeof(int64_t) * (size_t)n->rank);
            ex->stats.nodes_run++;
            int32_t src = ex->root[i];
            if (ex->buf_last[src] == i && owned[src]) { /* an alias nothing reads */
                reuse_give(&pool, g, direct, ex->root, i, owned[src], node_bytes(&g->nodes[src]));
                owned[src] = NULL;
            }
            continue;
        }
        int64_t t0 = ex->profile ? goblin__now_ns() : 0;
        int64_t c0 = ex->profile ? goblin__process_cpu_ns() : 0;
        const goblin__op_def *d = goblin__op_def_get(n->op);
        bool strided_ok = d && (d->flags & GOBLIN__OPF_STRIDED);
        for (int32_t j = 0; j < n->n_inputs; j++) {
            const goblin_tensor *src = &vals[n->inputs[j]];
            tmp[j] = NULL;
            tin[j] = *src;
            if (!strided_ok && !goblin_tensor_is_contiguous(src)) {
                size_t bytes = node_bytes(&g->nodes[n->inputs[j]]);
                tmp[j] = goblin__alloc(bytes);
                if (!tmp[j]) {
                    for (int32_t q = 0; q < j; q++) goblin__free(tmp[q]);
                    e = xfail(ex, GOBLIN_ENOMEM, "out of memory");
                    goto done;
                }
                describe(&tin[j], &g->nodes[n->inputs[j]], tmp[j]);
                goblin__tensor_copy(&tin[j], src);
            }
        }
        void *buf;
        if (direct[i] >= 0) {
            buf = outputs[direct[i]].data;
        } else {
            buf = reuse_take(&pool, node_bytes(n));
            if (!buf) buf = warm_take(node_bytes(n));
            if (!buf) buf = node_alloc(node_bytes(n));
            if (!buf) {
                for (int32_t q = 0; q < n->n_inputs; q++) goblin__free(tmp[q]);
                e = xfail(ex, GOBLIN_ENOMEM, "out of memory");
                goto done;
            }
            owned[i] = buf;
        }
        describe(&vals[i], n, buf);

        char msg[256] = "";
        goblin__kctx k = {1, NULL, msg, sizeof msg, run_id, ex->p.shapes_like, i};
        const goblin__node *in_nodes_stack[8];
        const goblin__node **in_nodes = in_nodes_stack;
        bool use_ref = true;
        if (ex->be != &goblin__backend_ref) {
            if (n->n_inputs > 8) in_nodes = goblin__calloc((size_t)n->n_inputs, sizeof *in_nodes);
            if (!in_nodes) {
                e = GOBLIN_ENOMEM;
            } else {
                for (int32_t j = 0; j < n->n_inputs; j++) in_nodes[j] = &g->nodes[n->inputs[j]];
                if (ex->be->supports(ex->be_ctx, n, in_nodes)) {
                    k.threads = ex->p.threads;
                    k.backend = ex->be_ctx;
                    e = ex->be->compute(&k, n, tin, n->n_inputs, &vals[i]);
                    use_ref = e == GOBLIN_ENOTSUP;
                }
                if (in_nodes != in_nodes_stack) goblin__free(in_nodes);
                if (use_ref) ex->stats.nodes_fallback++;
            }
        }
        if (use_ref && e != GOBLIN_ENOMEM) {
            msg[0] = 0;
            k.threads = 1;
            k.backend = ex->ref_ctx;
            e = goblin__backend_ref.compute(&k, n, tin, n->n_inputs, &vals[i]);
        }
        for (int32_t j = 0; j < n->n_inputs; j++) goblin__free(tmp[j]);
        if (e) {
            xfail(ex, e, "node %d (%s): %s", (int)i, goblin_op_name(n->op),
                  msg[0] ? msg : goblin_strerror(e));
            goto done;
        }
        ex->stats.nodes_run++;
        if (ex->profile) {
            char sh[160];
            fprintf(stderr, "goblin-profile: node %d %s %s %s%s %.3f ms (cpu %.3f ms)\n", (int)i,
                    goblin_op_name(n->op), goblin_dtype_name(n->dtype),
                    goblin__shape_str(n->rank, n->shape, sh, sizeof sh),
                    use_ref && ex->be != &goblin__backend_ref ? " (ref)" : "",
                    1e-6 * (double)(goblin__now_ns() - t0),
                    1e-6 * (double)(goblin__process_cpu_ns() - c0));
        }
        for (int32_t j = 0; j < n->n_inputs; j++) {
            int32_t src = ex->root[n->inputs[j]];
            if (ex->buf_last[src] == i && owned[src]) {
                reuse_give(&pool, g, direct, ex->root, i, owned[src], node_bytes(&g->nodes[src]));
                owned[src] = NULL;
            }
        }
        reuse_expire(&pool, i);
    }
    reuse_expire(&pool, INT32_MAX);

    for (int32_t o = 0; o < n_outputs; o++) {
        int32_t id = g->output_ids[o];
        if (direct[id] == o) continue;
        const goblin__node *n = &g->nodes[id];
        if (!outputs[o].data) {
            void *buf = owned[id];
            if (buf) {
                owned[id] = NULL; /* handed over to the caller */
            } else {
                buf = node_alloc(node_bytes(n));
                if (!buf) {
                    e = xfail(ex, GOBLIN_ENOMEM, "out of memory");
                    /* undo: the caller gets no library buffers on failure */
                    for (int32_t q = 0; q < o; q++)
                        if (gave[q]) {
                            goblin__free(outputs[q].data);
                            outputs[q].data = NULL;
                        }
                    goto done;
                }
            }
            goblin_tensor t;
            describe(&t, n, buf);
            if (buf != vals[id].data) goblin__tensor_copy(&t, &vals[id]);
            outputs[o] = t;
            gave[o] = true;
            vals[id] = t; /* a second output of the same node copies from here */
        } else {
            goblin__tensor_copy(&outputs[o], &vals[id]);
        }
    }
done:
    reuse_expire(&pool, INT32_MAX);
    if (owned)
        for (int32_t i = 0; i < nn; i++) warm_put(owned[i], node_bytes(&g->nodes[i]));
    {
        warm_cache *w = warm_get(); /* what the last run kept and this one did not take */
        if (w) {
            warm_flush(w, false);
            w->cur++;
        }
    }
    goblin__free(vals);
    goblin__free(owned);
    goblin__free(direct);
    goblin__free(gave);
    goblin__free(tin);
    goblin__free(tmp);
    return e;
}

goblin_err goblin_graph_eval(const goblin_graph *g, const goblin_exec_params *p,
                             const goblin_tensor *inputs, int32_t n_inputs, goblin_tensor *outputs,
                             int32_t n_outputs) {
    goblin_exec *ex;
    goblin_err e = goblin_exec_new(&ex, g, p);
    if (e) return e;
    e = goblin_exec_run(ex, inputs, n_inputs, outputs, n_outputs);
    goblin_exec_free(ex);
    return e;
}
