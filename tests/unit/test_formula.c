/* tests/unit/test_formula.c - the FORMULA op: parser (libgoblin/formula.c), program
 * validator (ops_formula.c), evaluator (formula_eval.c) and its kernels
 * (backends/ref/ref_formula.c, backends/blis/blis_formula.c).
 *
 * Tree shapes are checked through the compiled program rendered in postfix
 * ("a b c * +"), written by hand here. Expected numbers are derived by hand or
 * computed by independent C code in this file (libm in double, plain loops),
 * never taken from the library's earlier output. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include "kernels/expf.h"
#include "backends/ref/formula_eval.h"
#include "backends/kernel_util.h"
#include "testutil.h"

#define SH(...) ((int64_t[]){__VA_ARGS__})
#define F32 GOBLIN_DTYPE_F32
#define F64 GOBLIN_DTYPE_F64
#define F16 GOBLIN_DTYPE_F16
#define BF16 GOBLIN_DTYPE_BF16
#define I8 GOBLIN_DTYPE_I8
#define I16 GOBLIN_DTYPE_I16
#define I32 GOBLIN_DTYPE_I32
#define I64 GOBLIN_DTYPE_I64
#define U8 GOBLIN_DTYPE_U8
#define BOOL GOBLIN_DTYPE_BOOL
#define REF GOBLIN_BACKEND_REF
#define BLIS GOBLIN_BACKEND_BLIS

static bool have_blis(void) { return goblin_backend_available(BLIS) == GOBLIN_OK; }

/* ---- helpers ---------------------------------------------------------------------- */

/* The program of @p text in postfix, variables by name, NEG as "neg". */
static void postfix(const char *text, char *buf, size_t cap) {
    goblin_formula *f = NULL;
    goblin_errbuf fe;
    goblin_err e = goblin_formula_parse(text, &f, &fe);
    cr_assert_eq(e, GOBLIN_OK, "parse \"%s\": %s (%s)", text, goblin_err_name(e), fe.message);
    void *prog = NULL;
    size_t size = 0;
    cr_assert_eq(goblin__formula_compile(f, &prog, &size), GOBLIN_OK);
    const uint8_t *b = prog;
    size_t o = GOBLIN__FPROG_HEADER, n = 0;
    buf[0] = 0;
    int n_instr = b[4] | (b[5] << 8);
    cr_assert_eq(n_instr, goblin_formula_node_count(f));
    for (int i = 0; i < n_instr; i++) {
        int op = b[o++];
        char item[64];
        if (op == GOBLIN__FOP_VAR) {
            snprintf(item, sizeof item, "%s", goblin_formula_var_name(f, b[o++]));
        } else if (op == GOBLIN__FOP_INT || op == GOBLIN__FOP_FLOAT) {
            uint64_t u = 0;
            for (int k = 7; k >= 0; k--) u = (u << 8) | b[o + (size_t)k];
            o += 8;
            if (op == GOBLIN__FOP_INT) {
                snprintf(item, sizeof item, "%lld", (long long)(int64_t)u);
            } else {
                double d;
                memcpy(&d, &u, 8);
                snprintf(item, sizeof item, "%gf", d);
            }
        } else if (op == GOBLIN__FOP_NEG) {
            snprintf(item, sizeof item, "neg");
        } else {
            snprintf(item, sizeof item, "%s", goblin__fop_name(op));
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? " " : "", item);
    }
    cr_assert_eq(o, size);
    goblin__free(prog);
    goblin_formula_free(f);
}

#define ASSERT_POSTFIX(text, want)                                                          \
    do {                                                                                    \
        char got_[512];                                                                     \
        postfix(text, got_, sizeof got_);                                                   \
        cr_assert_str_eq(got_, want, "\"%s\" parsed as [%s], want [%s]", text, got_, want); \
    } while (0)

/* Parse @p text expecting error @p code at @p pos with @p needle in the message. */
static void expect_parse_error(const char *text, goblin_err code, int32_t pos, const char *needle) {
    goblin_formula *f = (goblin_formula *)(uintptr_t)1; /* must stay untouched */
    goblin_errbuf fe;
    goblin_err e = goblin_formula_parse(text, &f, &fe);
    cr_assert_eq(e, code, "\"%s\": got %s (%s), want %s", text, goblin_err_name(e), fe.message,
                 goblin_err_name(code));
    cr_assert_eq(f, (goblin_formula *)(uintptr_t)1, "\"%s\": out written on failure", text);
    cr_assert_eq(fe.position, pos, "\"%s\": position %d, want %d (%s)", text, fe.position, pos,
                 fe.message);
    cr_assert(strstr(fe.message, needle), "\"%s\": message \"%s\" lacks \"%s\"", text, fe.message,
              needle);
}

/* Build a graph with one input per tensor bound to the formula's variables in order of
 * first appearance, evaluate on @p be. Returns the error; *out holds the result. */
static goblin_err feval(const char *text, const goblin_tensor *ins, int32_t n,
                        goblin_backend_kind be, int32_t threads, goblin_tensor *out, char *msg,
                        size_t cap) {
    goblin_formula *f = NULL;
    goblin_errbuf fe;
    goblin_err e = goblin_formula_parse(text, &f, &fe);
    cr_assert_eq(e, GOBLIN_OK, "parse \"%s\": %s", text, fe.message);
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t ids[16], y = -1;
    for (int32_t i = 0; i < n; i++)
        cr_assert_eq(goblin_graph_input(g, ins[i].dtype, ins[i].rank, ins[i].shape, &ids[i]),
                     GOBLIN_OK);
    msg[0] = 0;
    e = goblin_graph_add_formula(g, f, ids, n, &y);
    goblin_formula_free(f);
    if (e) {
        snprintf(msg, cap, "%s", goblin_graph_error(g));
        goblin_graph_free(g);
        return e;
    }
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = be;
    p.threads = threads;
    goblin_exec *ex = NULL;
    cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
    if (!out->data) memset(out, 0, sizeof *out);
    e = goblin_exec_run(ex, ins, n, out, 1);
    if (e) snprintf(msg, cap, "%s", goblin_exec_error(ex));
    goblin_exec_free(ex);
    goblin_graph_free(g);
    return e;
}

static goblin_tensor fev(const char *text, const goblin_tensor *ins, int32_t n,
                         goblin_backend_kind be, int32_t threads) {
    goblin_tensor out;
    char msg[300];
    memset(&out, 0, sizeof out);
    goblin_err e = feval(text, ins, n, be, threads, &out, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "\"%s\" on %s: %s (%s)", text, goblin_backend_name(be),
                 goblin_err_name(e), msg);
    return out;
}

/* Build only; the error and message of goblin_graph_add_formula. */
static goblin_err fbuild(const char *text, goblin_dtype dt, int32_t n_vars, char *msg, size_t cap) {
    goblin_formula *f = NULL;
    goblin_errbuf fe;
    cr_assert_eq(goblin_formula_parse(text, &f, &fe), GOBLIN_OK, "%s", fe.message);
    cr_assert_eq(goblin_formula_var_count(f), n_vars);
    goblin_graph *g = NULL;
    goblin_graph_new(&g);
    int32_t ids[16], y;
    for (int32_t i = 0; i < n_vars; i++) goblin_graph_input(g, dt, 1, SH(4), &ids[i]);
    goblin_err e = goblin_graph_add_formula(g, f, ids, n_vars, &y);
    snprintf(msg, cap, "%s", goblin_graph_error(g));
    goblin_graph_free(g);
    goblin_formula_free(f);
    return e;
}

/* A scalar (rank 0) tensor over *p. */
static goblin_tensor sc(goblin_dtype dt, void *p) { return gt_tensor(dt, 0, NULL, p); }

/* f64 scalar formula value on REF. */
static double f64_of(const char *text, int32_t n, const double *vals) {
    goblin_tensor ins[16];
    double v[16];
    for (int32_t i = 0; i < n; i++) {
        v[i] = vals[i];
        ins[i] = sc(F64, &v[i]);
    }
    goblin_tensor o = fev(text, ins, n, REF, 1);
    cr_assert_eq(o.rank, 0);
    double r = *(double *)o.data;
    goblin_buffer_free(o.data);
    return r;
}

static int64_t i64_of(const char *text, int32_t n, const int64_t *vals) {
    goblin_tensor ins[16];
    int64_t v[16];
    for (int32_t i = 0; i < n; i++) {
        v[i] = vals[i];
        ins[i] = sc(I64, &v[i]);
    }
    goblin_tensor o = fev(text, ins, n, REF, 1);
    int64_t r = *(int64_t *)o.data;
    goblin_buffer_free(o.data);
    return r;
}

#define D(...) ((double[]){__VA_ARGS__})
#define L(...) ((int64_t[]){__VA_ARGS__})

/* ---- parser: structure ------------------------------------------------------------ */

Test(formula_parse, precedence_of_arithmetic) {
    ASSERT_POSTFIX("a + b * c", "a b c * +");
    ASSERT_POSTFIX("(a + b) * c", "a b + c *");
    ASSERT_POSTFIX("a * b + c", "a b * c +");
    ASSERT_POSTFIX("a + b / c - d", "a b c / + d -");
    ASSERT_POSTFIX("a // b % c * d", "a b // c % d *");
    ASSERT_POSTFIX("a * exp(-b * x) + c", "a b neg x * exp * c +");
}

Test(formula_parse, left_associativity_of_minus_and_divide) {
    ASSERT_POSTFIX("a - b - c", "a b - c -");
    ASSERT_POSTFIX("a / b / c", "a b / c /");
    ASSERT_POSTFIX("a - (b - c)", "a b c - -");
    ASSERT_POSTFIX("a << b >> c", "a b << c >>");
}

Test(formula_parse, power_is_right_associative_and_binds_tighter_than_unary_minus) {
    ASSERT_POSTFIX("a ** b ** c", "a b c ** **");
    ASSERT_POSTFIX("(a ** b) ** c", "a b ** c **");
    ASSERT_POSTFIX("-a ** 2", "a 2 ** neg");      /* -(a**2), as Python */
    ASSERT_POSTFIX("a ** -b", "a b neg **");      /* the exponent may be unary */
    ASSERT_POSTFIX("-a ** -b ** c", "a b c ** neg ** neg");
    ASSERT_POSTFIX("2 * a ** 2", "2 a 2 ** *");
    ASSERT_POSTFIX("~a ** 2", "a 2 ** ~");
    ASSERT_POSTFIX("+a", "a");                   /* unary plus makes no node */
    ASSERT_POSTFIX("- - a", "a neg neg");
}

Test(formula_parse, precedence_of_bitwise_comparison_and_logic) {
    ASSERT_POSTFIX("a & b | c ^ d", "a b & c d ^ |");
    ASSERT_POSTFIX("a | b & c", "a b c & |");
    ASSERT_POSTFIX("a ^ b & c", "a b c & ^");
    ASSERT_POSTFIX("a << b + c", "a b c + <<");
    ASSERT_POSTFIX("a & b == c", "a b & c ==");   /* comparisons below bitwise, as Python */
    ASSERT_POSTFIX("not a == b", "a b == not");
    ASSERT_POSTFIX("a or b and c", "a b c and or");
    ASSERT_POSTFIX("not a and b", "a not b and");
    ASSERT_POSTFIX("a < b and b <= c or not c != d", "a b < b c <= and c d != not or");
    ASSERT_POSTFIX("a >= b", "a b >=");
    ASSERT_POSTFIX("a > b", "a b >");
}

Test(formula_parse, calls_literals_and_variable_order) {
    ASSERT_POSTFIX("where(x > 0, x, 0.5 * y)", "x 0 > x 0.5f y * where");
    ASSERT_POSTFIX("clamp(x, lo, hi)", "x lo hi clamp");
    ASSERT_POSTFIX("min(a, max(b, c)) + pow(a, 2)", "a b c max min a 2 ** +");
    ASSERT_POSTFIX("sigmoid(x) + relu(x) + rsqrt(x) + log1p(x) + expm1(x)",
                   "x sigmoid x relu + x rsqrt + x log1p + x expm1 +");
    ASSERT_POSTFIX("x * 2654435761", "x 2654435761 *");
    ASSERT_POSTFIX("x + 0x1F + 1e3 + .5 + 5. + 2.5e-3", "x 31 + 1000f + 0.5f + 5f + 0.0025f +");
    ASSERT_POSTFIX("x * 9223372036854775807", "x 9223372036854775807 *");
    ASSERT_POSTFIX("x*1E+2", "x 100f *");
    ASSERT_POSTFIX(" \t\n x_1 \r\n+ _y2 ", "x_1 _y2 +");
    goblin_formula *f;
    cr_assert_eq(goblin_formula_parse("zeta * alpha + zeta - beta", &f, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_formula_var_count(f), 3);
    cr_assert_str_eq(goblin_formula_var_name(f, 0), "zeta");
    cr_assert_str_eq(goblin_formula_var_name(f, 1), "alpha");
    cr_assert_str_eq(goblin_formula_var_name(f, 2), "beta");
    cr_assert_null(goblin_formula_var_name(f, 3));
    cr_assert_null(goblin_formula_var_name(f, -1));
    cr_assert_eq(goblin_formula_node_count(f), 7);
    goblin_formula_free(f);
    goblin_formula_free(NULL);
    cr_assert_eq(goblin_formula_var_count(NULL), 0);
}

/* ---- parser: errors --------------------------------------------------------------- */

Test(formula_parse, syntax_errors_have_positions_and_clear_messages) {
    expect_parse_error("a +", GOBLIN_ESYNTAX, 3, "expected a number, a name or '(', found end of formula at 3");
    expect_parse_error("(a + b", GOBLIN_ESYNTAX, 6, "expected ')'");
    expect_parse_error("exp((a + b) * 2", GOBLIN_ESYNTAX, 15, "expected ')' or ','");
    expect_parse_error("a + b)", GOBLIN_ESYNTAX, 5, "unmatched ')' at 5");
    expect_parse_error("a $ b", GOBLIN_ESYNTAX, 2, "unexpected character '$'");
    expect_parse_error("a\x01", GOBLIN_ESYNTAX, 1, "unexpected byte 0x01");
    expect_parse_error("a \xc3\xa9", GOBLIN_ESYNTAX, 2, "unexpected byte 0xc3");
    expect_parse_error("exp(a, b)", GOBLIN_ESYNTAX, 0, "exp() takes 1 argument, got 2");
    expect_parse_error("x + where(a, b)", GOBLIN_ESYNTAX, 4, "where() takes 3 arguments, got 2");
    expect_parse_error("min()", GOBLIN_ESYNTAX, 0, "min() takes 2 arguments, got 0");
    expect_parse_error("min(a,)", GOBLIN_ESYNTAX, 6, "found ')'");
    expect_parse_error("foo(a)", GOBLIN_ESYNTAX, 0, "unknown function 'foo'");
    expect_parse_error("exp + 1", GOBLIN_ESYNTAX, 0, "exp is a function");
    expect_parse_error("a = b", GOBLIN_ESYNTAX, 2, "use '==' to compare");
    expect_parse_error("a ! b", GOBLIN_ESYNTAX, 2, "use 'not' or '!='");
    expect_parse_error("a < b < c", GOBLIN_ESYNTAX, 6, "chained comparison");
    expect_parse_error("a == b != c", GOBLIN_ESYNTAX, 7, "chained comparison");
    expect_parse_error("", GOBLIN_ESYNTAX, 0, "empty formula");
    expect_parse_error("   ", GOBLIN_ESYNTAX, 3, "empty formula");
    expect_parse_error("1.2.3 + x", GOBLIN_ESYNTAX, 0, "invalid number literal");
    expect_parse_error("x + 2x", GOBLIN_ESYNTAX, 4, "invalid number literal");
    expect_parse_error("x * 1e", GOBLIN_ESYNTAX, 4, "invalid exponent");
    expect_parse_error("x * 1e+", GOBLIN_ESYNTAX, 4, "invalid exponent");
    expect_parse_error("x + 0x", GOBLIN_ESYNTAX, 4, "invalid hex literal");
    expect_parse_error("x + 0x1G", GOBLIN_ESYNTAX, 4, "invalid number literal");
    expect_parse_error("x + 9223372036854775808", GOBLIN_ESYNTAX, 4, "larger than 9223372036854775807");
    expect_parse_error("x + 99999999999999999999", GOBLIN_ESYNTAX, 4, "integer literal larger");
    expect_parse_error("x + 0x8000000000000000", GOBLIN_ESYNTAX, 4, "integer literal larger");
    expect_parse_error("a b", GOBLIN_ESYNTAX, 2, "expected an operator or end of formula, found 'b'");
    expect_parse_error("x and", GOBLIN_ESYNTAX, 5, "found end of formula");
    expect_parse_error("and x", GOBLIN_ESYNTAX, 0, "found 'and'");
    expect_parse_error("x ** ", GOBLIN_ESYNTAX, 5, "expected a number");
    expect_parse_error("()", GOBLIN_ESYNTAX, 1, "found ')'");
    expect_parse_error("x +* y", GOBLIN_ESYNTAX, 3, "found '*'");
    expect_parse_error("x y z", GOBLIN_ESYNTAX, 2, "found 'y'");
    expect_parse_error("x, y", GOBLIN_ESYNTAX, 1, "found ','");
}

Test(formula_parse, formula_without_variables_or_bad_arguments) {
    expect_parse_error("2 + 3", GOBLIN_EINVAL, -1, "no variables");
    goblin_formula *f = NULL;
    goblin_errbuf fe;
    cr_assert_eq(goblin_formula_parse(NULL, &f, &fe), GOBLIN_EINVAL);
    cr_assert_eq(goblin_formula_parse("x", NULL, &fe), GOBLIN_EINVAL);
    cr_assert_eq(goblin_formula_parse("x +", &f, NULL), GOBLIN_ESYNTAX); /* err may be NULL */
}

Test(formula_parse, limits) {
    char *buf = malloc(GOBLIN_FORMULA_MAX_TEXT + 16);
    /* exactly MAX_TEXT bytes is fine, one more is refused */
    memset(buf, ' ', GOBLIN_FORMULA_MAX_TEXT);
    buf[0] = 'x';
    buf[GOBLIN_FORMULA_MAX_TEXT] = 0;
    goblin_formula *f = NULL;
    cr_assert_eq(goblin_formula_parse(buf, &f, NULL), GOBLIN_OK);
    goblin_formula_free(f);
    buf[GOBLIN_FORMULA_MAX_TEXT] = ' ';
    buf[GOBLIN_FORMULA_MAX_TEXT + 1] = 0;
    expect_parse_error(buf, GOBLIN_ELIMIT, -1, "longer than 4096 bytes");

    /* x+x+...: k terms make 2k-1 nodes; 128 terms = 255 nodes fit, 129 do not */
    for (int k = 128; k <= 129; k++) {
        size_t n = 0;
        for (int i = 0; i < k; i++) n += (size_t)sprintf(buf + n, i ? "+x" : "x");
        if (k == 128) {
            cr_assert_eq(goblin_formula_parse(buf, &f, NULL), GOBLIN_OK);
            cr_assert_eq(goblin_formula_node_count(f), 255);
            goblin_formula_free(f);
        } else {
            expect_parse_error(buf, GOBLIN_ELIMIT, 2 * 128 - 1, "more than 256 nodes"); /* the 128th '+' */
        }
    }
    /* 16 distinct variables fit, the 17th does not */
    strcpy(buf, "v0");
    for (int i = 1; i < 16; i++) sprintf(buf + strlen(buf), "+v%d", i);
    cr_assert_eq(goblin_formula_parse(buf, &f, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_formula_var_count(f), 16);
    goblin_formula_free(f);
    strcat(buf, "+v16");
    expect_parse_error(buf, GOBLIN_ELIMIT, (int32_t)strlen(buf) - 3, "more than 16 variables");

    /* nesting: 64 parentheses are fine, 65 are refused (the C stack stays bounded) */
    for (int depth = 64; depth <= 65; depth++) {
        size_t n = 0;
        for (int i = 0; i < depth; i++) buf[n++] = '(';
        buf[n++] = 'x';
        for (int i = 0; i < depth; i++) buf[n++] = ')';
        buf[n] = 0;
        if (depth == 64) {
            cr_assert_eq(goblin_formula_parse(buf, &f, NULL), GOBLIN_OK);
            goblin_formula_free(f);
        } else {
            expect_parse_error(buf, GOBLIN_ELIMIT, 64, "nested deeper than 64");
        }
    }
    /* thousands of nested parentheses, unary minus or ** never overflow the stack */
    const char *unit[] = {"(", "-", "x**", "not ", "exp("};
    for (int u = 0; u < 5; u++) {
        size_t n = 0, ul = strlen(unit[u]);
        while (n + ul < GOBLIN_FORMULA_MAX_TEXT - 2) {
            memcpy(buf + n, unit[u], ul);
            n += ul;
        }
        buf[n++] = 'x';
        buf[n] = 0;
        goblin_errbuf fe;
        cr_assert_eq(goblin_formula_parse(buf, &f, &fe), GOBLIN_ELIMIT, "unit %s: %s", unit[u],
                     fe.message);
    }
    free(buf);
}

/* ---- parser: fuzzing ---------------------------------------------------------------- */

/* Every formula the parser accepts compiles into a program that the validator
 * accepts for some dtype, or refuses for a dtype reason only (never EFORMAT). */
static void check_accepted(goblin_formula *f) {
    void *prog = NULL;
    size_t size = 0;
    cr_assert_eq(goblin__formula_compile(f, &prog, &size), GOBLIN_OK);
    char msg[200];
    int32_t nv = goblin_formula_var_count(f);
    goblin_err ef = goblin__formula_validate(prog, size, nv, F64, NULL, msg, sizeof msg);
    goblin_err ei = goblin__formula_validate(prog, size, nv, I32, NULL, msg, sizeof msg);
    cr_assert(ef == GOBLIN_OK || ef == GOBLIN_EDTYPE, "f64: %s", msg);
    cr_assert(ei == GOBLIN_OK || ei == GOBLIN_EDTYPE, "i32: %s", msg);
    goblin__free(prog);
}

Test(formula_parse, random_bytes_never_crash) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    static const char alphabet[] = "abxyz0123456789.eE+-*/%()<>=!&|^~, \t_Xnotandorexpminwhere\x01\xff";
    char buf[300];
    int accepted = 0;
    for (int it = 0; it < 20000; it++) {
        int len = (int)(gt_rand(&s) * 60);
        bool raw = it % 4 == 0; /* a quarter fully random bytes, the rest from the alphabet */
        for (int i = 0; i < len; i++) {
            if (raw) buf[i] = (char)(1 + (int)(gt_rand(&s) * 255));
            else buf[i] = alphabet[(int)(gt_rand(&s) * (sizeof alphabet - 1))];
        }
        buf[len] = 0;
        goblin_formula *f = NULL;
        goblin_errbuf fe;
        goblin_err e = goblin_formula_parse(buf, &f, &fe);
        if (e == GOBLIN_OK) {
            accepted++;
            check_accepted(f);
            goblin_formula_free(f);
        } else {
            cr_assert(e == GOBLIN_ESYNTAX || e == GOBLIN_ELIMIT || e == GOBLIN_EINVAL,
                      "\"%s\": %s", buf, goblin_err_name(e));
            cr_assert(fe.position >= -1 && fe.position <= len, "\"%s\": position %d", buf,
                      fe.position);
            cr_assert(fe.message[0] != 0);
        }
    }
    cr_assert(accepted > 0, "the generator never produced a valid formula");
}

Test(formula_parse, mutated_valid_formulas_never_crash) {
    static const char *seeds[] = {
        "a * exp(-b * x) + c", "where(x > 0, x, 0.01 * x) ** 2", "(i * 2654435761) % 1000003",
        "clamp(x, lo, hi) // 3 - -y", "not (a < b) and c or ~d << 2 >> 1 & 0xff | e ^ f",
    };
    static const char pieces[] = "()+-*/,x1.e<=>&|^~%";
    uint64_t s = 42;
    char buf[300];
    for (int it = 0; it < 20000; it++) {
        const char *seed = seeds[it % 5];
        size_t n = strlen(seed);
        memcpy(buf, seed, n + 1);
        int edits = 1 + (int)(gt_rand(&s) * 4);
        for (int k = 0; k < edits && n > 0; k++) {
            size_t p = (size_t)(gt_rand(&s) * (double)n);
            int kind = (int)(gt_rand(&s) * 3);
            if (kind == 0) { /* replace */
                buf[p] = pieces[(int)(gt_rand(&s) * (sizeof pieces - 1))];
            } else if (kind == 1) { /* delete */
                memmove(buf + p, buf + p + 1, n - p);
                n--;
            } else if (n + 1 < sizeof buf) { /* insert */
                memmove(buf + p + 1, buf + p, n - p + 1);
                buf[p] = pieces[(int)(gt_rand(&s) * (sizeof pieces - 1))];
                n++;
            }
        }
        goblin_formula *f = NULL;
        goblin_errbuf fe;
        goblin_err e = goblin_formula_parse(buf, &f, &fe);
        if (e == GOBLIN_OK) {
            check_accepted(f);
            goblin_formula_free(f);
        } else {
            cr_assert(fe.position >= -1 && fe.position <= (int32_t)n);
        }
    }
}

/* ---- program validator -------------------------------------------------------------- */

static void compile_text(const char *text, uint8_t **prog, size_t *size) {
    goblin_formula *f = NULL;
    cr_assert_eq(goblin_formula_parse(text, &f, NULL), GOBLIN_OK);
    void *p;
    cr_assert_eq(goblin__formula_compile(f, &p, size), GOBLIN_OK);
    *prog = p;
    goblin_formula_free(f);
}

static goblin_err validate(const uint8_t *p, size_t n, int32_t n_in, goblin_dtype dt, char *msg) {
    return goblin__formula_validate(p, n, n_in, dt, NULL, msg, 200);
}

Test(formula_validate, hand_made_bad_programs_are_refused) {
    char msg[200];
    /* a valid "x + y": GF 1 2 | n_instr 3 | 0 0 | VAR 0 VAR 1 ADD */
    uint8_t ok[] = {'G', 'F', 1, 2, 3, 0, 0, 0, 1, 0, 1, 1, 48};
    cr_assert_eq(validate(ok, sizeof ok, 2, F32, msg), GOBLIN_OK, "%s", msg);
    uint8_t p[64];
#define BAD(mod, n_in, dt, code, needle)                                                 \
    do {                                                                                 \
        memcpy(p, ok, sizeof ok);                                                        \
        size_t n_ = sizeof ok;                                                           \
        mod;                                                                             \
        goblin_err e_ = validate(p, n_, n_in, dt, msg);                                  \
        cr_assert_eq(e_, code, "%s: got %s (%s)", #mod, goblin_err_name(e_), msg);       \
        cr_assert(strstr(msg, needle), "%s: message \"%s\" lacks \"%s\"", #mod, msg, needle); \
    } while (0)
    BAD(n_ = 5, 2, F32, GOBLIN_EFORMAT, "truncated");
    BAD(p[0] = 'X', 2, F32, GOBLIN_EFORMAT, "magic");
    BAD(p[2] = 2, 2, F32, GOBLIN_EVERSION, "version 2");
    BAD(p[3] = 0, 2, F32, GOBLIN_EFORMAT, "0 variables");
    BAD(p[3] = 17, 2, F32, GOBLIN_EFORMAT, "17 variables");
    BAD(p[4] = 0, 2, F32, GOBLIN_EFORMAT, "0 instructions");
    BAD((p[4] = 1, p[5] = 1), 2, F32, GOBLIN_EFORMAT, "257 instructions");
    BAD(p[6] = 1, 2, F32, GOBLIN_EFORMAT, "reserved");
    BAD((void)0, 3, F32, GOBLIN_EINVAL, "reads 2 variables but the node has 3 inputs");
    BAD(p[11] = 2, 2, F32, GOBLIN_EFORMAT, "reads input 2 of 2");
    BAD(p[12] = 47, 2, F32, GOBLIN_EFORMAT, "unknown opcode 47");
    BAD(p[12] = 0, 2, F32, GOBLIN_EFORMAT, "unknown opcode 0");
    BAD(p[12] = 80, 2, F32, GOBLIN_EFORMAT, "needs 3 operands, has 2");
    BAD((p[8] = 48, p[9] = 1, p[10] = 0, p[11] = 1, p[12] = 1, n_ = 13), 2, F32, GOBLIN_EFORMAT,
        "needs 2 operands, has 0");
    BAD(p[12] = 16, 2, F32, GOBLIN_EFORMAT, "leaves 2 values");
    BAD((p[13] = 0, n_ = 14), 2, F32, GOBLIN_EFORMAT, "1 bytes after");
    BAD(p[4] = 4, 2, F32, GOBLIN_EFORMAT, "ends after 3 of 4");
    BAD(n_ = 12, 2, F32, GOBLIN_EFORMAT, "ends after 2 of 3");
    BAD(n_ = 11, 2, F32, GOBLIN_EFORMAT, "truncated in instruction 1");
    /* a literal missing its 8 bytes */
    BAD((p[10] = 2, n_ = 13), 2, F32, GOBLIN_EFORMAT, "truncated in instruction 1");
    /* dtype rules */
    BAD(p[12] = 51, 2, I32, GOBLIN_EDTYPE, "'/' is true division");
    BAD(p[12] = 65, 2, F32, GOBLIN_EDTYPE, "'&' needs an integer dtype");
    BAD(p[12] = 69, 2, F64, GOBLIN_EDTYPE, "'>>' needs an integer dtype");
    BAD((void)0, 2, BOOL, GOBLIN_EDTYPE, "not bool");
    BAD((p[4] = 2, p[10] = 20, n_ = 11), 2, I64, GOBLIN_EDTYPE, "exp() needs a float dtype");
    cr_assert_eq(validate(NULL, 0, 1, F32, msg), GOBLIN_EFORMAT);
    cr_assert_eq(validate(ok, GOBLIN__FPROG_MAX_BYTES + 1, 2, F32, msg), GOBLIN_EFORMAT);
#undef BAD
    /* a float literal in an integer formula */
    uint8_t *q;
    size_t qn;
    compile_text("x * 0.5", &q, &qn);
    cr_assert_eq(validate(q, qn, 1, I32, msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "float literal"), "%s", msg);
    cr_assert_eq(validate(q, qn, 1, F16, msg), GOBLIN_OK);
    goblin__free(q);
}

Test(formula_validate, dtype_errors_at_graph_build) {
    char msg[300];
    cr_assert_eq(fbuild("a / b", I32, 2, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "use '//' for floor division"), "%s", msg);
    cr_assert(strstr(msg, "formula"), "%s", msg);
    cr_assert_eq(fbuild("exp(a)", U8, 1, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "exp() needs a float dtype, not u8"), "%s", msg);
    cr_assert_eq(fbuild("a ^ b", F32, 2, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "'^' needs an integer dtype"), "%s", msg);
    cr_assert_eq(fbuild("~a", F64, 1, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(fbuild("a * 1.5", I64, 1, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(fbuild("a + b", BOOL, 2, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(fbuild("a // b + a % b", I8, 2, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_eq(fbuild("a / b", BF16, 2, msg, sizeof msg), GOBLIN_OK, "%s", msg);

    /* mixed dtypes, shapes that do not broadcast, wrong input counts */
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t x, y, z, w, out;
    goblin_graph_input(g, F32, 1, SH(4), &x);
    goblin_graph_input(g, F64, 1, SH(4), &y);
    goblin_graph_input(g, F32, 1, SH(3), &z);
    goblin_graph_input(g, F32, 2, SH(2, 1), &w);
    goblin_formula *f;
    goblin_formula_parse("a + b", &f, NULL);
    cr_assert_eq(goblin_graph_add_formula(g, f, (int32_t[]){x, y}, 2, &out), GOBLIN_EDTYPE);
    cr_assert(strstr(goblin_graph_error(g), "insert a cast"), "%s", goblin_graph_error(g));
    cr_assert_eq(goblin_graph_add_formula(g, f, (int32_t[]){x, z}, 2, &out), GOBLIN_ESHAPE);
    cr_assert_eq(goblin_graph_add_formula(g, f, (int32_t[]){x}, 1, &out), GOBLIN_EINVAL);
    cr_assert_eq(goblin_graph_add_formula(g, f, (int32_t[]){x, w}, 2, &out), GOBLIN_OK);
    goblin_tensor info;
    goblin_graph_node(g, out, NULL, &info, NULL, NULL);
    cr_assert_eq(info.dtype, F32);
    cr_assert_eq(info.rank, 2);
    cr_assert_eq(info.shape[0], 2);
    cr_assert_eq(info.shape[1], 4);
    goblin_formula_free(f);
    /* FORMULA cannot be added through goblin_graph_add (it needs its program) */
    cr_assert_neq(goblin_graph_add(g, GOBLIN_OP_FORMULA, (int32_t[]){x}, 1, NULL, 0, &out),
                  GOBLIN_OK);
    goblin_graph_free(g);
}

/* Evaluate a program that passed validation, directly through the reference kernel. */
static void eval_program(const uint8_t *prog, size_t size, int32_t n_in, goblin_dtype dt) {
    goblin__node node;
    memset(&node, 0, sizeof node);
    node.op = GOBLIN_OP_FORMULA;
    node.dtype = dt;
    node.rank = 1;
    node.shape[0] = 700; /* more than one block */
    node.payload = (void *)prog;
    node.payload_size = size;
    static double xs[700], ys[700], o[700];
    for (int i = 0; i < 700; i++) {
        xs[i] = i * 0.37 - 100;
        ys[i] = 3 - i * 0.011;
    }
    double s = 2.5;
    goblin_tensor in[16];
    for (int i = 0; i < n_in; i++) {
        if (i % 3 == 2) in[i] = gt_tensor(dt, 0, NULL, &s);
        else in[i] = gt_tensor(dt, 1, SH(700), i % 3 ? ys : xs);
    }
    goblin_tensor out = gt_tensor(dt, 1, SH(700), o);
    char msg[200];
    goblin__kctx k = {1, NULL, msg, sizeof msg};
    goblin__kernel_fn fn = goblin__ref_kernel(GOBLIN_OP_FORMULA);
    cr_assert_not_null(fn);
    goblin_err e = fn(&k, &node, in, n_in, &out);
    cr_assert_eq(e, GOBLIN_OK, "%s", msg);
}

Test(formula_validate, corrupted_programs_are_valid_or_cleanly_refused) {
    static const char *texts[] = {
        "a * exp(-b * x) + c",
        "where(x > 0, x, 0.01 * x) ** 2 - clamp(y, -1, 1)",
        "(a // 3 + b % 7) * min(a, b) - max(c, 2) + (a == b) + (a != c)",
        "sigmoid(a) + tanh(b) + erf(c) + sqrt(abs(a)) + log(b * b + 1) + round(c) + floor(a)",
    };
    uint64_t s = 7;
    int valid_after = 0;
    for (int t = 0; t < 4; t++) {
        uint8_t *good;
        size_t n;
        compile_text(texts[t], &good, &n);
        goblin_formula *f;
        goblin_formula_parse(texts[t], &f, NULL);
        int32_t nv = goblin_formula_var_count(f);
        goblin_formula_free(f);
        char msg[200];
        cr_assert_eq(validate(good, n, nv, F64, msg), GOBLIN_OK, "%s", msg);
        uint8_t buf[GOBLIN__FPROG_MAX_BYTES + 8];
        for (int it = 0; it < 3000; it++) {
            memcpy(buf, good, n);
            size_t m = n;
            int flips = 1 + (int)(gt_rand(&s) * 3);
            for (int k = 0; k < flips; k++) {
                size_t p = (size_t)(gt_rand(&s) * (double)m);
                if (gt_rand(&s) < 0.5) buf[p] ^= (uint8_t)(1u << (int)(gt_rand(&s) * 8));
                else buf[p] = (uint8_t)(gt_rand(&s) * 256);
            }
            double r = gt_rand(&s);
            if (r < 0.1) m = (size_t)(gt_rand(&s) * (double)m); /* truncate */
            else if (r < 0.15) buf[m++] = (uint8_t)(gt_rand(&s) * 256); /* extend */
            goblin_dtype dts[3] = {F64, F32, I32};
            for (int d = 0; d < 3; d++) {
                msg[0] = 0;
                goblin_err e = validate(buf, m, nv, dts[d], msg);
                if (e == GOBLIN_OK) {
                    valid_after++;
                    eval_program(buf, m, nv, dts[d]);
                } else {
                    cr_assert(e == GOBLIN_EFORMAT || e == GOBLIN_EDTYPE || e == GOBLIN_EVERSION ||
                                  e == GOBLIN_EINVAL,
                              "%s", goblin_err_name(e));
                    cr_assert(msg[0] != 0);
                }
            }
        }
        goblin__free(good);
    }
    cr_assert(valid_after > 0, "no mutation stayed valid: the evaluation path went untested");
}

/* ---- evaluation: hand-derived values ---------------------------------------------- */

Test(formula_eval, precedence_by_value) {
    /* a=2, b=3, c=2 */
    cr_assert_eq(f64_of("a + b * c", 3, D(2, 3, 2)), 8);
    cr_assert_eq(f64_of("a - b - c", 3, D(2, 3, 2)), -3);
    cr_assert_eq(f64_of("a ** b ** c", 3, D(2, 3, 2)), 512);   /* 2 ** 9 */
    cr_assert_eq(f64_of("-a ** c", 2, D(2, 2)), -4);
    cr_assert_eq(f64_of("a ** -c", 2, D(2, 2)), 0.25);
    cr_assert_eq(f64_of("a / b / c", 3, D(3, 2, 4)), 0.375);
    cr_assert_eq(f64_of("a // b * c", 3, D(7, 2, 3)), 9);
    cr_assert_eq(f64_of("a % b ** c", 3, D(7, 2, 2)), 3);
    cr_assert_eq(f64_of("a < b and b < c", 3, D(1, 2, 3)), 1);
    cr_assert_eq(f64_of("a < b and b > c", 3, D(1, 2, 3)), 0);
    cr_assert_eq(f64_of("a or b and c", 3, D(1, 0, 0)), 1);
    cr_assert_eq(f64_of("(a or b) and c", 3, D(1, 0, 0)), 0);
    cr_assert_eq(f64_of("not a == b", 2, D(1, 1)), 0);
    cr_assert_eq(f64_of("not not a", 1, D(5)), 1);
    cr_assert_eq(i64_of("a & b | c ^ d", 4, L(12, 10, 6, 3)), 13); /* 8 | 5 */
    cr_assert_eq(i64_of("a << b + c", 3, L(1, 2, 3)), 32);
    cr_assert_eq(i64_of("~a + 1", 1, L(5)), -5);
    cr_assert_eq(i64_of("-a - -b", 2, L(5, 7)), 2);
}

Test(formula_eval, functions_on_f64_against_libm) {
    double x = 0.7, y = -1.3;
    cr_assert_eq(f64_of("exp(x)", 1, D(x)), exp(x));
    cr_assert_eq(f64_of("log(x)", 1, D(x)), log(x));
    cr_assert_eq(f64_of("sqrt(x)", 1, D(x)), sqrt(x));
    cr_assert_eq(f64_of("rsqrt(x)", 1, D(x)), 1 / sqrt(x));
    cr_assert_eq(f64_of("sin(x) + cos(y)", 2, D(x, y)), sin(x) + cos(y));
    cr_assert_eq(f64_of("tanh(y) * erf(x)", 2, D(y, x)), tanh(y) * erf(x)); /* y comes first */
    cr_assert_eq(f64_of("log1p(x) - expm1(y)", 2, D(x, y)), log1p(x) - expm1(y));
    cr_assert_eq(f64_of("sigmoid(y)", 1, D(y)), 1 / (1 + exp(1.3)));
    cr_assert_eq(f64_of("relu(y) + relu(x)", 2, D(y, x)), x);
    cr_assert_eq(f64_of("abs(y)", 1, D(y)), 1.3);
    cr_assert_eq(f64_of("floor(y) + ceil(x) * 10 + trunc(y) * 100", 2, D(y, x)), -2 + 10 - 100);
    cr_assert_eq(f64_of("round(x) + round(y)", 2, D(2.5, -3.5)), 2 - 4); /* half to even */
    cr_assert_eq(f64_of("pow(x, y)", 2, D(x, y)), pow(x, y));
    cr_assert_eq(f64_of("min(x, y) + 10 * max(x, y)", 2, D(x, y)), y + 10 * x);
    cr_assert_eq(f64_of("clamp(x, -0.5, 0.5)", 1, D(x)), 0.5);
    cr_assert_eq(f64_of("clamp(x, 1, 0)", 1, D(x)), 0); /* lo > hi gives hi, as torch */
    cr_assert_eq(f64_of("where(x > y, x, y)", 2, D(x, y)), x);
    cr_assert_eq(f64_of("x * 1e3 + 2.5e-1", 1, D(x)), 700.25);
}

Test(formula_eval, python_floor_division_and_modulo_on_floats) {
    /* Python: -7.5 // 2 == -4.0, -7.5 % 2 == 0.5, 7.5 // -2 == -4.0, 7.5 % -2 == -0.5,
     * 1.0 // 0.1 == 9.0 (the exact quotient is 9.99..), 1.0 % 0.1 == 0.09999999999999995 */
    cr_assert_eq(f64_of("a // b", 2, D(-7.5, 2)), -4);
    cr_assert_eq(f64_of("a % b", 2, D(-7.5, 2)), 0.5);
    cr_assert_eq(f64_of("a // b", 2, D(7.5, -2)), -4);
    cr_assert_eq(f64_of("a % b", 2, D(7.5, -2)), -0.5);
    cr_assert_eq(f64_of("a // b", 2, D(1.0, 0.1)), 9);
    cr_assert_eq(f64_of("a % b", 2, D(1.0, 0.1)), fmod(1.0, 0.1));
    cr_assert(isinf(f64_of("a // b", 2, D(1.0, 0.0))));
    cr_assert(isnan(f64_of("a % b", 2, D(1.0, 0.0))));
    double z = f64_of("a % b", 2, D(4.0, -2.0)); /* zero remainder takes the divisor's sign */
    cr_assert(z == 0 && signbit(z));
}

Test(formula_eval, nan_and_inf_semantics) {
    double nan = NAN, inf = INFINITY;
    cr_assert(isnan(f64_of("max(a, b)", 2, D(nan, 1))));
    cr_assert(isnan(f64_of("min(a, b)", 2, D(1, nan))));
    cr_assert(isnan(f64_of("relu(a)", 1, D(nan))));
    cr_assert(isnan(f64_of("clamp(a, 0, 1)", 1, D(nan))));
    cr_assert_eq(f64_of("a == a", 1, D(nan)), 0);
    cr_assert_eq(f64_of("a != a", 1, D(nan)), 1);
    cr_assert_eq(f64_of("a < b or a >= b", 2, D(nan, 1)), 0);
    cr_assert_eq(f64_of("where(a, 1, 2)", 1, D(nan)), 1); /* NaN is true */
    cr_assert_eq(f64_of("not a", 1, D(nan)), 0);
    cr_assert_eq(f64_of("a and 1", 1, D(nan)), 1);
    cr_assert_eq(f64_of("exp(a)", 1, D(-inf)), 0);
    cr_assert_eq(f64_of("exp(a)", 1, D(inf)), inf);
    cr_assert_eq(f64_of("a / b", 2, D(1, 0)), inf);
    cr_assert(isnan(f64_of("a - a", 1, D(inf))));
    cr_assert_eq(f64_of("sigmoid(a) + 2 * sigmoid(b)", 2, D(-inf, inf)), 2);
}

/* Python's floor division and modulo on int64, written out independently. */
static int64_t py_floordiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int64_t py_mod(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

Test(formula_eval, integer_hash_formula_on_i64_and_i32) {
    enum { N = 2000 };
    static int64_t iv[N];
    static int32_t jv[N];
    for (int k = 0; k < N; k++) {
        iv[k] = (int64_t)k * 7919 - 5000000; /* negatives too */
        jv[k] = (int32_t)iv[k];
    }
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int b = 0; b < 2; b++) {
        if (bes[b] == BLIS && !have_blis()) continue;
        goblin_tensor in = gt_tensor(I64, 1, SH(N), iv);
        goblin_tensor o = fev("(i * 2654435761) % 1000003", &in, 1, bes[b], 2);
        for (int k = 0; k < N; k++) {
            /* |i| < 2^24, so i * 2654435761 < 2^56: no wraparound in i64 */
            int64_t want = py_mod(iv[k] * 2654435761LL, 1000003);
            cr_assert_eq(((int64_t *)o.data)[k], want, "i=%lld", (long long)iv[k]);
        }
        goblin_buffer_free(o.data);
        /* i32: the literal wraps to 2654435761 - 2^32 and the product wraps mod 2^32 */
        in = gt_tensor(I32, 1, SH(N), jv);
        o = fev("(i * 2654435761) % 1000003", &in, 1, bes[b], 2);
        for (int k = 0; k < N; k++) {
            int32_t prod = (int32_t)((uint32_t)jv[k] * 2654435761u);
            int32_t want = (int32_t)py_mod(prod, 1000003);
            cr_assert_eq(((int32_t *)o.data)[k], want, "i=%d", jv[k]);
        }
        goblin_buffer_free(o.data);
    }
}

Test(formula_eval, integer_division_shift_and_wraparound_semantics) {
    int64_t as[] = {-7, 7, -7, 7, 5, -5, 0, INT64_MIN, INT64_MIN, 123};
    int64_t bs[] = {2, -2, -2, 2, 0, 0, 3, -1, 1, 1};
    for (size_t k = 0; k < sizeof as / sizeof as[0]; k++) {
        cr_assert_eq(i64_of("a // b", 2, L(as[k], bs[k])), py_floordiv(as[k], bs[k]));
        cr_assert_eq(i64_of("a % b", 2, L(as[k], bs[k])), py_mod(as[k], bs[k]));
    }
    cr_assert_eq(i64_of("a // b", 2, L(-7, 2)), -4);
    cr_assert_eq(i64_of("a % b", 2, L(-7, 2)), 1);
    cr_assert_eq(i64_of("a % b", 2, L(7, -2)), -1);
    cr_assert_eq(i64_of("a // b", 2, L(INT64_MIN, -1)), INT64_MIN);
    cr_assert_eq(i64_of("a * b", 2, L(INT64_MAX, 2)), -2);
    cr_assert_eq(i64_of("a + b", 2, L(INT64_MAX, 1)), INT64_MIN);
    cr_assert_eq(i64_of("-a", 1, L(INT64_MIN)), INT64_MIN);
    cr_assert_eq(i64_of("abs(a)", 1, L(-5)), 5);
    cr_assert_eq(i64_of("a ** b", 2, L(3, 4)), 81);
    cr_assert_eq(i64_of("a ** b", 2, L(2, 64)), 0);   /* wraps */
    cr_assert_eq(i64_of("a ** b", 2, L(2, -1)), 0);
    cr_assert_eq(i64_of("a ** b", 2, L(-1, -3)), -1);
    cr_assert_eq(i64_of("a << b", 2, L(1, 63)), INT64_MIN);
    cr_assert_eq(i64_of("a << b", 2, L(1, 64)), 0);
    cr_assert_eq(i64_of("a << b", 2, L(1, -1)), 0);
    cr_assert_eq(i64_of("a >> b", 2, L(-16, 2)), -4); /* arithmetic */
    cr_assert_eq(i64_of("a >> b", 2, L(-16, 99)), -1);
    cr_assert_eq(i64_of("a >> b", 2, L(16, 99)), 0);
    cr_assert_eq(i64_of("a > b", 2, L(3, 2)) + i64_of("a <= b", 2, L(3, 2)), 1);
    cr_assert_eq(i64_of("where(a, b, 0x7fffffffffffffff)", 2, L(0, 1)), INT64_MAX);
    cr_assert_eq(i64_of("relu(a) + floor(b) + round(b)", 2, L(-3, 4)), 8);
    cr_assert_eq(i64_of("clamp(a, b, 10)", 2, L(-3, 4)), 4);

    /* narrow types wrap per operation, like NumPy's */
    int8_t a8[4] = {100, -128, 127, -7}, b8[4] = {100, -1, 9, 2};
    goblin_tensor in[2] = {gt_tensor(I8, 1, SH(4), a8), gt_tensor(I8, 1, SH(4), b8)};
    goblin_tensor o = fev("(a + b) // 2 + a * b % 3 + (a << 1)", in, 2, REF, 1);
    for (int k = 0; k < 4; k++) {
        int8_t s = (int8_t)(uint8_t)((uint8_t)a8[k] + (uint8_t)b8[k]);
        int8_t p = (int8_t)(uint8_t)((unsigned)(uint8_t)a8[k] * (uint8_t)b8[k]);
        int8_t sh = (int8_t)(uint8_t)((unsigned)(uint8_t)a8[k] << 1);
        int8_t t = (int8_t)(uint8_t)((uint8_t)py_floordiv(s, 2) + (uint8_t)py_mod(p, 3));
        int8_t want = (int8_t)(uint8_t)((uint8_t)t + (uint8_t)sh);
        cr_assert_eq(((int8_t *)o.data)[k], want, "k=%d: %d want %d", k, ((int8_t *)o.data)[k], want);
    }
    goblin_buffer_free(o.data);
    /* u8: -x wraps, >> is logical, 300 wraps to 44 */
    uint8_t u[3] = {1, 200, 255};
    goblin_tensor ui = gt_tensor(U8, 1, SH(3), u);
    o = fev("-x + (x >> 1) + 300", &ui, 1, REF, 1);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(((uint8_t *)o.data)[k], (uint8_t)(256 - u[k] + (u[k] >> 1) + 44));
    goblin_buffer_free(o.data);
    /* i16 and every dtype of the formula family */
    int16_t a16[2] = {30000, -30000};
    goblin_tensor i16 = gt_tensor(I16, 1, SH(2), a16);
    o = fev("x * 2 // 3", &i16, 1, REF, 1);
    cr_assert_eq(((int16_t *)o.data)[0], (int16_t)py_floordiv((int16_t)(uint16_t)(60000u), 3));
    cr_assert_eq(((int16_t *)o.data)[1], (int16_t)py_floordiv((int16_t)(uint16_t)(-60000 + 65536 * 2), 3));
    goblin_buffer_free(o.data);
}

Test(formula_eval, broadcasting_strides_and_blocks) {
    /* x [37, 29] contiguous, y [29], z [37, 1], w a transposed view [37, 29] of [29, 37]:
     * small integers in f64 keep the arithmetic exact, so == is the right test. */
    enum { R = 37, C = 29 };
    static double x[R * C], y[C], z[R], wt[C * R];
    for (int i = 0; i < R * C; i++) x[i] = i % 13 - 6;
    for (int j = 0; j < C; j++) y[j] = j - 14;
    for (int i = 0; i < R; i++) z[i] = 3 * i;
    for (int i = 0; i < C * R; i++) wt[i] = i % 7;
    goblin_tensor in[4] = {gt_tensor(F64, 2, SH(R, C), x), gt_tensor(F64, 1, SH(C), y),
                           gt_tensor(F64, 2, SH(R, 1), z), gt_tensor(F64, 2, SH(R, C), wt)};
    in[3].strides[0] = 1; /* w[i][j] = wt[j * R + i] */
    in[3].strides[1] = R;
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int b = 0; b < 2; b++) {
        if (bes[b] == BLIS && !have_blis()) continue;
        goblin_tensor o = fev("x * y - z + w * 2", in, 4, bes[b], 3);
        cr_assert_eq(o.rank, 2);
        cr_assert_eq(o.shape[0], R);
        cr_assert_eq(o.shape[1], C);
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                double want = x[i * C + j] * y[j] - z[i] + wt[j * R + i] * 2;
                cr_assert_eq(((double *)o.data)[i * C + j], want, "[%d,%d]", i, j);
            }
        goblin_buffer_free(o.data);
    }
    /* a column [R,1] against a row [1,C]: no input is full-size */
    goblin_tensor cr[2] = {gt_tensor(F64, 2, SH(R, 1), z), gt_tensor(F64, 2, SH(1, C), y)};
    goblin_tensor o = fev("a - b", cr, 2, REF, 1);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) cr_assert_eq(((double *)o.data)[i * C + j], z[i] - y[j]);
    goblin_buffer_free(o.data);
}

Test(formula_eval, empty_scalars_constants_and_variables_as_results) {
    double x[6] = {1, 2, 3, 4, 5, 6}, s = 10;
    /* empty */
    goblin_tensor e = gt_tensor(F64, 2, SH(0, 3), NULL);
    goblin_tensor o = fev("exp(x) + 1", &e, 1, REF, 1);
    cr_assert_eq(o.rank, 2);
    cr_assert_eq(o.shape[0], 0);
    goblin_buffer_free(o.data);
    if (have_blis()) {
        o = fev("exp(x) + 1", &e, 1, BLIS, 2);
        goblin_buffer_free(o.data);
    }
    /* all inputs scalar: the whole formula folds */
    goblin_tensor ss[2] = {sc(F64, &s), sc(F64, &s)};
    o = fev("a * b + 1", ss, 2, REF, 1);
    cr_assert_eq(o.rank, 0);
    cr_assert_eq(*(double *)o.data, 101);
    goblin_buffer_free(o.data);
    /* a constant result over a vector shape */
    goblin_tensor xv = gt_tensor(F64, 1, SH(6), x);
    o = fev("where(1, 2, x)", &xv, 1, REF, 1);
    for (int k = 0; k < 6; k++) cr_assert_eq(((double *)o.data)[k], 2);
    goblin_buffer_free(o.data);
    /* the result is a variable itself */
    o = fev("+x", &xv, 1, REF, 1);
    for (int k = 0; k < 6; k++) cr_assert_eq(((double *)o.data)[k], x[k]);
    goblin_buffer_free(o.data);
    goblin_tensor xs[2] = {xv, sc(F64, &s)}, sx[2] = {sc(F64, &s), xv};
    o = fev("where(0, s, x)", sx, 2, REF, 1);
    for (int k = 0; k < 6; k++) cr_assert_eq(((double *)o.data)[k], x[k]);
    goblin_buffer_free(o.data);
    /* a scalar broadcast into the result */
    o = fev("where(1, s, x)", sx, 2, REF, 1);
    cr_assert_eq(o.rank, 1);
    for (int k = 0; k < 6; k++) cr_assert_eq(((double *)o.data)[k], 10);
    goblin_buffer_free(o.data);
    /* an input the program does not read after folding (it still gives the shape) */
    o = fev("where(0, x, s)", xs, 2, REF, 1);
    cr_assert_eq(o.rank, 1);
    for (int k = 0; k < 6; k++) cr_assert_eq(((double *)o.data)[k], 10);
    goblin_buffer_free(o.data);
    /* the same variable read several times, and a caller-provided output buffer */
    double buf[6];
    goblin_tensor ob = gt_tensor(F64, 1, SH(6), buf);
    char msg[200];
    cr_assert_eq(feval("x * x - x", &xv, 1, REF, 1, &ob, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    for (int k = 0; k < 6; k++) cr_assert_eq(buf[k], x[k] * x[k] - x[k]);
}

Test(formula_eval, half_types_compute_in_f32_and_round_once) {
    /* 1 + 2^-11 is not representable in f16 (ulp at 1 is 2^-10), but
     * (1 + 2^-11) * 2 - 1 = 1 + 2^-10 is: computing in f32 and rounding once gives
     * it, rounding after each operation would not. Same idea for bf16 (ulp 2^-7). */
    uint16_t one = 0x3c00; /* f16 1.0 */
    goblin_tensor in = gt_tensor(F16, 0, NULL, &one);
    goblin_tensor o = fev("(x + 0.00048828125) * 2 - 1", &in, 1, REF, 1);
    cr_assert_eq(*(uint16_t *)o.data, 0x3c01, "got 0x%04x", *(uint16_t *)o.data); /* 1 + 2^-10 */
    goblin_buffer_free(o.data);
    uint16_t bone = 0x3f80; /* bf16 1.0 */
    in = gt_tensor(BF16, 0, NULL, &bone);
    o = fev("(x + 0.00390625) * 2 - 1", &in, 1, REF, 1);
    cr_assert_eq(*(uint16_t *)o.data, 0x3f81, "got 0x%04x", *(uint16_t *)o.data); /* 1 + 2^-7 */
    goblin_buffer_free(o.data);
    /* vectors of f16 with broadcasting, checked against f32 arithmetic rounded once */
    uint16_t xv[1000], yv[1];
    for (int k = 0; k < 1000; k++) xv[k] = goblin__f32_to_f16((float)(k - 500) * 0.125f);
    yv[0] = goblin__f32_to_f16(0.75f);
    goblin_tensor hin[2] = {gt_tensor(F16, 1, SH(1000), xv), gt_tensor(F16, 1, SH(1), yv)};
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int b = 0; b < 2; b++) {
        if (bes[b] == BLIS && !have_blis()) continue;
        o = fev("x * y + y", hin, 2, bes[b], 2);
        for (int k = 0; k < 1000; k++) {
            float xf = goblin__f16_to_f32(xv[k]);
            uint16_t want = goblin__f32_to_f16(xf * 0.75f + 0.75f);
            cr_assert_eq(((uint16_t *)o.data)[k], want, "k=%d", k);
        }
        goblin_buffer_free(o.data);
    }
}

Test(formula_eval, every_dtype) {
    /* "a * b + a - b" on each dtype with values exact in all of them */
    goblin_dtype dts[] = {F32, F64, F16, BF16, I8, I16, I32, I64, U8};
    double av[4] = {1, 2, 3, 4}, bv[4] = {4, 3, 2, 1};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        unsigned char abuf[32], bbuf[32];
        for (int k = 0; k < 4; k++) {
            goblin__store_f64(dts[d], abuf, k, av[k]);
            goblin__store_f64(dts[d], bbuf, k, bv[k]);
        }
        goblin_tensor in[2] = {gt_tensor(dts[d], 1, SH(4), abuf), gt_tensor(dts[d], 1, SH(4), bbuf)};
        goblin_tensor o = fev("a * b + a - b", in, 2, REF, 1);
        cr_assert_eq(o.dtype, dts[d]);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(goblin__load_f64(dts[d], o.data, k), av[k] * bv[k] + av[k] - bv[k], "%s",
                         goblin_dtype_name(dts[d]));
        goblin_buffer_free(o.data);
    }
}

/* ---- f32 exp ------------------------------------------------------------------------ */

static double ulp_err(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : 1e9;
    float wf = (float)want;
    if (isinf(wf)) return got == wf || got == FLT_MAX ? 0 : 1e9; /* overflow: inf (or 1 ulp off) */
    double u;
    if (fabs(want) < FLT_MIN) u = 0x1p-149;
    else {
        int e;
        frexp(want, &e);
        u = ldexp(1.0, e - 24);
    }
    return fabs((double)got - want) / u;
}

/* Measured over all 2^32 inputs (a throwaway program; too slow for the suite): at most
 * 0.9782 ulp, at x = 0x1.4e8e1ep+2. */
Test(formula_exp, f32_exp_within_0_98_ulp_and_specials) {
    double worst = 0;
    /* every 257th bit pattern: ~17M inputs over the whole float range */
    for (uint64_t b = 0; b < 0x100000000ull; b += 257) {
        uint32_t u = (uint32_t)b;
        float x;
        memcpy(&x, &u, 4);
        float got = goblin__expf_vec(x);
        double e = ulp_err(got, exp((double)x));
        if (e > worst) worst = e;
        cr_assert(e <= 0.98, "exp(%a) = %a, want %a (%.3f ulp)", x, got, exp((double)x), e);
    }
    cr_assert(worst > 0.5, "the sweep was too small to mean anything");
    cr_assert_eq(ulp_err(goblin__expf_vec(0x1.4e8e1ep+2f), exp(0x1.4e8e1ep+2)) > 0.97, 1,
                 "the measured worst case moved: remeasure and update the bound");
    cr_assert_eq(goblin__expf_vec(INFINITY), INFINITY);
    cr_assert_eq(goblin__expf_vec(-INFINITY), 0);
    cr_assert(isnan(goblin__expf_vec(NAN)));
    cr_assert_eq(goblin__expf_vec(0), 1);
    cr_assert_eq(goblin__expf_vec(89.0f), INFINITY);
    cr_assert_eq(goblin__expf_vec(0x1.62e43p+6f), INFINITY);      /* first input that overflows */
    cr_assert(isfinite(goblin__expf_vec(0x1.62e42ep+6f)));        /* last one that does not */
    cr_assert_eq(goblin__expf_vec(-104.0f), 0);
    cr_assert_eq(goblin__expf_vec(-0x1.9db0eap+6f), 0x1p-149f);    /* smallest subnormal */
}

/* expf_impl.h's vector form (the BLIS softmax kernels' exp, x <= 0, no FMA): measured over
 * every float in [-inf, -0] at most 0.9517 ulp (at x = -0x1.df842cp+5); here every 61st
 * bit pattern of [-104, -0], 8 different inputs per call, and the ends. */
typedef float tf_v8f __attribute__((vector_size(32)));
typedef int32_t tf_v8i __attribute__((vector_size(32)));
static void vexp_neg(float y[8], const float x[8]) { /* arrays: no vector-ABI question */
    tf_v8f v;
    memcpy(&v, x, sizeof v);
    v = GOBLIN__VEXPF_NEG(tf_v8f, tf_v8i, v);
    memcpy(y, &v, sizeof v);
}

Test(formula_exp, vector_exp_of_nonpositive_within_0_96_ulp) {
    double worst = 0;
    const uint32_t first = 0x80000000u, last = 0xc2d00000u; /* -0 .. -104 */
    for (uint64_t b = first; b <= last; b += 8 * 61) {
        float x[8], y[8];
        for (int k = 0; k < 8; k++) {
            uint32_t u = (uint32_t)(b + 61 * (uint64_t)k < last ? b + 61 * (uint64_t)k : last);
            memcpy(&x[k], &u, 4);
        }
        vexp_neg(y, x);
        for (int k = 0; k < 8; k++) {
            double e = ulp_err(y[k], exp((double)x[k]));
            if (e > worst) worst = e;
            cr_assert(e <= 0.96, "vector exp(%a) = %a, want %a (%.3f ulp)", x[k], y[k],
                      exp((double)x[k]), e);
        }
    }
    cr_assert(worst > 0.5, "the sweep was too small to mean anything");
    float x[8] = {0, -0.0f, -0x1.df842cp+5f, -104.0f, -0x1.9db0eap+6f, -104.5f, -1e30f, -INFINITY};
    float y[8];
    vexp_neg(y, x);
    cr_assert_eq(y[0], 1);
    cr_assert_eq(y[1], 1);
    cr_assert(ulp_err(y[2], exp((double)x[2])) <= 0.96);
    cr_assert_eq(y[3], 0); /* e^-104 < 2^-150 */
    cr_assert_eq(y[4], 0x1p-149f); /* smallest subnormal */
    for (int k = 5; k < 8; k++) cr_assert_eq(y[k], 0, "exp(%a) = %a", x[k], y[k]);
}

/* The block loops (vectorized, one clone per ISA) must give the bits of the scalar function. */
Test(formula_exp, kernel_exp_matches_the_scalar_function_bit_for_bit) {
    enum { N = 100003 };
    float *x = malloc(N * sizeof(float));
    uint64_t s = 3;
    for (int k = 0; k < N; k++) x[k] = (float)(gt_rand(&s) * 220 - 110);
    x[5] = NAN;
    x[6] = INFINITY;
    x[7] = -INFINITY;
    goblin_tensor in = gt_tensor(F32, 1, SH(N), x);
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int b = 0; b < 2; b++) {
        if (bes[b] == BLIS && !have_blis()) continue;
        goblin_tensor o = fev("exp(x)", &in, 1, bes[b], 2);
        for (int k = 0; k < N; k++) {
            float want = goblin__expf_vec(x[k]);
            float got = ((float *)o.data)[k];
            cr_assert(memcmp(&got, &want, 4) == 0 || (isnan(got) && isnan(want)),
                      "exp(%a): kernel %a, scalar %a", x[k], got, want);
        }
        goblin_buffer_free(o.data);
    }
    free(x);
}

Test(formula_eval, f32_formula_against_double_reference) {
    enum { N = 5000 };
    static float x[N];
    float a = 1.5f, b = 0.75f, c = -0.25f;
    for (int k = 0; k < N; k++) x[k] = (float)k * 0.004f - 10;
    goblin_tensor in[4] = {sc(F32, &a), sc(F32, &b), gt_tensor(F32, 1, SH(N), x), sc(F32, &c)};
    goblin_tensor o = fev("a * exp(-b * x) + c", in, 4, REF, 1);
    double rel, abs_tol;
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_FORMULA, F32, 1, &rel, &abs_tol), GOBLIN_OK);
    cr_assert_eq(rel, 32 * 0x1p-24);
    for (int k = 0; k < N; k++) {
        double t = 1.5 * exp(-0.75 * (double)x[k]);
        double want = t - 0.25;
        double got = ((float *)o.data)[k];
        /* scale = the sum of the terms' magnitudes (cancellation near t == 0.25) */
        cr_assert(fabs(got - want) <= rel * (fabs(t) + 0.25), "x=%g: %.9g vs %.9g", x[k], got, want);
    }
    goblin_buffer_free(o.data);
}

/* ---- backends agree ----------------------------------------------------------------- */

Test(formula_backends, blis_equals_ref_bit_for_bit_for_any_thread_count) {
    if (!have_blis()) return;
    enum { R = 1000, C = 257 }; /* 502 blocks: up to 7 work items */
    static float x[R * C], y[C], o1[R * C];
    uint64_t s = 11;
    for (int i = 0; i < R * C; i++) x[i] = (float)(gt_rand(&s) * 20 - 10);
    for (int j = 0; j < C; j++) y[j] = (float)(gt_rand(&s) * 4 - 2);
    float a = 0.5f;
    goblin_tensor in[3] = {gt_tensor(F32, 2, SH(R, C), x), gt_tensor(F32, 1, SH(C), y), sc(F32, &a)};
    static const char *texts[] = {
        "a * exp(-a * x) + y",
        "where(x > y, sigmoid(x) * y, tanh(x - y)) + clamp(x, -a, a) // y",
        "sqrt(abs(x)) + log1p(abs(y)) + x % y + round(x * a) + max(x, y) ** 2",
    };
    for (int t = 0; t < 3; t++) {
        goblin_tensor r = fev(texts[t], in, 3, REF, 1);
        memcpy(o1, r.data, sizeof o1);
        goblin_buffer_free(r.data);
        for (int threads = 1; threads <= 4; threads++) {
            goblin_tensor b = fev(texts[t], in, 3, BLIS, threads);
            cr_assert(memcmp(b.data, o1, sizeof o1) == 0, "\"%s\" with %d threads differs",
                      texts[t], threads);
            goblin_buffer_free(b.data);
        }
    }
    /* integers too */
    static int32_t iv[R * C], io[R * C];
    for (int i = 0; i < R * C; i++) iv[i] = (int32_t)(gt_rand(&s) * 2e9 - 1e9);
    int32_t k7 = 7;
    goblin_tensor ii[2] = {gt_tensor(I32, 2, SH(R, C), iv), sc(I32, &k7)};
    goblin_tensor r = fev("(x * 2654435761 ^ x >> 3) % 1000003 - x // k", ii, 2, REF, 1);
    memcpy(io, r.data, sizeof io);
    goblin_buffer_free(r.data);
    goblin_tensor b = fev("(x * 2654435761 ^ x >> 3) % 1000003 - x // k", ii, 2, BLIS, 2);
    cr_assert(memcmp(b.data, io, sizeof io) == 0);
    goblin_buffer_free(b.data);
}

Test(formula_backends, catalogue_entry) {
    goblin_op_info info;
    cr_assert_eq(goblin_op_get_info(GOBLIN_OP_FORMULA, &info), GOBLIN_OK);
    cr_assert_str_eq(info.group, "formula");
    cr_assert_eq(info.min_inputs, 1);
    cr_assert_eq(info.max_inputs, GOBLIN_FORMULA_MAX_VARS);
    cr_assert(strstr(info.semantics, "floors"));
    double rel, abs_tol;
    goblin_op_contract(GOBLIN_OP_FORMULA, I64, 1, &rel, &abs_tol);
    cr_assert_eq(rel, 0);
    cr_assert_eq(abs_tol, 0);
    goblin_op_contract(GOBLIN_OP_FORMULA, F64, 1, &rel, &abs_tol);
    cr_assert_eq(rel, 32 * 0x1p-53);
}

/* ---- allocation failure ------------------------------------------------------------- */

Test(formula_alloc, every_failure_is_enomem_and_leaks_nothing) {
    double xv[1000], yv = 2;
    for (int k = 0; k < 1000; k++) xv[k] = k;
    goblin_tensor in[2] = {gt_tensor(F64, 1, SH(1000), xv), sc(F64, &yv)};
    bool finished = false;
    for (long fail_at = 0; fail_at < 200 && !finished; fail_at++) {
        gt_alloc_on();
        gt_allocs.fail_at = fail_at;
        goblin_formula *f = NULL;
        goblin_err e = goblin_formula_parse("x * y + exp(-y)", &f, NULL);
        goblin_graph *g = NULL;
        goblin_exec *ex = NULL;
        goblin_tensor out;
        memset(&out, 0, sizeof out);
        int32_t ids[2], z;
        if (!e) e = goblin_graph_new(&g);
        if (!e) e = goblin_graph_input(g, F64, 1, SH(1000), &ids[0]);
        if (!e) e = goblin_graph_input(g, F64, 0, NULL, &ids[1]);
        if (!e) e = goblin_graph_add_formula(g, f, ids, 2, &z);
        if (!e) e = goblin_graph_output(g, z);
        if (!e) e = goblin_exec_new(&ex, g, NULL);
        if (!e) e = goblin_exec_run(ex, in, 2, &out, 1);
        if (!e) {
            finished = true;
            cr_assert_eq(((double *)out.data)[3], 3 * 2.0 + exp(-2.0));
        } else {
            cr_assert_eq(e, GOBLIN_ENOMEM, "failing allocation %ld gave %s", fail_at,
                         goblin_err_name(e));
        }
        goblin_buffer_free(out.data);
        goblin_exec_free(ex);
        goblin_graph_free(g);
        goblin_formula_free(f);
        gt_alloc_off();
        cr_assert_eq(gt_allocs.live, 0, "failing allocation %ld leaked %ld blocks", fail_at,
                     gt_allocs.live);
    }
    cr_assert(finished, "never got through without a failure");
}

/* ---- the wire ----------------------------------------------------------------------- */

Test(formula_wire, serialized_formula_round_trips_and_corruption_is_caught) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t x, y, z;
    goblin_graph_input(g, F64, 1, SH(5), &x);
    goblin_graph_input(g, F64, 0, NULL, &y);
    goblin_formula *f;
    cr_assert_eq(goblin_formula_parse("x * y - x // 2", &f, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add_formula(g, f, (int32_t[]){x, y}, 2, &z), GOBLIN_OK);
    goblin_formula_free(f);
    goblin_graph_output(g, z);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin_graph_serialize(g, &buf, &len), GOBLIN_OK);
    goblin_graph_free(g);
    /* the names x and y never reach the wire */
    cr_assert_null(memmem(buf, len, "x * y", 5));
    goblin_graph *h = NULL;
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_graph_deserialize(buf, len, NULL, &h, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    double xv[5] = {-3, -1, 0, 1, 3}, yv = 10, ov[5];
    goblin_tensor in[2] = {gt_tensor(F64, 1, SH(5), xv), sc(F64, &yv)};
    goblin_tensor out = gt_tensor(F64, 1, SH(5), ov);
    cr_assert_eq(goblin_graph_eval(h, NULL, in, 2, &out, 1), GOBLIN_OK);
    for (int k = 0; k < 5; k++) cr_assert_eq(ov[k], xv[k] * 10 - floor(xv[k] / 2));
    goblin_graph_free(h);
    /* flip bytes of the serialized graph: decoding fails cleanly or yields a graph
     * that evaluates without crashing */
    uint64_t s = 99;
    uint8_t *bad = malloc(len);
    for (int it = 0; it < 3000; it++) {
        memcpy(bad, buf, len);
        size_t p = len - 1 - (size_t)(gt_rand(&s) * 60); /* the formula node sits at the end */
        bad[p] ^= (uint8_t)(1u << (int)(gt_rand(&s) * 8));
        goblin_graph *q = NULL;
        goblin_err e = goblin_graph_deserialize(bad, len, NULL, &q, &msg_eb);
        if (e == GOBLIN_OK) {
            goblin_tensor o2;
            memset(&o2, 0, sizeof o2);
            if (goblin_graph_input_count(q) == 2 && goblin_graph_output_count(q) == 1 &&
                goblin_graph_eval(q, NULL, in, 2, &o2, 1) == GOBLIN_OK)
                goblin_buffer_free(o2.data);
            goblin_graph_free(q);
        } else {
            cr_assert(msg_eb.message[0] != 0);
        }
    }
    free(bad);
    goblin_buffer_free(buf);
}
