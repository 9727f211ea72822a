/* libgoblin/ops/catalog.c - the op table and the catalogue queries. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "op_def.h"

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
