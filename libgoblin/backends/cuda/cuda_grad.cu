/* libgoblin/backends/cuda/cuda_grad.cu - the fused backward ops on the device:
 * conv2d (input and weight gradients), the three poolings and embedding.
 *
 * The reference (ref_grad.c) scatters each forward product into a double
 * accumulator in the forward loop order. Here every output element gathers its
 * own terms instead (no atomics), in double, visiting them in that same
 * forward order, so each sum is the reference's sum term for term and the
 * result is deterministic. batch_norm, nll_loss, cross_entropy and sdpa
 * backward have no GPU kernel yet: the executor runs them on the CPU (counted). */
#include "cuda_scalar.h"

extern "C" {
#include "ops/nn.h"
}

#define GRID_LOOP(i, n)                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);       \
         i += (int64_t)gridDim.x * blockDim.x)

template <typename T> __device__ __forceinline__ T gc_out_d(double v) {
    return gc_ty<T>::store((typename gc_ty<T>::acc_t)v); /* as goblin__store_f64 */
}

/* ---- conv2d ---------------------------------------------------------------------
 * dx[n, c, ih, iw] = sum over o in c's group, (i, j) with ih = oh*sh - ph + i*dh,
 * iw = ow*sw - pw + j*dw of g[n, o, oh, ow] * w[o, c % cpg, i, j]. For a fixed
 * output position one (i, j) at most matches, and i descending is oh ascending:
 * the order (o, oh, ow) of the reference's loop nest. */
template <typename T>
__global__ void k_conv_bwd_input(const T *go, const T *w, T *dx, int64_t total,
                                 goblin__conv_geom g) {
    int64_t cpg = g.c / g.groups, opg = g.o / g.groups;
    GRID_LOOP(t, total) {
        int64_t iw = t % g.w, ih = (t / g.w) % g.h, c = (t / g.w / g.h) % g.c;
        int64_t n = t / g.w / g.h / g.c;
        int64_t grp = c / cpg, cc = c % cpg;
        double acc = 0;
        for (int64_t o = grp * opg; o < (grp + 1) * opg; o++)
            for (int64_t i = g.kh - 1; i >= 0; i--) {
                int64_t hn = ih + g.ph - i * g.dh;
                if (hn < 0 || hn % g.sh) continue;
                int64_t oh = hn / g.sh;
                if (oh >= g.oh) continue;
                for (int64_t j = g.kw - 1; j >= 0; j--) {
                    int64_t wn = iw + g.pw - j * g.dw;
                    if (wn < 0 || wn % g.sw) continue;
                    int64_t ow = wn / g.sw;
                    if (ow >= g.ow) continue;
                    acc += gc_ld_f(go[((n * g.o + o) * g.oh + oh) * g.ow + ow]) *
                           gc_ld_f(w[((o * cpg + cc) * g.kh + i) * g.kw + j]);
                }
            }
        dx[t] = gc_out_d<T>(acc);
    }
}

/* dw[o, cc, i, j] = sum over (n, oh, ow), in that order, of g[n, o, oh, ow] * x[n, c, ih, iw]. */
template <typename T>
__global__ void k_conv_bwd_weight(const T *go, const T *x, T *dw, int64_t total,
                                  goblin__conv_geom g) {
    int64_t cpg = g.c / g.groups, opg = g.o / g.groups;
    GRID_LOOP(t, total) {
        int64_t j = t % g.kw, i = (t / g.kw) % g.kh, cc = (t / g.kw / g.kh) % cpg;
        int64_t o = t / g.kw / g.kh / cpg;
        int64_t c = (o / opg) * cpg + cc;
        double acc = 0;
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t oh = 0; oh < g.oh; oh++) {
                int64_t ih = oh * g.sh - g.ph + i * g.dh;
                if (ih < 0 || ih >= g.h) continue;
                for (int64_t ow = 0; ow < g.ow; ow++) {
                    int64_t iw = ow * g.sw - g.pw + j * g.dw;
                    if (iw < 0 || iw >= g.w) continue;
                    acc += gc_ld_f(go[((n * g.o + o) * g.oh + oh) * g.ow + ow]) *
                           gc_ld_f(x[((n * g.c + c) * g.h + ih) * g.w + iw]);
                }
            }
        dw[t] = gc_out_d<T>(acc);
    }
}

template <typename T>
static goblin_err conv_bwd_t(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                             goblin_tensor *out) {
    bool wgrad = n->op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT;
    goblin__conv_geom g;
    GC_TRYG(goblin__conv_geom_get(n, wgrad ? in[1].shape : out->shape,
                                  wgrad ? out->shape : in[1].shape, &g, c->k->msg, c->k->cap));
    int64_t total = gc_numel(out);
    if (total == 0) return GOBLIN_OK;
    unsigned b = gc_blocks(total, GC_THREADS);
    if (wgrad)
        k_conv_bwd_weight<T><<<b, GC_THREADS, 0, c->stream>>>(
            (const T *)in[0].data, (const T *)in[1].data, (T *)out->data, total, g);
    else
        k_conv_bwd_input<T><<<b, GC_THREADS, 0, c->stream>>>(
            (const T *)in[0].data, (const T *)in[1].data, (T *)out->data, total, g);
    GC_LAUNCHED(c, "conv2d backward");
    return GOBLIN_OK;
}

/* ---- pooling ------------------------------------------------------------------------
 * dx[p, ih, iw] sums, in output order (oh, ow), the gradients of the windows
 * that route to it. */

/* The element max_pool2d's window (oh, ow) selects: the first maximum, the
 * first NaN (ref_grad.c's rule); -1 if the window holds no input cell. */
template <typename T>
__device__ int64_t gc_pool_argmax(const T *xp, const goblin__pool_geom &g, int64_t oh, int64_t ow) {
    double best = -INFINITY;
    int64_t at = -1;
    for (int64_t i = 0; i < g.kh; i++) {
        int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t j = 0; j < g.kw; j++) {
            int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw < 0 || iw >= g.w) continue;
            double v = gc_ld_f(xp[ih * g.w + iw]);
            if (at < 0 || v > best || v != v) {
                best = v;
                at = ih * g.w + iw;
            }
            if (best != best) return at;
        }
    }
    return at;
}

template <typename T>
__global__ void k_max_pool_bwd(const T *go, const T *x, T *dx, int64_t total, goblin__pool_geom g) {
    GRID_LOOP(t, total) {
        int64_t iw = t % g.w, ih = (t / g.w) % g.h, p = t / g.w / g.h;
        const T *xp = x + p * g.h * g.w;
        const T *gp = go + p * g.oh * g.ow;
        double acc = 0;
        /* candidate windows containing (ih, iw): i descending is oh ascending */
        for (int64_t i = g.kh - 1; i >= 0; i--) {
            int64_t hn = ih + g.ph - i * g.dh;
            if (hn < 0 || hn % g.sh) continue;
            int64_t oh = hn / g.sh;
            if (oh >= g.oh) continue;
            for (int64_t j = g.kw - 1; j >= 0; j--) {
                int64_t wn = iw + g.pw - j * g.dw;
                if (wn < 0 || wn % g.sw) continue;
                int64_t ow = wn / g.sw;
                if (ow >= g.ow) continue;
                if (gc_pool_argmax(xp, g, oh, ow) == ih * g.w + iw) acc += gc_ld_f(gp[oh * g.ow + ow]);
            }
        }
        dx[t] = gc_out_d<T>(acc);
    }
}

template <typename T>
__global__ void k_avg_pool_bwd(const T *go, T *dx, int64_t total, goblin__pool_geom g) {
    GRID_LOOP(t, total) {
        int64_t iw = t % g.w, ih = (t / g.w) % g.h, p = t / g.w / g.h;
        const T *gp = go + p * g.oh * g.ow;
        double acc = 0;
        /* windows start at oh*sh - ph and span kh rows: oh from the first that reaches ih */
        int64_t oh0 = (ih + g.ph - g.kh + 1) / g.sh;
        if (oh0 < 0) oh0 = 0;
        int64_t ow0 = (iw + g.pw - g.kw + 1) / g.sw;
        if (ow0 < 0) ow0 = 0;
        for (int64_t oh = oh0 > 0 ? oh0 - 1 : 0; oh < g.oh; oh++) {
            int64_t h0 = oh * g.sh - g.ph;
            if (h0 > ih) break;
            int64_t h1 = h0 + g.kh < g.h + g.ph ? h0 + g.kh : g.h + g.ph;
            for (int64_t ow = ow0 > 0 ? ow0 - 1 : 0; ow < g.ow; ow++) {
                int64_t w0 = ow * g.sw - g.pw;
                if (w0 > iw) break;
                int64_t w1 = w0 + g.kw < g.w + g.pw ? w0 + g.kw : g.w + g.pw;
                int64_t pool = (h1 - h0) * (w1 - w0);
                int64_t a0 = h0 < 0 ? 0 : h0, a1 = h1 > g.h ? g.h : h1;
                int64_t b0 = w0 < 0 ? 0 : w0, b1 = w1 > g.w ? g.w : w1;
                if (a0 >= a1 || b0 >= b1) continue;
                if (ih < a0 || ih >= a1 || iw < b0 || iw >= b1) continue;
                int64_t div = g.count_include_pad ? pool : (a1 - a0) * (b1 - b0);
                acc += gc_ld_f(gp[oh * g.ow + ow]) / (double)div;
            }
        }
        dx[t] = gc_out_d<T>(acc);
    }
}

/* hw/ww: adaptive windows [start, end) per output row/column (host-computed). */
template <typename T>
__global__ void k_adaptive_bwd(const T *go, T *dx, int64_t total, int64_t h, int64_t w,
                               int64_t oh, int64_t ow, const int64_t *hw, const int64_t *ww) {
    GRID_LOOP(t, total) {
        int64_t b = t % w, a = (t / w) % h, p = t / w / h;
        const T *gp = go + p * oh * ow;
        double acc = 0;
        for (int64_t i = 0; i < oh; i++) {
            if (a < hw[2 * i] || a >= hw[2 * i + 1]) continue;
            for (int64_t j = 0; j < ow; j++) {
                if (b < ww[2 * j] || b >= ww[2 * j + 1]) continue;
                acc += gc_ld_f(gp[i * ow + j]) /
                       (double)((hw[2 * i + 1] - hw[2 * i]) * (ww[2 * j + 1] - ww[2 * j]));
            }
        }
        dx[t] = gc_out_d<T>(acc);
    }
}

template <typename T>
static goblin_err pool_bwd_t(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                             goblin_tensor *out) {
    int64_t total = gc_numel(out);
    if (total == 0) return GOBLIN_OK;
    unsigned b = gc_blocks(total, GC_THREADS);
    if (n->op == GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD) {
        int32_t r = out->rank;
        int64_t h = out->shape[r - 2], w = out->shape[r - 1];
        int64_t oh = in[0].shape[r - 2], ow = in[0].shape[r - 1];
        size_t bytes = sizeof(int64_t) * 2 * (size_t)(oh + ow);
        int64_t *win = (int64_t *)goblin__alloc(bytes);
        if (!win) return GOBLIN_ENOMEM;
        for (int64_t i = 0; i < oh; i++) goblin__adaptive_window(i, h, oh, &win[2 * i], &win[2 * i + 1]);
        for (int64_t j = 0; j < ow; j++)
            goblin__adaptive_window(j, w, ow, &win[2 * oh + 2 * j], &win[2 * oh + 2 * j + 1]);
        int64_t *dwin = NULL;
        goblin_err e = gc_scratch(c, bytes, (void **)&dwin);
        cudaError_t ce = cudaSuccess;
        if (e == GOBLIN_OK &&
            (ce = cudaMemcpyAsync(dwin, win, bytes, cudaMemcpyHostToDevice, c->stream)) != cudaSuccess)
            e = gc_fail(c->k->msg, c->k->cap, ce, "copying pooling windows");
        if (e == GOBLIN_OK) e = gc_sync(c, "copying pooling windows");
        goblin__free(win);
        if (e != GOBLIN_OK) return e;
        k_adaptive_bwd<T><<<b, GC_THREADS, 0, c->stream>>>((const T *)in[0].data, (T *)out->data,
                                                          total, h, w, oh, ow, dwin, dwin + 2 * oh);
    } else {
        goblin__pool_geom g;
        GC_TRYG(goblin__pool_geom_get(n, out->rank, out->shape, &g, c->k->msg, c->k->cap));
        if (n->op == GOBLIN_OP_MAX_POOL2D_BACKWARD)
            k_max_pool_bwd<T><<<b, GC_THREADS, 0, c->stream>>>(
                (const T *)in[0].data, (const T *)in[1].data, (T *)out->data, total, g);
        else
            k_avg_pool_bwd<T><<<b, GC_THREADS, 0, c->stream>>>((const T *)in[0].data,
                                                              (T *)out->data, total, g);
    }
    GC_LAUNCHED(c, "pool backward");
    return GOBLIN_OK;
}

/* ---- embedding -----------------------------------------------------------------------
 * dw[v, d] = sum of g[i, d] over the positions i (row-major) whose index is v.
 * The positions of each row are listed on the host (a stable counting sort of
 * the indices, which are small next to g), so each thread sums its own list in
 * the reference's order. */
template <typename T>
__global__ void k_emb_bwd(const T *go, const int64_t *start, const int64_t *pos, T *dw,
                          int64_t total, int64_t dim) {
    GRID_LOOP(t, total) {
        int64_t v = t / dim, d = t % dim;
        double acc = 0;
        for (int64_t q = start[v]; q < start[v + 1]; q++) acc += gc_ld_f(go[pos[q] * dim + d]);
        dw[t] = gc_out_d<T>(acc);
    }
}

template <typename T>
static goblin_err emb_bwd_t(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            goblin_tensor *out) {
    const goblin_tensor *idx = &in[1];
    int64_t V = out->shape[0], dim = out->shape[1], cnt = gc_numel(idx);
    size_t esz = goblin_dtype_size(idx->dtype);
    int64_t *host = (int64_t *)goblin__alloc(sizeof(int64_t) * (size_t)(2 * cnt + V + 2));
    void *raw = goblin__alloc(esz * (size_t)(cnt ? cnt : 1));
    if (!host || !raw) {
        goblin__free(host);
        goblin__free(raw);
        return GOBLIN_ENOMEM;
    }
    goblin_err e = GOBLIN_OK;
    cudaError_t ce = cudaSuccess;
    if (cnt &&
        (ce = cudaMemcpyAsync(raw, idx->data, esz * (size_t)cnt, cudaMemcpyDeviceToHost, c->stream)) != cudaSuccess)
        e = gc_fail(c->k->msg, c->k->cap, ce, "reading the indices");
    if (e == GOBLIN_OK) e = gc_sync(c, "reading the indices");
    int64_t *start = host, *pos = host + V + 1, *val = host + V + 1 + cnt;
    for (int64_t i = 0; e == GOBLIN_OK && i < cnt; i++) {
        val[i] = esz == 8 ? ((const int64_t *)raw)[i] : ((const int32_t *)raw)[i];
        if (val[i] < 0 || val[i] >= V)
            e = goblin__errf(c->k->msg, c->k->cap, GOBLIN_EINDEX,
                             "index %lld at position %lld is outside [0, %lld)", (long long)val[i],
                             (long long)i, (long long)V);
    }
    if (e == GOBLIN_OK) {
        for (int64_t v = 0; v <= V; v++) start[v] = 0;
        for (int64_t i = 0; i < cnt; i++) start[val[i] + 1]++;
        for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
        /* stable placement: val's slots are reused as per-row cursors' scratch */
        int64_t *cur = (int64_t *)goblin__alloc(sizeof(int64_t) * (size_t)(V ? V : 1));
        if (!cur) {
            e = GOBLIN_ENOMEM;
        } else {
            for (int64_t v = 0; v < V; v++) cur[v] = start[v];
            for (int64_t i = 0; i < cnt; i++) pos[cur[val[i]]++] = i;
            goblin__free(cur);
        }
    }
    int64_t *dev = NULL;
    size_t dbytes = sizeof(int64_t) * (size_t)(V + 1 + cnt);
    if (e == GOBLIN_OK) e = gc_scratch(c, dbytes, (void **)&dev);
    if (e == GOBLIN_OK &&
        (ce = cudaMemcpyAsync(dev, host, dbytes, cudaMemcpyHostToDevice, c->stream)) != cudaSuccess)
        e = gc_fail(c->k->msg, c->k->cap, ce, "copying the index lists");
    if (e == GOBLIN_OK) e = gc_sync(c, "copying the index lists");
    goblin__free(host);
    goblin__free(raw);
    if (e != GOBLIN_OK) return e;
    int64_t total = gc_numel(out);
    if (total == 0) return GOBLIN_OK;
    k_emb_bwd<T><<<gc_blocks(total, GC_THREADS), GC_THREADS, 0, c->stream>>>(
        (const T *)in[0].data, dev, dev + V + 1, (T *)out->data, total, dim);
    GC_LAUNCHED(c, "embedding backward");
    return GOBLIN_OK;
}

static goblin_err k_grad(gc_call *c, const goblin__node *n, const goblin_tensor *in, int32_t n_in,
                         goblin_tensor *out) {
    goblin_err e = GOBLIN_ENOTSUP;
    switch (n->op) {
    case GOBLIN_OP_CONV2D_BACKWARD_INPUT:
    case GOBLIN_OP_CONV2D_BACKWARD_WEIGHT:
        GC_DISPATCH_FLOAT(out->dtype, e = conv_bwd_t<T>(c, n, in, out));
        break;
    case GOBLIN_OP_MAX_POOL2D_BACKWARD:
    case GOBLIN_OP_AVG_POOL2D_BACKWARD:
    case GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        GC_DISPATCH_FLOAT(out->dtype, e = pool_bwd_t<T>(c, n, in, out));
        break;
    case GOBLIN_OP_EMBEDDING_BACKWARD:
        GC_DISPATCH_FLOAT(out->dtype, e = emb_bwd_t<T>(c, n, in, out));
        break;
    default: break;
    }
    if (e == GOBLIN_ENOTSUP)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: no kernel for %s of %s",
                            goblin_op_name(n->op), goblin_dtype_name(out->dtype));
    return e;
}

void gc_register_grad(gc_entry *t) {
    static const goblin_op ops[] = {
        GOBLIN_OP_CONV2D_BACKWARD_INPUT, GOBLIN_OP_CONV2D_BACKWARD_WEIGHT,
        GOBLIN_OP_MAX_POOL2D_BACKWARD,   GOBLIN_OP_AVG_POOL2D_BACKWARD,
        GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD, GOBLIN_OP_EMBEDDING_BACKWARD};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) t[ops[i]].fn = k_grad;
}
