/* libgoblin/ops/formula.c - op definition of FORMULA: inference, the program
 * validator and the numeric contract.
 *
 * A FORMULA node's payload (the compiled program, formula_impl.h) is validated
 * here as hostile bytes: graphs decoded from the wire reach this inference just
 * like graphs built through goblin_graph_add_formula. */
#include <string.h>
#include "core/formula_prog.h"
#include "op_def.h"

goblin_err goblin__formula_validate(const void *prog, size_t size, int32_t n_inputs,
                                    goblin_dtype dt, goblin__fprog_info *info, char *msg,
                                    size_t cap) {
    const uint8_t *b = prog;
    if (!b || size < GOBLIN__FPROG_HEADER)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "formula program truncated (%zu bytes)",
                            size);
    if (size > GOBLIN__FPROG_MAX_BYTES)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "formula program of %zu bytes exceeds %d",
                            size, GOBLIN__FPROG_MAX_BYTES);
    if (b[0] != 'G' || b[1] != 'F')
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "formula program has a bad magic number");
    if (b[2] != GOBLIN__FPROG_VERSION)
        return goblin__errf(msg, cap, GOBLIN_EVERSION, "formula program version %d, expected %d",
                            b[2], GOBLIN__FPROG_VERSION);
    int32_t n_vars = b[3];
    int32_t n_instr = b[4] | (b[5] << 8);
    if (n_vars < 1 || n_vars > GOBLIN_FORMULA_MAX_VARS)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "formula program has %d variables (1..%d)",
                            (int)n_vars, GOBLIN_FORMULA_MAX_VARS);
    if (n_instr < 1 || n_instr > GOBLIN_FORMULA_MAX_NODES)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "formula program has %d instructions (1..%d)", (int)n_instr,
                            GOBLIN_FORMULA_MAX_NODES);
    if (b[6] || b[7])
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "formula program: reserved bytes not zero");
    if (n_vars != n_inputs)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "formula program reads %d variables but the node has %d inputs",
                            (int)n_vars, (int)n_inputs);
    bool is_float = goblin_dtype_is_float(dt), is_int = goblin_dtype_is_int(dt);
    if (!is_float && !is_int)
        return goblin__errf(msg, cap, GOBLIN_EDTYPE,
                            "formulas compute in float or integer dtypes, not %s (insert a cast)",
                            goblin_dtype_name(dt));
    size_t o = GOBLIN__FPROG_HEADER;
    int32_t depth = 0, max_depth = 0;
    for (int32_t i = 0; i < n_instr; i++) {
        if (o >= size)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                "formula program ends after %d of %d instructions", (int)i,
                                (int)n_instr);
        int op = b[o++];
        int ar = goblin__fop_arity(op);
        if (ar < 0)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                "formula program: unknown opcode %d at instruction %d", op, (int)i);
        if (op == GOBLIN__FOP_VAR) {
            if (o >= size)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                    "formula program truncated in instruction %d", (int)i);
            int v = b[o++];
            if (v >= n_vars)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                    "formula program reads input %d of %d at instruction %d", v,
                                    (int)n_vars, (int)i);
        } else if (op == GOBLIN__FOP_INT || op == GOBLIN__FOP_FLOAT) {
            if (size - o < 8)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                    "formula program truncated in instruction %d", (int)i);
            o += 8;
        }
        if (depth < ar)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                "formula program: '%s' at instruction %d needs %d operands, has %d",
                                goblin__fop_name(op), (int)i, ar, (int)depth);
        depth = depth - ar + 1;
        if (depth > max_depth) max_depth = depth;
        unsigned ok = goblin__fop_dtypes(op);
        if (is_int && !(ok & GOBLIN__FOP_ON_INT)) {
            if (op == GOBLIN__FOP_DIV)
                return goblin__errf(msg, cap, GOBLIN_EDTYPE,
                                    "'/' is true division and needs a float dtype, not %s "
                                    "(use '//' for floor division)",
                                    goblin_dtype_name(dt));
            if (op == GOBLIN__FOP_FLOAT)
                return goblin__errf(msg, cap, GOBLIN_EDTYPE,
                                    "a float literal cannot appear in a formula of dtype %s",
                                    goblin_dtype_name(dt));
            return goblin__errf(msg, cap, GOBLIN_EDTYPE, "%s() needs a float dtype, not %s",
                                goblin__fop_name(op), goblin_dtype_name(dt));
        }
        if (is_float && !(ok & GOBLIN__FOP_ON_FLOAT))
            return goblin__errf(msg, cap, GOBLIN_EDTYPE, "'%s' needs an integer dtype, not %s",
                                goblin__fop_name(op), goblin_dtype_name(dt));
    }
    if (o != size)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "formula program has %zu bytes after its last instruction", size - o);
    if (depth != 1)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "formula program leaves %d values instead of 1", (int)depth);
    if (info) {
        info->n_vars = n_vars;
        info->n_instr = n_instr;
        info->max_depth = max_depth;
    }
    return GOBLIN_OK;
}

static goblin_err formula_infer(goblin__infer *c) {
    goblin__node *n = c->node;
    goblin_dtype dt = c->in[0]->dtype;
    for (int32_t i = 1; i < c->n_in; i++)
        if (c->in[i]->dtype != dt)
            return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                                "input %d is %s but input 0 is %s: a formula's inputs share one "
                                "dtype (insert a cast)",
                                (int)i, goblin_dtype_name(c->in[i]->dtype), goblin_dtype_name(dt));
    goblin_err e = goblin__formula_validate(n->payload, n->payload_size, c->n_in, dt, NULL, c->msg,
                                            c->cap);
    if (e) return e;
    int32_t rank = c->in[0]->rank;
    int64_t shape[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < rank; d++) shape[d] = c->in[0]->shape[d];
    for (int32_t i = 1; i < c->n_in; i++) {
        int32_t r2;
        int64_t s2[GOBLIN_MAX_RANK];
        e = goblin__broadcast_shapes(rank, shape, c->in[i]->rank, c->in[i]->shape, &r2, s2, c->msg,
                                     c->cap);
        if (e) return e;
        rank = r2;
        memcpy(shape, s2, sizeof(int64_t) * (size_t)rank);
    }
    n->dtype = dt;
    n->rank = rank;
    for (int32_t d = 0; d < rank; d++) n->shape[d] = shape[d];
    return GOBLIN_OK;
}

/* Without the formula the bound cannot follow its conditioning; this one holds
 * for formulas of a few dozen well-conditioned operations (each correctly
 * rounded or within 1-2 ulp: see contract_text). Half types compute in f32 and
 * round once on store, so their error is dominated by that one rounding. */
static void formula_contract(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    (void)k;
    double u = goblin__unit_roundoff(dt);
    if (dt == GOBLIN_DTYPE_F16 || dt == GOBLIN_DTYPE_BF16) {
        *rel = 2 * u;
        *abs_tol = 2 * u;
    } else {
        *rel = 32 * u;
        *abs_tol = 32 * u;
    }
}

void goblin__ops_register_formula(goblin__op_def *t) {
    t[GOBLIN_OP_FORMULA] = (goblin__op_def){
        .defined = true,
        .group = "formula",
        .summary = "a user expression (goblin_formula_parse) fused into one elementwise pass",
        .semantics =
            "Inputs (1-16, one dtype: float or integer, not bool) broadcast together; the output "
            "has their dtype. Every operation computes in that dtype (f16/bf16: in f32, rounded "
            "once on store); literals take it too: integer literals wrap modulo 2^bits in integer "
            "formulas (like a NumPy cast) and round once in float ones; float literals are "
            "rejected in integer formulas. Python semantics: // floors and % takes the divisor's "
            "sign (x // 0 = 0 and x % 0 = 0 on integers, INT_MIN // -1 wraps; on floats divmod "
            "from fmod, x // 0 = x / 0 and x % 0 = NaN); '/' is true division (float only); ** "
            "is pow (integers by squaring with wraparound, negative exponent gives 0 except for "
            "bases 1 and -1); + - * and << wrap on integers; >> is arithmetic; a shift count < 0 "
            "or >= the width gives 0 (>>: 0 or -1). Comparisons, and, or, not give 1 or 0 in the "
            "formula's dtype; nonzero (NaN included) is true. min/max/clamp/relu propagate NaN. "
            "round() rounds half to even. where(c, a, b) picks a where c is nonzero. "
            "Functions of the float-only kind (exp log sqrt rsqrt sin cos tanh erf sigmoid "
            "log1p expm1) and bitwise ops (& | ^ ~ << >>, integers only) are checked against "
            "the dtype when the node is built. These are the same scalar functions the "
            "elementwise ops use (scalar_ops.h).",
        .contract_text =
            "f32/f64: |err| <= 32u * |exact| + 32u per element for formulas of up to a few dozen "
            "well-conditioned operations (each step is IEEE-correctly rounded, or within about "
            "1 ulp: f32 exp is our own vectorized polynomial, at most 0.98 ulp over all 2^32 "
            "inputs; the other transcendental functions come from libm); formulas with "
            "cancellation or large arguments to exp can exceed it (exp(t) turns an error of "
            "t's last bit into |t| ulps). f16/bf16 compute in f32 and round once: 2u. Integer "
            "formulas are exact. "
            "CPU results are bit-identical for any thread count and across x86-64 CPUs (no FMA "
            "contraction; f64 transcendental functions come from the system libm).",
        .min_inputs = 1,
        .max_inputs = GOBLIN_FORMULA_MAX_VARS,
        .dtypes = GOBLIN_DTMASK_NUMERIC,
        .flags = GOBLIN__OPF_STRIDED | GOBLIN__OPF_ELEMENTWISE,
        .n_attrs = 0,
        .infer = formula_infer,
        .contract = formula_contract,
    };
}
