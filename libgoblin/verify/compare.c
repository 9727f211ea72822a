/* libgoblin/verify/compare.c - results judged under the ops' error contracts
 * (goblin/verify.h): two replicas against each other, and spot-checked elements of a
 * claimed result against reference values. The bounds are derived in
 * docs/verification.md. */
#include <goblin/verify.h>
#include <math.h>
#include <string.h>
#include "backends/kernel_util.h"
#include "graph/graph_impl.h"
#include "verdict.h"

static bool shape_ok(const goblin_tensor *t) {
    if (t->rank < 0 || t->rank > GOBLIN_MAX_RANK) return false;
    for (int32_t d = 0; d < t->rank; d++)
        if (t->shape[d] < 0) return false;
    return true;
}

static bool same_shape(const goblin_tensor *a, const goblin_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

typedef struct rule {
    goblin_dtype dt;
    double rel, abs;
    double maxf;
    bool is_float;
    bool reducing; /* k > 1: the op's scale is sum |terms|, unknown without a scale */
} rule;

enum { AGREE = 0, DIFFER_ESCALATE = 1, DIFFER_REJECT = 2 };

typedef struct tally {
    int64_t checked, differ, reject, nonfinite;
    int64_t worst_index;
    double worst;
} tally;

/* Judge one pair (x from a result, y from the other or the reference); @p scale is
 * the op's scale for this element or NaN when unknown. Sets *ratio = diff / bound. */
static int judge_float(const rule *r, double x, double y, double scale, bool *nonfinite,
                       double *ratio) {
    *nonfinite = false;
    bool have_scale = scale == scale;
    if (x != x || y != y || isinf(x) || isinf(y)) {
        if (x != x && y != y) return *ratio = 0, AGREE;
        if (x == y) return *ratio = 0, AGREE; /* same-signed infinities */
        /* inf against a finite value of the same sign at the overflow threshold: the
         * exact value may lie beyond it, so both roundings are honest. */
        if (x == x && y == y && (x > 0) == (y > 0)) {
            double fin = isinf(x) ? fabs(y) : fabs(x);
            if (fin >= r->maxf * (1 - 4 * r->rel) - 2 * r->abs) return *ratio = 0, AGREE;
        }
        *nonfinite = true;
        *ratio = INFINITY;
        /* An honest result can be NaN/inf only if its value may overflow or inputs do.
         * Elementwise ops (k <= 1) are deterministic in that; a reduction can overflow
         * in one order and not in another unless its scale stays below overflow. */
        if (!r->reducing && !have_scale) return DIFFER_REJECT;
        if (have_scale && scale * (1 + r->rel) + r->abs < r->maxf) return DIFFER_REJECT;
        return DIFFER_ESCALATE;
    }
    double diff = fabs(x - y);
    double bound;
    int severity;
    if (have_scale) {
        bound = 2 * (r->abs + r->rel * scale);
        severity = DIFFER_REJECT;
    } else if (r->rel >= 1) {
        bound = INFINITY;
        severity = DIFFER_REJECT;
    } else if (!r->reducing) {
        /* |x - e|, |y - e| <= abs + rel |e| and |e| <= (min(|x|, |y|) + abs) / (1 - rel). */
        double mag = fmin(fabs(x), fabs(y));
        bound = 2 * r->abs + 2 * r->rel * (mag + r->abs) / (1 - r->rel);
        severity = DIFFER_REJECT;
    } else {
        /* The scale sum |terms| is >= |exact|: this bound is only an estimate. */
        double mag = fmax(fabs(x), fabs(y));
        bound = 2 * r->abs + 2 * r->rel * (mag + r->abs) / (1 - r->rel);
        severity = DIFFER_ESCALATE;
    }
    bound *= 1 + 8 * U64; /* our own rounding of diff and bound */
    *ratio = ratio_of(diff, bound);
    return diff <= bound ? AGREE : severity;
}

/* Judge element @p off_x of X against @p off_y of Y (element offsets). */
static int judge_elem(const rule *r, const goblin_tensor *X, int64_t off_x, const goblin_tensor *Y,
                      int64_t off_y, double scale, bool *nonfinite, double *ratio) {
    if (!r->is_float) {
        int64_t x = goblin__load_i64(r->dt, X->data, off_x);
        int64_t y = goblin__load_i64(r->dt, Y->data, off_y);
        *nonfinite = false;
        *ratio = x == y ? 0 : INFINITY;
        return x == y ? AGREE : DIFFER_REJECT;
    }
    return judge_float(r, goblin__load_f64(r->dt, X->data, off_x),
                       goblin__load_f64(r->dt, Y->data, off_y), scale, nonfinite, ratio);
}

static void tally_add(tally *t, int res, bool nonfinite, double ratio, int64_t index) {
    t->checked++;
    if (res != AGREE) t->differ++;
    if (res == DIFFER_REJECT) t->reject++;
    if (nonfinite && res != AGREE) t->nonfinite++;
    if (ratio > t->worst || (t->worst_index < 0 && ratio >= t->worst && res != AGREE)) {
        t->worst = ratio;
        t->worst_index = index;
    }
}

static void tally_verdict(const tally *t, goblin_verdict *out) {
    verdict_init(out);
    out->checked = t->checked;
    out->above_tight = t->differ;
    out->above_bound = t->reject;
    out->nonfinite = t->nonfinite;
    out->worst_index = t->worst_index;
    out->worst_ratio = t->worst;
    out->worst_tight_ratio = t->worst;
    if (t->reject) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = t->nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_EXCEEDS_BOUND;
    } else if (t->differ) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = t->nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_BETWEEN;
    }
}

static goblin_err rule_init(rule *r, goblin_op op, goblin_dtype dt, int64_t k) {
    memset(r, 0, sizeof *r);
    if (!goblin_op_valid(op)) return GOBLIN_EINVAL;
    goblin_err e = goblin_op_contract(op, dt, k, &r->rel, &r->abs);
    if (e) return e;
    if (!(r->rel >= 0) || !(r->abs >= 0)) return GOBLIN_EINTERNAL;
    r->dt = dt;
    r->is_float = goblin_dtype_is_float(dt);
    r->maxf = max_finite(dt);
    r->reducing = k > 1;
    return GOBLIN_OK;
}

/* Scale element @p off of @p s (a float tensor); negative or NaN is the caller's bug. */
static goblin_err load_scale(const goblin_tensor *s, int64_t off, double *out) {
    double v = goblin__load_f64(s->dtype, s->data, off);
    if (!(v >= 0)) return GOBLIN_EINVAL;
    *out = v;
    return GOBLIN_OK;
}

static bool scale_tensor_ok(const goblin_tensor *s) {
    return goblin_dtype_is_float(s->dtype) && shape_ok(s);
}

goblin_err goblin_verify_compare_scaled(goblin_op op, goblin_dtype dt, int64_t k,
                                        const goblin_tensor *a, const goblin_tensor *b,
                                        const goblin_tensor *scale, goblin_verdict *out) {
    if (!a || !b || !out) return GOBLIN_EINVAL;
    rule r;
    goblin_err e = rule_init(&r, op, dt, k);
    if (e) return e;
    if (scale && !scale_tensor_ok(scale)) return GOBLIN_EINVAL;
    if (a->dtype != dt || b->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (!shape_ok(a) || !shape_ok(b) || !same_shape(a, b))
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (scale && !same_shape(a, scale)) return GOBLIN_EINVAL;
    int64_t numel;
    if (goblin__shape_numel(a->rank, a->shape, &numel) != GOBLIN_OK)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (numel > 0 && (!a->data || !b->data || (scale && !scale->data))) return GOBLIN_EINVAL;
    size_t es = goblin_dtype_size(dt);

    /* Fast path: bit-equal results (deterministic kernels make this the common case). */
    bool bit_equal = true;
    if (numel > 0 && goblin_tensor_is_contiguous(a) && goblin_tensor_is_contiguous(b)) {
        bit_equal = memcmp(a->data, b->data, (size_t)numel * es) == 0;
    } else if (numel > 0) {
        int64_t st[4][GOBLIN_MAX_RANK];
        memcpy(st[0], a->strides, sizeof st[0]);
        memcpy(st[1], b->strides, sizeof st[1]);
        goblin__nditer it;
        goblin__nditer_init(&it, a->rank, a->shape, 2, st);
        for (int64_t i = 0; i < numel && bit_equal; i++) {
            bit_equal = memcmp((const char *)a->data + it.off[0] * (int64_t)es,
                               (const char *)b->data + it.off[1] * (int64_t)es, es) == 0;
            goblin__nditer_next(&it);
        }
    }
    if (bit_equal) {
        verdict_init(out);
        out->reason = GOBLIN_VERIFY_BIT_EQUAL;
        out->checked = numel;
        return GOBLIN_OK;
    }

    int64_t st[4][GOBLIN_MAX_RANK];
    memset(st, 0, sizeof st);
    memcpy(st[0], a->strides, sizeof st[0]);
    memcpy(st[1], b->strides, sizeof st[1]);
    if (scale) memcpy(st[2], scale->strides, sizeof st[2]);
    goblin__nditer it;
    goblin__nditer_init(&it, a->rank, a->shape, scale ? 3 : 2, st);
    tally t = {0, 0, 0, 0, -1, 0};
    for (int64_t i = 0; i < numel; i++) {
        double sv = NAN;
        if (scale && (e = load_scale(scale, it.off[2], &sv)) != GOBLIN_OK) return e;
        bool nf;
        double ratio;
        int res = judge_elem(&r, a, it.off[0], b, it.off[1], sv, &nf, &ratio);
        tally_add(&t, res, nf, ratio, i);
        goblin__nditer_next(&it);
    }
    tally_verdict(&t, out);
    return GOBLIN_OK;
}

goblin_err goblin_verify_compare(goblin_op op, goblin_dtype dt, int64_t k, const goblin_tensor *a,
                                 const goblin_tensor *b, goblin_verdict *out) {
    return goblin_verify_compare_scaled(op, dt, k, a, b, NULL, out);
}

goblin_err goblin_verify_spot(goblin_op op, goblin_dtype dt, int64_t k,
                              const goblin_tensor *claimed, const int64_t *indices, int64_t count,
                              const goblin_tensor *ref, const goblin_tensor *scale,
                              goblin_verdict *out) {
    if (!claimed || !ref || !out || count < 0 || (count > 0 && !indices)) return GOBLIN_EINVAL;
    rule r;
    goblin_err e = rule_init(&r, op, dt, k);
    if (e) return e;
    if (ref->dtype != dt || ref->rank != 1 || ref->shape[0] != count || (count && !ref->data))
        return GOBLIN_EINVAL;
    if (scale && (!scale_tensor_ok(scale) || scale->rank != 1 || scale->shape[0] != count ||
                  (count && !scale->data)))
        return GOBLIN_EINVAL;
    if (claimed->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    int64_t numel;
    if (!shape_ok(claimed) || goblin__shape_numel(claimed->rank, claimed->shape, &numel))
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    for (int64_t i = 0; i < count; i++)
        if (indices[i] < 0 || indices[i] >= numel) return GOBLIN_EINDEX;
    if (count > 0 && !claimed->data) return GOBLIN_EINVAL;

    tally t = {0, 0, 0, 0, -1, 0};
    for (int64_t i = 0; i < count; i++) {
        /* flat row-major index -> element offset through claimed's strides */
        int64_t rem = indices[i], off = 0;
        for (int32_t d = claimed->rank - 1; d >= 0; d--) {
            off += (rem % claimed->shape[d]) * claimed->strides[d];
            rem /= claimed->shape[d];
        }
        double sv = NAN;
        if (scale && (e = load_scale(scale, i * scale->strides[0], &sv)) != GOBLIN_OK) return e;
        bool nf;
        double ratio;
        int res = judge_elem(&r, claimed, off, ref, i * ref->strides[0], sv, &nf, &ratio);
        tally_add(&t, res, nf, ratio, indices[i]);
    }
    tally_verdict(&t, out);
    return GOBLIN_OK;
}
