/* libgoblin/node/checked.c - CHECKED (verify.h, docs/verification.md "Checked
 * execution"): a graph task's products (matmuls) come back with its outputs and are
 * checked by Freivalds' algorithm; the node evaluates every other node itself from the
 * task's inputs and those products, and compares its outputs with the worker's. No
 * replica is trusted, so workers that collude gain nothing. Planning: which nodes are
 * products, the graph sent (the products as extra outputs) and the node's graph (the
 * products' operands as outputs); then the judgement of a result. */
#include "node_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/secret.h"
#include "core/node.h"
#include "graph/graph_impl.h"
#include "graph/rebatch.h"
#include "ops/nn.h"
#include "verify/product.h"

/* Elementwise and data-movement ops are bound by memory: one element touched costs
 * about as much time as this many multiply-adds of a matmul (BLIS at ~100 GF/s against
 * a few G elements/s). A rough weight: the share is measured in bench/bench_train.py. */
#define ELEM_MACS 8.0
#define FREIVALDS_VECTORS 4.0

static double numel_of(const goblin__node *n) {
    double e = 1;
    for (int32_t d = 0; d < n->rank; d++) e *= (double)n->shape[d];
    return e;
}

/* Estimated cost of a node the node evaluates itself, in multiply-adds. */
static double cheap_macs(const goblin_graph *g, const goblin__node *n) {
    const goblin__node *in0 = n->n_inputs > 0 ? &g->nodes[n->inputs[0]] : NULL;
    const goblin__node *in1 = n->n_inputs > 1 ? &g->nodes[n->inputs[1]] : NULL;
    double touched = numel_of(n);
    for (int32_t j = 0; j < n->n_inputs; j++) touched += numel_of(&g->nodes[n->inputs[j]]);
    switch (n->op) {
    case GOBLIN_OP_MATMUL: /* a product that cannot be checked: computed */
        return in0 && in0->rank >= 1 ? numel_of(n) * (double)in0->shape[in0->rank - 1] : touched;
    case GOBLIN_OP_SDPA:
    case GOBLIN_OP_SDPA_BACKWARD:
        if (in0 && in1 && in0->rank >= 2 && in1->rank >= 2) {
            double qk = numel_of(in0) * (double)in1->shape[in1->rank - 2];
            return (n->op == GOBLIN_OP_SDPA ? 2.0 : 5.0) * qk;
        }
        return touched * ELEM_MACS;
    case GOBLIN_OP_CONV2D:
        return in1 && in1->shape[0] > 0 ? numel_of(n) * numel_of(in1) / (double)in1->shape[0] : touched;
    case GOBLIN_OP_CONV2D_BACKWARD_INPUT:
    case GOBLIN_OP_CONV2D_BACKWARD_WEIGHT: {
        /* grad_out [N, O, OH, OW] times C/groups * kh * kw per element */
        const goblin__node *w = n->op == GOBLIN_OP_CONV2D_BACKWARD_INPUT ? in1 : n;
        return in0 && w && w->shape[0] > 0 ? numel_of(in0) * numel_of(w) / (double)w->shape[0] : touched;
    }
    default: return touched * ELEM_MACS;
    }
}

/* A product worth checking rather than computing: checkable, and each of its matmuls
 * (per batch item, or the whole batch folded) large enough that Freivalds' passes, O(v
 * (mK + Kn + mn)) plus a fixed cost per check, are a small part of its m n K (a batch of
 * attention's small per-head products is cheaper to compute again). */
#define FV_CALL_MACS 20000.0
#define FV_MIN_GAIN 2.0
static bool is_product(const goblin_graph *g, const goblin__node *n) {
    if (n->op != GOBLIN_OP_MATMUL || n->n_inputs < 2 || n->n_inputs > 3) return false;
    const goblin__node *a = &g->nodes[n->inputs[0]], *b = &g->nodes[n->inputs[1]];
    if (!goblin__product_checkable(n, a, b, n->n_inputs == 3 ? &g->nodes[n->inputs[2]] : NULL)) return false;
    double items = 1, bitems = 1;
    for (int32_t d = 0; d < n->rank - 2; d++) items *= (double)n->shape[d];
    for (int32_t d = 0; d < b->rank - 2; d++) bitems *= (double)b->shape[d];
    bool ta = goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0) != 0;
    double m = (double)n->shape[n->rank - 2], nc = (double)n->shape[n->rank - 1];
    double k = (double)(ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1]);
    if (bitems == 1 && !ta && a->rank == n->rank) m *= items, items = 1; /* folded (product.c) */
    double fv = FREIVALDS_VECTORS * (m * k + k * nc + m * nc) + FV_CALL_MACS;
    return m * nc * k >= FV_MIN_GAIN * fv;
}

/* Attention: the node recomputes a secret sample of the leading batch dim (one in
 * SDPA_SAMPLE_DIV, at least one) and compares (docs/verification.md, Attention). */
#define SDPA_SAMPLE_DIV 8

/* The kinds of heavy nodes: their values come back with the outputs. */
enum { H_NONE, H_PRODUCT, H_CONV, H_SDPA };

static bool is_sdpa(const goblin_graph *g, const goblin__node *n) {
    if ((n->op != GOBLIN_OP_SDPA && n->op != GOBLIN_OP_SDPA_BACKWARD) || n->rank < 3 || n->shape[0] < 2) return false;
    if (n->dtype != GOBLIN_DTYPE_F32 && n->dtype != GOBLIN_DTYPE_F64) return false;
    for (int32_t q = 0; q < n->n_inputs; q++) {
        const goblin__node *x = &g->nodes[n->inputs[q]];
        if (x->rank == n->rank && x->shape[0] != n->shape[0] && x->shape[0] != 1) return false;
    }
    return true;
}

/* Which kind of heavy node @p n is (H_NONE: the node evaluates it), its multiply-adds
 * in *macs and the estimated cost of its check in *check. */
static int heavy_kind(const goblin_graph *g, const goblin__node *n, double *macs, double *check) {
    *macs = *check = 0;
    if (n->op == GOBLIN_OP_INPUT || n->op == GOBLIN_OP_CONSTANT) return H_NONE;
    if (is_product(g, n)) {
        *macs = goblin__product_macs(n, &g->nodes[n->inputs[0]]);
        *check = FREIVALDS_VECTORS * (numel_of(n) + numel_of(&g->nodes[n->inputs[0]]) +
                                      numel_of(&g->nodes[n->inputs[1]]));
        if (n->n_inputs == 3) *check += 2 * numel_of(&g->nodes[n->inputs[0]]); /* [a | 1] copied */
        return H_PRODUCT;
    }
    if (n->n_inputs >= 2) {
        const goblin__node *a = &g->nodes[n->inputs[0]], *b = &g->nodes[n->inputs[1]];
        const goblin__node *bias = n->n_inputs == 3 ? &g->nodes[n->inputs[2]] : NULL;
        if (goblin__conv_checkable(n, a, b, bias)) {
            double bytes = goblin__conv_check_bytes(n, a, b, bias != NULL);
            double m = goblin__conv_macs(n, a, b);
            /* the patches copied once, then the passes: (vectors + 1) x the patches,
             * plus B and C (bytes / element size is A + B + C) */
            double el = bytes / (double)goblin_dtype_size(n->dtype);
            double groups = (double)goblin__attr_i(n, GOBLIN_ATTR_GROUPS, 1);
            double ck = groups * ((FREIVALDS_VECTORS + 1) * el + FV_CALL_MACS);
            if (bytes <= (double)GOBLIN_CONV_CHECK_MAX_BYTES && m >= FV_MIN_GAIN * ck) {
                *macs = m;
                *check = ck;
                return H_CONV;
            }
        }
    }
    if (is_sdpa(g, n)) {
        double m = cheap_macs(g, n);
        double frac = ceil((double)n->shape[0] / SDPA_SAMPLE_DIV) / (double)n->shape[0];
        *macs = m;
        *check = frac * m * (n->op == GOBLIN_OP_SDPA ? 2.0 : 1.0); /* the forward's scale pass */
        return H_SDPA;
    }
    return H_NONE;
}

static void free_plan(gvariant *v) {
    goblin_graph_free(v->wg);
    goblin_graph_free(v->cg);
    goblin__free(v->heavy);
    v->wg = v->cg = NULL;
    v->heavy = NULL;
    v->n_heavy = 0;
}

void goblin__node_checked_free(gvariant *v) { free_plan(v); }

goblin_err goblin__node_checked_plan(const gjob *G, const goblin_graph *g, gvariant *v, bool any_share,
                                     bool *applies, char *why, size_t cap) {
    const goblin_graph *cg0 = v->g;
    *applies = false;
    double heavy = 0, cheap = 0, fv = 0;
    int32_t nh = 0;
    for (int32_t i = 0; i < cg0->n_nodes; i++) {
        const goblin__node *n = &cg0->nodes[i];
        if (n->op == GOBLIN_OP_INPUT || n->op == GOBLIN_OP_CONSTANT) continue;
        double macs, check;
        if (heavy_kind(cg0, n, &macs, &check) != H_NONE) {
            nh++;
            heavy += macs;
            fv += check;
        } else {
            cheap += cheap_macs(cg0, n);
        }
    }
    if (nh == 0) {
        snprintf(why, cap, "the graph has no product (f32/f64 matmul, alpha 1, no c term but a bias; convolution; "
                 "attention) to check");
        return GOBLIN_OK;
    }
    double share = (cheap + fv) / (heavy + cheap);
    /* Checked execution applies when the node's estimated work (every node but the
     * products, plus the Freivalds checks) is at most checked_max_share of the task's. */
    if (share > G->max_share && !any_share) {
        snprintf(why, cap, "the node would do about %.0f %% of the work of a task (more than %.0f %%: %d products "
                 "of %.3g multiply-adds, the rest about %.3g)", 100 * share, 100 * G->max_share, (int)nh, heavy,
                 cheap);
        return GOBLIN_OK;
    }
    if (G->n_out + nh > GOBLIN_GRAPH_JOB_MAX_IO) {
        snprintf(why, cap, "the task would return %d tensors (at most %d)", (int)(G->n_out + nh),
                 (int)GOBLIN_GRAPH_JOB_MAX_IO);
        return GOBLIN_OK;
    }
    goblin_err e;
    if (!(v->heavy = goblin__calloc((size_t)nh, sizeof *v->heavy))) return GOBLIN_ENOMEM;
    for (int32_t i = 0, h = 0; i < cg0->n_nodes; i++) {
        double macs, check;
        if (heavy_kind(cg0, &cg0->nodes[i], &macs, &check) != H_NONE) v->heavy[h++] = i;
    }
    v->n_heavy = nh;
    /* The worker's graph: the job's outputs, then each product. The node's: the job's
     * outputs, then each product's operands (a, b and a bias). Same nodes as v->g. */
    if ((e = goblin__graph_rebatch_at(g, G->ax, v->rows, &v->wg, why, cap)) != GOBLIN_OK ||
        (e = goblin__graph_rebatch_at(g, G->ax, v->rows, &v->cg, why, cap)) != GOBLIN_OK) {
        free_plan(v);
        return e;
    }
    for (int32_t h = 0; h < nh && !e; h++) {
        const goblin__node *n = &v->cg->nodes[v->heavy[h]];
        e = goblin_graph_output(v->wg, v->heavy[h]);
        for (int32_t q = 0; q < n->n_inputs && !e; q++) e = goblin_graph_output(v->cg, n->inputs[q]);
    }
    if (e) {
        free_plan(v);
        return e;
    }
    *applies = true;
    return GOBLIN_OK;
}

bool goblin__node_checked_shape_ok(const goblin_job *j, int64_t ti, const goblin__wire_result *r,
                                   goblin_verify_reason *why) {
    const gvariant *v = gvar(j, ti);
    int32_t no = j->g->n_out;
    *why = GOBLIN_VERIFY_SHAPE;
    if ((int64_t)r->n_outputs != no + v->n_heavy) return false;
    for (int32_t h = 0; h < v->n_heavy; h++) {
        const goblin__node *n = &v->wg->nodes[v->heavy[h]];
        const goblin_tensor *a = &r->outputs[no + h];
        if (a->dtype != n->dtype) {
            *why = GOBLIN_VERIFY_DTYPE;
            return false;
        }
        if (a->rank != n->rank || memcmp(a->shape, n->shape, (size_t)n->rank * sizeof(int64_t)) != 0 ||
            (numel_of(n) > 0 && !a->data) || !goblin_tensor_is_contiguous(a))
            return false;
    }
    return true;
}

/* Evaluate the node's graph of task @p ti with the claimed products @p prod: *out gets
 * one new contiguous buffer per output of v->cg (the job's outputs, then each product's
 * operands, 2 or 3). */
static goblin_err eval_cheap(goblin_node *n, goblin_job *j, int64_t ti, const goblin_tensor *prod, void ***out) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    int32_t nout = goblin_graph_output_count(v->cg);
    goblin_tensor *in = goblin__calloc((size_t)G->n_in + 1, sizeof *in);
    goblin_tensor *ot = goblin__calloc((size_t)nout, sizeof *ot);
    void **bufs = goblin__calloc((size_t)nout, sizeof *bufs);
    goblin_err e = GOBLIN_ENOMEM;
    if (!in || !ot || !bufs) goto fail;
    for (int32_t i = 0; i < G->n_in; i++) in[i] = goblin__node_task_input(j, ti, i);
    for (int32_t o = 0; o < nout; o++) {
        const goblin__node *nd = &v->cg->nodes[goblin_graph_output_id(v->cg, o)];
        goblin_tensor_init(&ot[o], nd->dtype, nd->rank, nd->shape, NULL);
        size_t bytes = goblin__node_out_bytes(&ot[o]);
        if (!(bufs[o] = goblin__alloc(bytes ? bytes : 1))) goto fail;
        ot[o].data = bufs[o];
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    ep.threads = n->p.recompute_threads;
    ep.given_ids = v->heavy;
    ep.given = prod;
    ep.n_given = v->n_heavy;
    if ((e = goblin_graph_eval(v->cg, &ep, in, G->n_in, ot, nout)) != GOBLIN_OK) goto fail;
    goblin__free(in);
    goblin__free(ot);
    *out = bufs;
    return GOBLIN_OK;
fail:
    goblin__free(in);
    goblin__free(ot);
    goblin__node_free_bufs(&bufs, nout);
    return e;
}

/* ---- attention: a secret sample recomputed ----------------------------------------- */

/* Rows @p idx [cnt] of dim 0 of contiguous @p t, into a new buffer (*dst its tensor). */
static void *gather0(const goblin_tensor *t, const int64_t *idx, int64_t cnt, goblin_tensor *dst) {
    int64_t shape[GOBLIN_MAX_RANK];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = cnt;
    goblin_tensor_init(dst, t->dtype, t->rank, shape, NULL);
    size_t row = goblin__node_out_bytes(dst) / (size_t)(cnt > 0 ? cnt : 1);
    char *buf = goblin__alloc(row * (size_t)cnt + 1);
    if (!buf) return NULL;
    for (int64_t i = 0; i < cnt; i++) memcpy(buf + (size_t)i * row, (const char *)t->data + (size_t)idx[i] * row, row);
    dst->data = buf;
    return buf;
}

static double ld_el(const goblin_tensor *t, int64_t i) {
    return t->dtype == GOBLIN_DTYPE_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

/* SDPA's contract scale (its contract text: (1 + 2 T) sum_j p_j |v_j| with T = |scale|
 * max_j sum_e |q_e k_je|), bounded above by (1 + 2 T) max_j |v_jc| (the weights p sum to
 * at most 1; a mask only removes keys), per element of [items, L, Ev], for q, k, v of
 * the output's batch shape. */
static void sdpa_scale(const goblin__node *n, const goblin_tensor *q, const goblin_tensor *k, const goblin_tensor *v,
                       double *sc) {
    int32_t r = n->rank;
    int64_t L = q->shape[r - 2], E = q->shape[r - 1], S = k->shape[r - 2], Ev = v->shape[r - 1], items = 1;
    for (int32_t d = 0; d < r - 2; d++) items *= q->shape[d];
    double scale = fabs(goblin__sdpa_scale(n, E));
    for (int64_t b = 0; b < items; b++)
        for (int64_t i = 0; i < L; i++) {
            double T = 0;
            for (int64_t j = 0; j < S; j++) {
                double t = 0;
                for (int64_t e = 0; e < E; e++)
                    t += fabs(ld_el(q, (b * L + i) * E + e) * ld_el(k, (b * S + j) * E + e));
                if (t > T) T = t;
            }
            T *= scale * (1 + 1e-12) * (1 + 2 * (double)(E + 2) * 0x1p-53);
            for (int64_t c = 0; c < Ev; c++) {
                double vm = 0;
                for (int64_t j = 0; j < S; j++) vm = fmax(vm, fabs(ld_el(v, (b * S + j) * Ev + c)));
                sc[(b * L + i) * Ev + c] = (1 + 2 * T) * vm;
            }
        }
}

/* Judge the claimed value @p claimed of SDPA or SDPA_BACKWARD node @p n from its
 * operands @p op as the node computed them: the node evaluates the op on a secret
 * sample of the leading batch dim (one in SDPA_SAMPLE_DIV of its entries, at least
 * one) and compares those entries under the op's contract: the forward with its scale
 * (a disagreement is a REJECT), the backward ops without one (ESCALATE). */
static goblin_err sdpa_check(goblin_node *nd, const goblin__node *n, const goblin_tensor *op,
                             const goblin_tensor *claimed, goblin_verdict *out) {
    int64_t B = n->shape[0], cnt = (B + SDPA_SAMPLE_DIV - 1) / SDPA_SAMPLE_DIV;
    int32_t ni = n->n_inputs;
    int64_t *idx = goblin__alloc((size_t)cnt * sizeof *idx);
    goblin_tensor sub[8], mine, cl, sct;
    void *bufs[8] = {0}, *mbuf = NULL, *cbuf = NULL;
    double *sc = NULL;
    goblin_graph *sg = NULL;
    goblin_err e = idx ? GOBLIN_OK : GOBLIN_ENOMEM;
    if (ni > 8) e = GOBLIN_EINVAL;
    if (!e) e = goblin_verify_sample_indices(goblin__secret_u64(), B, cnt, idx);
    if (!e) e = goblin_graph_new(&sg);
    int32_t ids[8], oid = -1;
    bool full = true; /* q, k and v of the output's batch shape */
    for (int32_t q = 0; q < ni && !e; q++) {
        const goblin_tensor *t = &op[q];
        bool per = t->rank == n->rank && t->shape[0] == B;
        if (q < 3) {
            full = full && per;
            for (int32_t d = 1; full && d < n->rank - 2; d++) full = t->shape[d] == n->shape[d];
        }
        if (per) {
            if (!(bufs[q] = gather0(t, idx, cnt, &sub[q]))) e = GOBLIN_ENOMEM;
        } else {
            sub[q] = *t;
        }
        if (!e) e = goblin_graph_input(sg, sub[q].dtype, sub[q].rank, sub[q].shape, &ids[q]);
    }
    if (!e) e = goblin_graph_add(sg, n->op, ids, ni, n->attrs, n->n_attrs, &oid);
    if (!e) e = goblin_graph_output(sg, oid);
    if (!e && !(cbuf = gather0(claimed, idx, cnt, &cl))) e = GOBLIN_ENOMEM;
    if (!e) {
        mine = cl;
        if (!(mbuf = goblin__alloc(goblin__node_out_bytes(&cl) + 1))) e = GOBLIN_ENOMEM;
        mine.data = mbuf;
    }
    if (!e) {
        goblin_exec_params ep;
        goblin_exec_params_default(&ep);
        ep.backend = nd->p.recompute_backend;
        ep.threads = nd->p.recompute_threads;
        e = goblin_graph_eval(sg, &ep, sub, ni, &mine, 1);
    }
    if (!e) {
        int32_t r = n->rank;
        int64_t kk = op[1].shape[op[1].rank - 2] + op[0].shape[op[0].rank - 1] + 6; /* E + S + 6 */
        if (n->op == GOBLIN_OP_SDPA && full) {
            if (!(sc = goblin__alloc((size_t)goblin_tensor_numel(&cl) * sizeof(double) + 1))) e = GOBLIN_ENOMEM;
            if (!e) {
                sdpa_scale(n, &sub[0], &sub[1], &sub[2], sc);
                goblin_tensor_init(&sct, GOBLIN_DTYPE_F64, r, cl.shape, sc);
                e = goblin_verify_compare_scaled(n->op, cl.dtype, kk, &mine, &cl, &sct, out);
            }
        } else {
            e = goblin_verify_compare(n->op, cl.dtype, kk, &mine, &cl, out);
        }
        if (!e && out->worst_index >= 0) { /* a flat index of the sample: of the claim */
            int64_t per = goblin_tensor_numel(&cl) / (cnt > 0 ? cnt : 1);
            out->worst_index = idx[out->worst_index / per] * per + out->worst_index % per;
        }
    }
    goblin_graph_free(sg);
    for (int32_t q = 0; q < 8; q++) goblin__free(bufs[q]);
    goblin__free(mbuf);
    goblin__free(cbuf);
    goblin__free(sc);
    goblin__free(idx);
    return e;
}

/* Freivalds' check of every claimed product of task @p ti against its operands as the
 * node computed them (@p mine: v->cg's outputs). The worst verdict; the first REJECT. */
static goblin_err check_products(goblin_node *n, const goblin_job *j, int64_t ti, const goblin_tensor *prod,
                                 void **mine, goblin_verdict *worst) {
    const gvariant *v = gvar(j, ti);
    int32_t slot = j->g->n_out; /* v->cg's outputs: the job's, then each product's operands */
    memset(worst, 0, sizeof *worst);
    worst->worst_index = -1;
    for (int32_t h = 0; h < v->n_heavy; h++) {
        const goblin__node *nd = &v->cg->nodes[v->heavy[h]];
        goblin_tensor op[8];
        for (int32_t q = 0; q < nd->n_inputs; q++) {
            const goblin__node *x = &v->cg->nodes[nd->inputs[q]];
            goblin_tensor_init(&op[q], x->dtype, x->rank, x->shape, mine[slot++]);
        }
        goblin_verdict vd;
        goblin_err e;
        if (nd->op == GOBLIN_OP_MATMUL)
            e = goblin__product_check(nd, &op[0], &op[1], nd->n_inputs == 3 ? &op[2] : NULL, &prod[h],
                                      goblin__secret_u64(), &vd);
        else if (nd->op == GOBLIN_OP_SDPA || nd->op == GOBLIN_OP_SDPA_BACKWARD)
            e = sdpa_check(n, nd, op, &prod[h], &vd);
        else
            e = goblin__conv_check(nd, &op[0], &op[1], nd->n_inputs == 3 ? &op[2] : NULL, &prod[h],
                                   goblin__secret_u64(), 0, &vd);
        if (e) return e;
        n->st.products_checked++;
        if (vd.kind > worst->kind) {
            *worst = vd;
            if (vd.kind == GOBLIN_VERDICT_REJECT) {
                goblin__node_log(n, GOBLIN_LOG_WARN, "job %llu task %lld: product %d (node %d) rejected (%s, %.3g x "
                                 "the bound at row %lld)", (unsigned long long)j->id, (long long)ti, (int)h,
                                 (int)v->heavy[h], goblin_verify_reason_name(vd.reason), vd.worst_ratio,
                                 (long long)vd.worst_index);
                return GOBLIN_OK;
            }
        }
    }
    return GOBLIN_OK;
}

void goblin__node_graph_checked(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, const goblin_tensor *res) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    int32_t no = G->n_out, nout = goblin_graph_output_count(v->cg);
    const goblin_tensor *prod = res + no;
    for (int32_t h = 0; h < v->n_heavy; h++) n->st.products_bytes += (int64_t)goblin__node_out_bytes(&prod[h]);
    void **mine = NULL;
    goblin_verdict vd;
    memset(&vd, 0, sizeof vd);
    vclock t0 = goblin__node_verify_begin();
    goblin_err e = eval_cheap(n, j, ti, prod, &mine);
    if (!e) e = check_products(n, j, ti, prod, mine, &vd);
    goblin__node_verify_end(n, t0);
    if (e || vd.kind == GOBLIN_VERDICT_ESCALATE) {
        /* Inconclusive (NaN or inf among the operands, magnitudes near overflow) or the
         * node could not evaluate: it computes the whole task and judges by that. */
        if (e) goblin__node_log(n, GOBLIN_LOG_WARN, "checked execution of task %lld failed on the node (%s): "
                                "recomputing it", (long long)ti, goblin_strerror(e));
        else n->st.results_escalated++;
        goblin__node_free_bufs(&mine, nout);
        goblin__node_graph_decide(n, j, ti, 1, &pi, &res);
        return;
    }
    if (vd.kind == GOBLIN_VERDICT_REJECT) {
        /* A product provably wrong: whatever the outputs say, the worker is caught; the
         * node's values derived from it are worthless, so it computes the task. */
        goblin__node_free_bufs(&mine, nout);
        goblin__node_count_reject(n, pi, ti, vd.reason == GOBLIN_VERIFY_OK ? GOBLIN_VERIFY_EXCEEDS_BOUND : vd.reason);
        void **full = NULL;
        if ((e = goblin__node_graph_compute(n, j, ti, &full)) != GOBLIN_OK) {
            goblin__node_job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing task %lld on the node failed: %s",
                                    (long long)ti, goblin_strerror(e));
            goblin__node_quarantine(n, pi);
            return;
        }
        goblin__node_graph_task_accept(n, j, ti, full, -1, true);
        goblin__node_free_bufs(&full, G->n_out);
        goblin__node_quarantine(n, pi);
        return;
    }
    /* The products hold, so the node's outputs (the rest evaluated from them) are an
     * honest result: the worker's must agree with them under the outputs' contracts. */
    goblin_verify_reason why;
    bool ok = goblin__node_graph_agrees(n, j, ti, res, mine, &why);
    n->st.tasks_checked++;
    if (ok) goblin__node_count_accept(n, pi, true);
    else goblin__node_count_reject(n, pi, ti, why);
    goblin__node_graph_task_accept(n, j, ti, mine, ok ? pi : -1, true);
    goblin__node_free_bufs(&mine, nout);
    if (!ok) goblin__node_quarantine(n, pi);
}
