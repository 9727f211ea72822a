/* libgoblin/core/formula.c - the formula parser (text -> expression tree) and its
 * compiler (tree -> the position-independent program of formula_impl.h).
 *
 * A hand-written recursive-descent parser over a tiny on-demand lexer. Every
 * resource is bounded before it is used: the text length, the node count, the
 * variable count and the nesting depth (so hostile text cannot exhaust the C
 * stack). The tree carries no dtype: literals remember whether they were written
 * as integers or floats, and the dtype rules are checked when the program is
 * bound to inputs (ops_formula.c), because only then is the dtype known. */
#define _GNU_SOURCE /* strtod_l, newlocale */
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formula_prog.h"

/* Parentheses, calls and unary chains recurse; past this depth the text is
 * refused with GOBLIN_ELIMIT rather than risking the C stack. */
#define MAX_DEPTH 64

enum { NK_VAR, NK_INT, NK_FLOAT, NK_OP };

typedef struct fnode {
    uint8_t kind;   /* NK_* */
    uint8_t op;     /* goblin__fop for NK_OP */
    uint8_t n_args;
    int32_t pos;    /* byte offset of the token that made it */
    int32_t args[3];
    int64_t i;      /* NK_INT value; NK_VAR variable index */
    double f;       /* NK_FLOAT value */
} fnode;

struct goblin_formula {
    int32_t n_nodes, n_vars, root;
    char *names[GOBLIN_FORMULA_MAX_VARS];
    fnode nodes[GOBLIN_FORMULA_MAX_NODES];
};

/* ---- opcode tables ------------------------------------------------------- */

int goblin__fop_arity(int op) {
    switch (op) {
#define GOBLIN__FOP_AR(name, value, str, arity) case GOBLIN__FOP_##name: return arity;
        GOBLIN__FOP_MAP(GOBLIN__FOP_AR)
#undef GOBLIN__FOP_AR
    default: return -1;
    }
}

const char *goblin__fop_name(int op) {
    switch (op) {
#define GOBLIN__FOP_NM(name, value, str, arity) case GOBLIN__FOP_##name: return str;
        GOBLIN__FOP_MAP(GOBLIN__FOP_NM)
#undef GOBLIN__FOP_NM
    default: return NULL;
    }
}

unsigned goblin__fop_dtypes(int op) {
    const unsigned F = GOBLIN__FOP_ON_FLOAT, I = GOBLIN__FOP_ON_INT;
    switch (op) {
    case GOBLIN__FOP_FLOAT:
    case GOBLIN__FOP_DIV:
    case GOBLIN__FOP_EXP:
    case GOBLIN__FOP_LOG:
    case GOBLIN__FOP_SQRT:
    case GOBLIN__FOP_RSQRT:
    case GOBLIN__FOP_SIN:
    case GOBLIN__FOP_COS:
    case GOBLIN__FOP_TANH:
    case GOBLIN__FOP_ERF:
    case GOBLIN__FOP_SIGMOID:
    case GOBLIN__FOP_LOG1P:
    case GOBLIN__FOP_EXPM1: return F;
    case GOBLIN__FOP_BITNOT:
    case GOBLIN__FOP_BITAND:
    case GOBLIN__FOP_BITOR:
    case GOBLIN__FOP_BITXOR:
    case GOBLIN__FOP_SHL:
    case GOBLIN__FOP_SHR: return I;
    default: return goblin__fop_arity(op) >= 0 ? F | I : 0;
    }
}

/* ---- functions callable by name ------------------------------------------ */

static const struct {
    const char *name;
    uint8_t op;
    uint8_t n_args;
} k_funcs[] = {
    {"exp", GOBLIN__FOP_EXP, 1},         {"log", GOBLIN__FOP_LOG, 1},
    {"sqrt", GOBLIN__FOP_SQRT, 1},       {"rsqrt", GOBLIN__FOP_RSQRT, 1},
    {"abs", GOBLIN__FOP_ABS, 1},         {"sin", GOBLIN__FOP_SIN, 1},
    {"cos", GOBLIN__FOP_COS, 1},         {"tanh", GOBLIN__FOP_TANH, 1},
    {"erf", GOBLIN__FOP_ERF, 1},         {"floor", GOBLIN__FOP_FLOOR, 1},
    {"ceil", GOBLIN__FOP_CEIL, 1},       {"round", GOBLIN__FOP_ROUND, 1},
    {"trunc", GOBLIN__FOP_TRUNC, 1},     {"sigmoid", GOBLIN__FOP_SIGMOID, 1},
    {"relu", GOBLIN__FOP_RELU, 1},       {"log1p", GOBLIN__FOP_LOG1P, 1},
    {"expm1", GOBLIN__FOP_EXPM1, 1},     {"min", GOBLIN__FOP_MIN, 2},
    {"max", GOBLIN__FOP_MAX, 2},         {"pow", GOBLIN__FOP_POW, 2},
    {"where", GOBLIN__FOP_WHERE, 3},     {"clamp", GOBLIN__FOP_CLAMP, 3},
};

static int find_func(const char *s, size_t n) {
    for (size_t k = 0; k < sizeof k_funcs / sizeof k_funcs[0]; k++)
        if (strlen(k_funcs[k].name) == n && memcmp(k_funcs[k].name, s, n) == 0) return (int)k;
    return -1;
}

/* ---- lexer --------------------------------------------------------------- */

enum {
    TK_END,
    TK_INT,    /* integer literal: tok.i */
    TK_FLOAT,  /* float literal: tok.f */
    TK_NAME,   /* identifier (keywords included): text[pos, pos+len) */
    TK_OP,     /* operator or punctuation: tok.op is one of the OP_* below */
};

enum {
    OP_LPAREN = 256, OP_RPAREN, OP_COMMA, OP_POW, OP_FLOORDIV, OP_SHL, OP_SHR,
    OP_LE, OP_GE, OP_EQ, OP_NE,
    /* single characters use their own code: + - * / % & | ^ ~ < > */
};

typedef struct token {
    int kind;
    int op;
    int32_t pos, len;
    int64_t i;
    double f;
} token;

typedef struct parser {
    const char *s;
    int32_t n;     /* text length */
    token tok;     /* current token */
    goblin_formula *f;
    int depth;
    goblin_err err;
    goblin_errbuf *e;
} parser;

static goblin_err fail(parser *p, goblin_err code, int32_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static goblin_err fail(parser *p, goblin_err code, int32_t pos, const char *fmt, ...) {
    if (p->err) return p->err; /* keep the first error */
    p->err = code;
    if (p->e) {
        char what[100];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        p->e->position = pos;
        if (pos >= 0) snprintf(p->e->message, sizeof p->e->message, "%s at %d", what, (int)pos);
        else snprintf(p->e->message, sizeof p->e->message, "%s", what);
    }
    return code;
}

static bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_xdigit(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* strtod honours LC_NUMERIC, but formulas always use '.': parse in the "C"
 * locale (created once), or, if that cannot be had, with '.' replaced by the
 * current locale's decimal point. */
static locale_t g_c_locale;
static pthread_once_t g_c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void) { g_c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

static double parse_double(const char *s, int32_t len) {
    char buf[512];
    pthread_once(&g_c_locale_once, c_locale_init);
    if (g_c_locale) {
        size_t n = (size_t)len < sizeof buf - 1 ? (size_t)len : sizeof buf - 1;
        memcpy(buf, s, n);
        buf[n] = 0;
        return strtod_l(buf, NULL, g_c_locale);
    }
    const char *dp = localeconv()->decimal_point;
    size_t dpl = dp && dp[0] ? strlen(dp) : 1;
    size_t o = 0;
    for (int32_t k = 0; k < len && o + dpl + 1 < sizeof buf; k++) {
        if (s[k] == '.' && dp && dp[0]) {
            memcpy(buf + o, dp, dpl);
            o += dpl;
        } else {
            buf[o++] = s[k];
        }
    }
    buf[o] = 0;
    return strtod(buf, NULL);
}

static goblin_err lex_number(parser *p, int32_t i) {
    const char *s = p->s;
    token *t = &p->tok;
    int32_t start = i;
    if (s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
        i += 2;
        if (!is_xdigit(s[i])) return fail(p, GOBLIN_ESYNTAX, start, "invalid hex literal");
        uint64_t v = 0;
        for (; is_xdigit(s[i]); i++) {
            int d = is_digit(s[i]) ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10;
            if (v > ((uint64_t)INT64_MAX >> 4))
                return fail(p, GOBLIN_ESYNTAX, start,
                            "integer literal larger than 9223372036854775807");
            v = v * 16 + (uint64_t)d;
        }
        if (v > (uint64_t)INT64_MAX)
            return fail(p, GOBLIN_ESYNTAX, start,
                        "integer literal larger than 9223372036854775807");
        if (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '.')
            return fail(p, GOBLIN_ESYNTAX, start, "invalid number literal");
        t->kind = TK_INT;
        t->i = (int64_t)v;
        t->len = i - start;
        return GOBLIN_OK;
    }
    bool is_float = false;
    while (is_digit(s[i])) i++;
    if (s[i] == '.') {
        is_float = true;
        i++;
        while (is_digit(s[i])) i++;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        int32_t j = i + 1;
        if (s[j] == '+' || s[j] == '-') j++;
        if (!is_digit(s[j])) return fail(p, GOBLIN_ESYNTAX, start, "invalid exponent in number");
        while (is_digit(s[j])) j++;
        i = j;
        is_float = true;
    }
    if (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '.')
        return fail(p, GOBLIN_ESYNTAX, start, "invalid number literal");
    t->len = i - start;
    if (is_float) {
        t->kind = TK_FLOAT;
        t->f = parse_double(s + start, t->len);
        return GOBLIN_OK;
    }
    uint64_t v = 0;
    for (int32_t k = start; k < i; k++) {
        uint64_t d = (uint64_t)(s[k] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return fail(p, GOBLIN_ESYNTAX, start,
                        "integer literal larger than 9223372036854775807 (write a float)");
        v = v * 10 + d;
    }
    t->kind = TK_INT;
    t->i = (int64_t)v;
    return GOBLIN_OK;
}

/* Read the token at or after byte i into p->tok. */
static goblin_err lex_at(parser *p, int32_t i) {
    const char *s = p->s;
    while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') i++;
    token *t = &p->tok;
    memset(t, 0, sizeof *t);
    t->pos = i;
    char c = s[i];
    if (c == 0) {
        t->kind = TK_END;
        return GOBLIN_OK;
    }
    if (is_digit(c) || (c == '.' && is_digit(s[i + 1]))) return lex_number(p, i);
    if (is_alpha(c)) {
        int32_t j = i;
        while (is_alpha(s[j]) || is_digit(s[j])) j++;
        t->kind = TK_NAME;
        t->len = j - i;
        return GOBLIN_OK;
    }
    t->kind = TK_OP;
    t->len = 2;
    char d = s[i + 1];
    if (c == '*' && d == '*') t->op = OP_POW;
    else if (c == '/' && d == '/') t->op = OP_FLOORDIV;
    else if (c == '<' && d == '<') t->op = OP_SHL;
    else if (c == '>' && d == '>') t->op = OP_SHR;
    else if (c == '<' && d == '=') t->op = OP_LE;
    else if (c == '>' && d == '=') t->op = OP_GE;
    else if (c == '=' && d == '=') t->op = OP_EQ;
    else if (c == '!' && d == '=') t->op = OP_NE;
    else {
        t->len = 1;
        switch (c) {
        case '(': t->op = OP_LPAREN; break;
        case ')': t->op = OP_RPAREN; break;
        case ',': t->op = OP_COMMA; break;
        case '+': case '-': case '*': case '/': case '%': case '&': case '|': case '^':
        case '~': case '<': case '>': t->op = c; break;
        case '=': return fail(p, GOBLIN_ESYNTAX, i, "unexpected '=' (use '==' to compare)");
        case '!': return fail(p, GOBLIN_ESYNTAX, i, "unexpected '!' (use 'not' or '!=')");
        default:
            if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
                return fail(p, GOBLIN_ESYNTAX, i, "unexpected character '%c'", c);
            return fail(p, GOBLIN_ESYNTAX, i, "unexpected byte 0x%02x", (unsigned char)c);
        }
    }
    return GOBLIN_OK;
}

static goblin_err advance(parser *p) { return lex_at(p, p->tok.pos + p->tok.len); }

static bool tok_is_op(const parser *p, int op) { return p->tok.kind == TK_OP && p->tok.op == op; }

static bool tok_is_word(const parser *p, const char *w) {
    size_t n = strlen(w);
    return p->tok.kind == TK_NAME && (size_t)p->tok.len == n &&
           memcmp(p->s + p->tok.pos, w, n) == 0;
}

static bool tok_is_keyword(const parser *p) {
    return tok_is_word(p, "and") || tok_is_word(p, "or") || tok_is_word(p, "not");
}

/* A short description of the current token for "unexpected ..." messages. */
static const char *tok_desc(const parser *p, char *buf, size_t cap) {
    const token *t = &p->tok;
    if (t->kind == TK_END) return "end of formula";
    int len = t->len > 24 ? 24 : t->len;
    snprintf(buf, cap, "'%.*s'%s", len, p->s + t->pos, t->len > 24 ? "..." : "");
    return buf;
}

static goblin_err unexpected(parser *p, const char *expected) {
    char b[40];
    if (expected)
        return fail(p, GOBLIN_ESYNTAX, p->tok.pos, "expected %s, found %s", expected,
                    tok_desc(p, b, sizeof b));
    return fail(p, GOBLIN_ESYNTAX, p->tok.pos, "unexpected %s", tok_desc(p, b, sizeof b));
}

/* ---- tree building ------------------------------------------------------- */

static int32_t new_node(parser *p, int kind, int32_t pos) {
    goblin_formula *f = p->f;
    if (f->n_nodes >= GOBLIN_FORMULA_MAX_NODES) {
        fail(p, GOBLIN_ELIMIT, pos, "formula has more than %d nodes", GOBLIN_FORMULA_MAX_NODES);
        return -1;
    }
    fnode *n = &f->nodes[f->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->pos = pos;
    return f->n_nodes++;
}

static int32_t op_node(parser *p, int op, int32_t pos, int32_t a, int32_t b, int32_t c) {
    int32_t id = new_node(p, NK_OP, pos);
    if (id < 0) return -1;
    fnode *n = &p->f->nodes[id];
    n->op = (uint8_t)op;
    n->n_args = (uint8_t)goblin__fop_arity(op);
    n->args[0] = a;
    n->args[1] = b;
    n->args[2] = c;
    return id;
}

static int32_t var_node(parser *p) {
    goblin_formula *f = p->f;
    const char *name = p->s + p->tok.pos;
    int32_t len = p->tok.len, pos = p->tok.pos;
    int32_t v = -1;
    for (int32_t k = 0; k < f->n_vars; k++)
        if ((int32_t)strlen(f->names[k]) == len && memcmp(f->names[k], name, (size_t)len) == 0)
            v = k;
    if (v < 0) {
        if (f->n_vars >= GOBLIN_FORMULA_MAX_VARS) {
            fail(p, GOBLIN_ELIMIT, pos, "formula has more than %d variables",
                 GOBLIN_FORMULA_MAX_VARS);
            return -1;
        }
        char *copy = goblin__alloc((size_t)len + 1);
        if (!copy) {
            fail(p, GOBLIN_ENOMEM, -1, "out of memory");
            return -1;
        }
        memcpy(copy, name, (size_t)len);
        copy[len] = 0;
        v = f->n_vars;
        f->names[f->n_vars++] = copy;
    }
    int32_t id = new_node(p, NK_VAR, pos);
    if (id >= 0) f->nodes[id].i = v;
    return id;
}

/* ---- grammar (one function per precedence level, lowest first) ----------- */

static int32_t parse_expr(parser *p);
static int32_t parse_unary(parser *p);

static bool enter(parser *p) {
    if (++p->depth > MAX_DEPTH) {
        fail(p, GOBLIN_ELIMIT, p->tok.pos, "formula nested deeper than %d levels", MAX_DEPTH);
        return false;
    }
    return true;
}

static int32_t parse_call(parser *p, int fn, int32_t pos) {
    /* current token is '(' */
    if (advance(p)) return -1;
    int32_t args[3] = {-1, -1, -1};
    int want = k_funcs[fn].n_args, got = 0;
    if (!tok_is_op(p, OP_RPAREN)) {
        for (;;) {
            int32_t a = parse_expr(p);
            if (a < 0) return -1;
            if (got < 3) args[got] = a;
            got++;
            if (tok_is_op(p, OP_COMMA)) {
                if (advance(p)) return -1;
                continue;
            }
            break;
        }
    }
    if (!tok_is_op(p, OP_RPAREN)) {
        unexpected(p, "')' or ','");
        return -1;
    }
    if (got != want) {
        fail(p, GOBLIN_ESYNTAX, pos, "%s() takes %d argument%s, got %d", k_funcs[fn].name, want,
             want == 1 ? "" : "s", got);
        return -1;
    }
    if (advance(p)) return -1;
    return op_node(p, k_funcs[fn].op, pos, args[0], args[1], args[2]);
}

static int32_t parse_primary(parser *p) {
    token t = p->tok;
    if (t.kind == TK_INT || t.kind == TK_FLOAT) {
        int32_t id = new_node(p, t.kind == TK_INT ? NK_INT : NK_FLOAT, t.pos);
        if (id < 0) return -1;
        p->f->nodes[id].i = t.i;
        p->f->nodes[id].f = t.f;
        if (advance(p)) return -1;
        return id;
    }
    if (t.kind == TK_NAME && !tok_is_keyword(p)) {
        int fn = find_func(p->s + t.pos, (size_t)t.len);
        if (fn >= 0) {
            if (advance(p)) return -1;
            if (!tok_is_op(p, OP_LPAREN)) {
                fail(p, GOBLIN_ESYNTAX, t.pos, "%s is a function: expected '(' after it",
                     k_funcs[fn].name);
                return -1;
            }
            if (!enter(p)) return -1;
            int32_t r = parse_call(p, fn, t.pos);
            p->depth--;
            return r;
        }
        int32_t id = var_node(p);
        if (id < 0) return -1;
        if (advance(p)) return -1;
        if (tok_is_op(p, OP_LPAREN)) {
            fail(p, GOBLIN_ESYNTAX, t.pos, "unknown function '%.*s'", t.len > 40 ? 40 : t.len,
                 p->s + t.pos);
            return -1;
        }
        return id;
    }
    if (tok_is_op(p, OP_LPAREN)) {
        if (!enter(p)) return -1;
        if (advance(p)) return -1;
        int32_t e = parse_expr(p);
        if (e < 0) return -1;
        if (!tok_is_op(p, OP_RPAREN)) {
            unexpected(p, "')'");
            return -1;
        }
        p->depth--;
        if (advance(p)) return -1;
        return e;
    }
    unexpected(p, "a number, a name or '('");
    return -1;
}

/* power := primary ['**' unary]: right-associative, and binds tighter than a
 * unary minus on its left (-2**2 == -4) but not on its right (2**-1 == 0.5). */
static int32_t parse_power(parser *p) {
    int32_t a = parse_primary(p);
    if (a < 0) return -1;
    if (tok_is_op(p, OP_POW)) {
        int32_t pos = p->tok.pos;
        if (!enter(p)) return -1;
        if (advance(p)) return -1;
        int32_t b = parse_unary(p);
        p->depth--;
        if (b < 0) return -1;
        return op_node(p, GOBLIN__FOP_POW, pos, a, b, -1);
    }
    return a;
}

static int32_t parse_unary(parser *p) {
    if (tok_is_op(p, '-') || tok_is_op(p, '+') || tok_is_op(p, '~')) {
        int op = p->tok.op;
        int32_t pos = p->tok.pos;
        if (!enter(p)) return -1;
        if (advance(p)) return -1;
        int32_t a = parse_unary(p);
        p->depth--;
        if (a < 0) return -1;
        if (op == '+') return a; /* identity: no node */
        return op_node(p, op == '-' ? GOBLIN__FOP_NEG : GOBLIN__FOP_BITNOT, pos, a, -1, -1);
    }
    return parse_power(p);
}

typedef struct binop {
    int tok;
    int op;
} binop;

/* One left-associative level: operand (OP operand)*. */
static int32_t parse_left(parser *p, int32_t (*operand)(parser *), const binop *ops, int n_ops) {
    int32_t a = operand(p);
    for (;;) {
        if (a < 0) return -1;
        int k;
        for (k = 0; k < n_ops; k++)
            if (tok_is_op(p, ops[k].tok)) break;
        if (k == n_ops) return a;
        int32_t pos = p->tok.pos;
        if (advance(p)) return -1;
        int32_t b = operand(p);
        if (b < 0) return -1;
        a = op_node(p, ops[k].op, pos, a, b, -1);
    }
}

static int32_t parse_term(parser *p) {
    static const binop ops[] = {{'*', GOBLIN__FOP_MUL},
                                {'/', GOBLIN__FOP_DIV},
                                {OP_FLOORDIV, GOBLIN__FOP_FLOORDIV},
                                {'%', GOBLIN__FOP_MOD}};
    return parse_left(p, parse_unary, ops, 4);
}

static int32_t parse_arith(parser *p) {
    static const binop ops[] = {{'+', GOBLIN__FOP_ADD}, {'-', GOBLIN__FOP_SUB}};
    return parse_left(p, parse_term, ops, 2);
}

static int32_t parse_shift(parser *p) {
    static const binop ops[] = {{OP_SHL, GOBLIN__FOP_SHL}, {OP_SHR, GOBLIN__FOP_SHR}};
    return parse_left(p, parse_arith, ops, 2);
}

static int32_t parse_band(parser *p) {
    static const binop ops[] = {{'&', GOBLIN__FOP_BITAND}};
    return parse_left(p, parse_shift, ops, 1);
}

static int32_t parse_bxor(parser *p) {
    static const binop ops[] = {{'^', GOBLIN__FOP_BITXOR}};
    return parse_left(p, parse_band, ops, 1);
}

static int32_t parse_bor(parser *p) {
    static const binop ops[] = {{'|', GOBLIN__FOP_BITOR}};
    return parse_left(p, parse_bxor, ops, 1);
}

static int cmp_op(const parser *p) {
    if (p->tok.kind != TK_OP) return -1;
    switch (p->tok.op) {
    case OP_EQ: return GOBLIN__FOP_EQ;
    case OP_NE: return GOBLIN__FOP_NE;
    case '<': return GOBLIN__FOP_LT;
    case OP_LE: return GOBLIN__FOP_LE;
    case '>': return GOBLIN__FOP_GT;
    case OP_GE: return GOBLIN__FOP_GE;
    default: return -1;
    }
}

/* Python chains a < b < c into (a < b) and (b < c); that would evaluate b twice,
 * so a chain is refused with a hint instead of being silently read as (a<b)<c. */
static int32_t parse_comparison(parser *p) {
    int32_t a = parse_bor(p);
    if (a < 0) return -1;
    int op = cmp_op(p);
    if (op < 0) return a;
    int32_t pos = p->tok.pos;
    if (advance(p)) return -1;
    int32_t b = parse_bor(p);
    if (b < 0) return -1;
    if (cmp_op(p) >= 0) {
        fail(p, GOBLIN_ESYNTAX, p->tok.pos,
             "chained comparison: write (a < b) and (b < c) instead");
        return -1;
    }
    return op_node(p, op, pos, a, b, -1);
}

static int32_t parse_not(parser *p) {
    if (tok_is_word(p, "not")) {
        int32_t pos = p->tok.pos;
        if (!enter(p)) return -1;
        if (advance(p)) return -1;
        int32_t a = parse_not(p);
        p->depth--;
        if (a < 0) return -1;
        return op_node(p, GOBLIN__FOP_NOT, pos, a, -1, -1);
    }
    return parse_comparison(p);
}

static int32_t parse_and(parser *p) {
    int32_t a = parse_not(p);
    while (a >= 0 && tok_is_word(p, "and")) {
        int32_t pos = p->tok.pos;
        if (advance(p)) return -1;
        int32_t b = parse_not(p);
        if (b < 0) return -1;
        a = op_node(p, GOBLIN__FOP_AND, pos, a, b, -1);
    }
    return a;
}

static int32_t parse_expr(parser *p) {
    int32_t a = parse_and(p);
    while (a >= 0 && tok_is_word(p, "or")) {
        int32_t pos = p->tok.pos;
        if (advance(p)) return -1;
        int32_t b = parse_and(p);
        if (b < 0) return -1;
        a = op_node(p, GOBLIN__FOP_OR, pos, a, b, -1);
    }
    return a;
}

/* ---- public API ---------------------------------------------------------- */

void goblin_formula_free(goblin_formula *f) {
    if (!f) return;
    for (int32_t k = 0; k < f->n_vars; k++) goblin__free(f->names[k]);
    goblin__free(f);
}

goblin_err goblin_formula_parse(const char *text, goblin_formula **out, goblin_errbuf *err) {
    if (err) {
        err->position = -1;
        err->message[0] = 0;
    }
    parser p;
    memset(&p, 0, sizeof p);
    p.e = err;
    if (!text || !out) return fail(&p, GOBLIN_EINVAL, -1, "text and out must not be NULL");
    size_t len = strnlen(text, (size_t)GOBLIN_FORMULA_MAX_TEXT + 1);
    if (len > GOBLIN_FORMULA_MAX_TEXT)
        return fail(&p, GOBLIN_ELIMIT, -1, "formula longer than %d bytes", GOBLIN_FORMULA_MAX_TEXT);
    goblin_formula *f = goblin__calloc(1, sizeof *f);
    if (!f) return fail(&p, GOBLIN_ENOMEM, -1, "out of memory");
    p.s = text;
    p.n = (int32_t)len;
    p.f = f;
    int32_t root = -1;
    if (lex_at(&p, 0) == GOBLIN_OK) {
        if (p.tok.kind == TK_END) {
            fail(&p, GOBLIN_ESYNTAX, p.tok.pos, "empty formula");
        } else {
            root = parse_expr(&p);
            if (root >= 0 && p.tok.kind != TK_END) {
                if (tok_is_op(&p, OP_RPAREN)) fail(&p, GOBLIN_ESYNTAX, p.tok.pos, "unmatched ')'");
                else unexpected(&p, "an operator or end of formula");
            }
            /* a FORMULA node takes its shape from its inputs: it needs one */
            if (root >= 0 && !p.err && f->n_vars == 0)
                fail(&p, GOBLIN_EINVAL, -1,
                     "formula has no variables (it needs at least one input)");
        }
    }
    if (p.err) {
        goblin_formula_free(f);
        return p.err;
    }
    f->root = root;
    *out = f;
    return GOBLIN_OK;
}

int32_t goblin_formula_var_count(const goblin_formula *f) { return f ? f->n_vars : 0; }

const char *goblin_formula_var_name(const goblin_formula *f, int32_t i) {
    return f && i >= 0 && i < f->n_vars ? f->names[i] : NULL;
}

int32_t goblin_formula_node_count(const goblin_formula *f) { return f ? f->n_nodes : 0; }

/* ---- compiler: tree -> postfix program ----------------------------------- */

static void put_u64(uint8_t *b, uint64_t v) {
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)(v >> (8 * k));
}

/* Emit node @p id's subtree in postfix order with an explicit stack (the tree
 * is at most MAX_NODES deep). Returns the new write offset. */
static size_t emit(const goblin_formula *f, int32_t root, uint8_t *b, size_t o) {
    int32_t stack[GOBLIN_FORMULA_MAX_NODES];
    uint8_t next[GOBLIN_FORMULA_MAX_NODES]; /* children already emitted */
    int sp = 0;
    stack[sp] = root;
    next[sp] = 0;
    sp++;
    while (sp > 0) {
        const fnode *n = &f->nodes[stack[sp - 1]];
        if (n->kind == NK_OP && next[sp - 1] < n->n_args) {
            int32_t c = n->args[next[sp - 1]++];
            stack[sp] = c;
            next[sp] = 0;
            sp++;
            continue;
        }
        sp--;
        switch (n->kind) {
        case NK_VAR:
            b[o++] = GOBLIN__FOP_VAR;
            b[o++] = (uint8_t)n->i;
            break;
        case NK_INT:
            b[o++] = GOBLIN__FOP_INT;
            put_u64(b + o, (uint64_t)n->i);
            o += 8;
            break;
        case NK_FLOAT: {
            uint64_t bits;
            memcpy(&bits, &n->f, 8);
            b[o++] = GOBLIN__FOP_FLOAT;
            put_u64(b + o, bits);
            o += 8;
            break;
        }
        default: b[o++] = n->op; break;
        }
    }
    return o;
}

goblin_err goblin__formula_compile(const goblin_formula *f, void **payload, size_t *size) {
    if (!f || !payload || !size || f->root < 0 || f->n_nodes < 1 || f->n_vars < 1)
        return GOBLIN_EINVAL;
    size_t cap = GOBLIN__FPROG_HEADER + 9 * (size_t)f->n_nodes;
    uint8_t *b = goblin__alloc(cap);
    if (!b) return GOBLIN_ENOMEM;
    b[0] = 'G';
    b[1] = 'F';
    b[2] = GOBLIN__FPROG_VERSION;
    b[3] = (uint8_t)f->n_vars;
    b[4] = (uint8_t)(f->n_nodes & 0xff);
    b[5] = (uint8_t)(f->n_nodes >> 8);
    b[6] = b[7] = 0;
    size_t o = emit(f, f->root, b, GOBLIN__FPROG_HEADER);
    *payload = b;
    *size = o;
    return GOBLIN_OK;
}
