/* libgoblin/catalog.c - the op table, catalogue queries, attribute helpers and
 * the small shape helpers every ops_<group>.c uses. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "graph_impl.h"

/* ---- the op table -------------------------------------------------------- */

static goblin__op_def g_defs[GOBLIN_OP_COUNT];
static pthread_once_t g_defs_once = PTHREAD_ONCE_INIT;

static void defs_init(void) {
    g_defs[GOBLIN_OP_INPUT] = (goblin__op_def){
        .defined = true, .group = "leaf", .summary = "a graph input supplied at evaluation",
        .semantics = "", .contract_text = "exact", .min_inputs = 0, .max_inputs = 0,
        .dtypes = GOBLIN_DTMASK_ALL};
    g_defs[GOBLIN_OP_CONSTANT] = (goblin__op_def){
        .defined = true, .group = "leaf", .summary = "a tensor stored in the graph",
        .semantics = "", .contract_text = "exact", .min_inputs = 0, .max_inputs = 0,
        .dtypes = GOBLIN_DTMASK_ALL};
    goblin__ops_register_elementwise(g_defs);
    goblin__ops_register_unary(g_defs);
    goblin__ops_register_reduce(g_defs);
    goblin__ops_register_shape(g_defs);
    goblin__ops_register_nn(g_defs);
    goblin__ops_register_formula(g_defs);
    goblin__ops_register_grad(g_defs);
}

const goblin__op_def *goblin__op_def_get(goblin_op op) {
    if ((unsigned)op >= GOBLIN_OP_COUNT) return NULL;
    pthread_once(&g_defs_once, defs_init);
    return g_defs[op].defined ? &g_defs[op] : NULL;
}

uint32_t goblin_catalog_version(void) { return GOBLIN_CATALOG_VERSION; }

const char *goblin_op_name(goblin_op op) {
    switch (op) {
#define GOBLIN__OP_NAME(name, value, str) case GOBLIN_OP_##name: return str;
        GOBLIN_OP_MAP(GOBLIN__OP_NAME)
#undef GOBLIN__OP_NAME
    default: return NULL;
    }
}

bool goblin_op_valid(goblin_op op) { return goblin_op_name(op) != NULL; }

goblin_err goblin_op_from_name(const char *name, goblin_op *out) {
    if (!name || !out) return GOBLIN_EINVAL;
#define GOBLIN__OP_PARSE(nm, value, str)                                                  \
    if (strcmp(name, str) == 0) {                                                         \
        *out = GOBLIN_OP_##nm;                                                            \
        return GOBLIN_OK;                                                                 \
    }
    GOBLIN_OP_MAP(GOBLIN__OP_PARSE)
#undef GOBLIN__OP_PARSE
    return GOBLIN_ENOTFOUND;
}

int goblin_op_next(int op) {
    for (int o = op < 0 ? 0 : op + 1; o < GOBLIN_OP_COUNT; o++)
        if (goblin_op_valid((goblin_op)o)) return o;
    return -1;
}

goblin_err goblin_op_get_info(goblin_op op, goblin_op_info *out) {
    if (!out || !goblin_op_valid(op)) return GOBLIN_EINVAL;
    const goblin__op_def *d = goblin__op_def_get(op);
    memset(out, 0, sizeof *out);
    out->op = op;
    out->name = goblin_op_name(op);
    if (!d) { /* in the enum but no definition compiled in: report honestly */
        out->group = "undefined";
        out->summary = out->semantics = out->contract = "";
        out->min_inputs = out->max_inputs = 0;
        return GOBLIN_ENOTSUP;
    }
    out->group = d->group;
    out->summary = d->summary ? d->summary : "";
    out->semantics = d->semantics ? d->semantics : "";
    out->contract = d->contract_text ? d->contract_text : "exact";
    out->min_inputs = d->min_inputs;
    out->max_inputs = d->max_inputs;
    out->dtypes = d->dtypes;
    out->n_attrs = (uint32_t)d->n_attrs;
    for (int32_t i = 0; i < d->n_attrs && i < 16; i++) out->attrs[i] = d->attrs[i].key;
    return GOBLIN_OK;
}

goblin_err goblin_op_contract(goblin_op op, goblin_dtype dt, int64_t k, double *rel,
                              double *abs_tol) {
    if (!rel || !abs_tol || goblin_dtype_size(dt) == 0) return GOBLIN_EINVAL;
    const goblin__op_def *d = goblin__op_def_get(op);
    if (!d) return GOBLIN_EINVAL;
    *rel = 0;
    *abs_tol = 0;
    if (d->contract) d->contract(dt, k < 1 ? 1 : k, rel, abs_tol);
    return GOBLIN_OK;
}

/* ---- attributes ---------------------------------------------------------- */

goblin_attr goblin_attr_int(goblin_attr_key key, int64_t value) {
    goblin_attr a;
    memset(&a, 0, sizeof a);
    a.key = key;
    a.count = 1;
    a.v.i = value;
    return a;
}

goblin_attr goblin_attr_float(goblin_attr_key key, double value) {
    goblin_attr a;
    memset(&a, 0, sizeof a);
    a.key = key;
    a.count = 1;
    a.v.f = value;
    return a;
}

goblin_attr goblin_attr_ints(goblin_attr_key key, const int64_t *values, int32_t n) {
    goblin_attr a;
    memset(&a, 0, sizeof a);
    a.key = key;
    if (n < 0 || n > GOBLIN_MAX_ATTR_INTS || (n > 0 && !values)) {
        a.count = -1;
        return a;
    }
    a.count = n;
    for (int32_t i = 0; i < n; i++) a.v.ints[i] = values[i];
    return a;
}

const char *goblin_attr_name(goblin_attr_key key) {
    switch (key) {
#define GOBLIN__ATTR_NAME(name, value, str, kind) case GOBLIN_ATTR_##name: return str;
        GOBLIN_ATTR_MAP(GOBLIN__ATTR_NAME)
#undef GOBLIN__ATTR_NAME
    default: return NULL;
    }
}

goblin_attr_kind goblin_attr_key_kind(goblin_attr_key key) {
    switch (key) {
#define GOBLIN__ATTR_KIND(name, value, str, kind) case GOBLIN_ATTR_##name: return GOBLIN_ATTR_KIND_##kind;
        GOBLIN_ATTR_MAP(GOBLIN__ATTR_KIND)
#undef GOBLIN__ATTR_KIND
    default: return GOBLIN_ATTR_KIND_COUNT;
    }
}

const goblin_attr *goblin__attr_find(const goblin__node *n, goblin_attr_key key) {
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].key == key) return &n->attrs[i];
    return NULL;
}

int64_t goblin__attr_i(const goblin__node *n, goblin_attr_key key, int64_t def) {
    const goblin_attr *a = goblin__attr_find(n, key);
    return a ? a->v.i : def;
}

double goblin__attr_f(const goblin__node *n, goblin_attr_key key, double def) {
    const goblin_attr *a = goblin__attr_find(n, key);
    return a ? a->v.f : def;
}

const int64_t *goblin__attr_ints(const goblin__node *n, goblin_attr_key key, int32_t *count) {
    const goblin_attr *a = goblin__attr_find(n, key);
    *count = a ? a->count : 0;
    return a ? a->v.ints : NULL;
}

/* ---- inference helpers --------------------------------------------------- */

goblin_err goblin__errf(char *msg, size_t cap, goblin_err e, const char *fmt, ...) {
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return e;
}

const char *goblin__shape_str(int32_t rank, const int64_t *shape, char *buf, size_t cap) {
    size_t n = 0;
    if (!cap) return buf;
    buf[0] = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int32_t d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

goblin_err goblin__broadcast_shapes(int32_t ra, const int64_t *a, int32_t rb, const int64_t *b,
                                    int32_t *rout, int64_t *out, char *msg, size_t cap) {
    int32_t r = ra > rb ? ra : rb;
    for (int32_t d = 0; d < r; d++) {
        int32_t da = d - (r - ra), db = d - (r - rb);
        int64_t x = da >= 0 ? a[da] : 1, y = db >= 0 ? b[db] : 1;
        if (x == y || y == 1) out[d] = x;
        else if (x == 1) out[d] = y;
        else {
            char sa[160], sb[160];
            return goblin__errf(msg, cap, GOBLIN_ESHAPE,
                                "shapes %s and %s do not broadcast (dim %d: %lld vs %lld)",
                                goblin__shape_str(ra, a, sa, sizeof sa),
                                goblin__shape_str(rb, b, sb, sizeof sb), (int)d, (long long)x,
                                (long long)y);
        }
    }
    *rout = r;
    return GOBLIN_OK;
}

goblin_err goblin__norm_axis(int64_t axis, int32_t rank, int32_t *out, char *msg, size_t cap) {
    if (rank == 0 && (axis == 0 || axis == -1)) { /* a scalar has one implicit axis */
        *out = 0;
        return GOBLIN_OK;
    }
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return goblin__errf(msg, cap, GOBLIN_ERANGE, "axis %lld out of range for rank %d",
                            (long long)axis, (int)rank);
    *out = (int32_t)a;
    return GOBLIN_OK;
}

goblin_err goblin__shape_numel(int32_t rank, const int64_t *shape, int64_t *out) {
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) {
        if (shape[d] < 0 || shape[d] > GOBLIN_MAX_DIM) return GOBLIN_ELIMIT;
        if (!goblin__mul_i64(n, shape[d], &n) || n > GOBLIN_MAX_NUMEL) return GOBLIN_ELIMIT;
    }
    *out = n;
    return GOBLIN_OK;
}

void goblin__contig_strides(int32_t rank, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
}

double goblin__unit_roundoff(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F32: return 0x1p-24;
    case GOBLIN_DTYPE_F64: return 0x1p-53;
    case GOBLIN_DTYPE_F16: return 0x1p-11;
    case GOBLIN_DTYPE_BF16: return 0x1p-8;
    default: return 0;
    }
}
