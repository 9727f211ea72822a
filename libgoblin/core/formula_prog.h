/* libgoblin/core/formula_prog.h - the compiled FORMULA program (internal).
 *
 * A FORMULA node's payload is a postfix program for a stack machine, compiled
 * from the parse tree by goblin__formula_compile (formula.c). It is
 * self-contained and position-independent: variables are input positions, there
 * are no names and no pointers, so it travels on the wire as it is. Because it
 * also arrives from peers, every consumer validates it first
 * (goblin__formula_validate) and the evaluator only runs validated programs.
 *
 * Byte layout (integers little-endian):
 *   0  'G' 'F'                 magic
 *   2  u8  version             GOBLIN__FPROG_VERSION
 *   3  u8  n_vars              inputs the program expects (1..GOBLIN_FORMULA_MAX_VARS)
 *   4  u16 n_instr             1..GOBLIN_FORMULA_MAX_NODES
 *   6  u16 reserved            0
 *   8  instructions, n_instr of them, ending exactly at the payload's end:
 *        u8 opcode, then for GOBLIN__FOP_VAR a u8 input position,
 *        for GOBLIN__FOP_INT an i64, for GOBLIN__FOP_FLOAT an f64 (IEEE bits);
 *        every other opcode has no operand and pops its arity, pushes one.
 * The stack holds one value per element of the (broadcast) output; a valid
 * program leaves exactly one value. */
#ifndef GOBLIN__CORE_FORMULA_PROG_H
#define GOBLIN__CORE_FORMULA_PROG_H

#include "node.h"

#define GOBLIN__FPROG_VERSION 1
#define GOBLIN__FPROG_HEADER 8
/* Largest payload a valid program can have: every instruction a 9-byte literal. */
#define GOBLIN__FPROG_MAX_BYTES (GOBLIN__FPROG_HEADER + 9 * GOBLIN_FORMULA_MAX_NODES)

/* Opcodes. Values are on the wire: explicit, append-only. */
#define GOBLIN__FOP_MAP(X)                                   \
    /* leaves (push) */                                      \
    X(VAR, 1, "var", 0)                                      \
    X(INT, 2, "int", 0)                                      \
    X(FLOAT, 3, "float", 0)                                  \
    /* unary */                                              \
    X(NEG, 16, "-", 1)                                       \
    X(BITNOT, 17, "~", 1)                                    \
    X(NOT, 18, "not", 1)                                     \
    X(ABS, 19, "abs", 1)                                     \
    X(EXP, 20, "exp", 1)                                     \
    X(LOG, 21, "log", 1)                                     \
    X(SQRT, 22, "sqrt", 1)                                   \
    X(RSQRT, 23, "rsqrt", 1)                                 \
    X(SIN, 24, "sin", 1)                                     \
    X(COS, 25, "cos", 1)                                     \
    X(TANH, 26, "tanh", 1)                                   \
    X(ERF, 27, "erf", 1)                                     \
    X(FLOOR, 28, "floor", 1)                                 \
    X(CEIL, 29, "ceil", 1)                                   \
    X(ROUND, 30, "round", 1)                                 \
    X(TRUNC, 31, "trunc", 1)                                 \
    X(SIGMOID, 32, "sigmoid", 1)                             \
    X(RELU, 33, "relu", 1)                                   \
    X(LOG1P, 34, "log1p", 1)                                 \
    X(EXPM1, 35, "expm1", 1)                                 \
    /* binary: pops b then a, pushes a OP b */               \
    X(ADD, 48, "+", 2)                                       \
    X(SUB, 49, "-", 2)                                       \
    X(MUL, 50, "*", 2)                                       \
    X(DIV, 51, "/", 2)                                       \
    X(FLOORDIV, 52, "//", 2)                                 \
    X(MOD, 53, "%", 2)                                       \
    X(POW, 54, "**", 2)                                      \
    X(MIN, 55, "min", 2)                                     \
    X(MAX, 56, "max", 2)                                     \
    X(EQ, 57, "==", 2)                                       \
    X(NE, 58, "!=", 2)                                       \
    X(LT, 59, "<", 2)                                        \
    X(LE, 60, "<=", 2)                                       \
    X(GT, 61, ">", 2)                                        \
    X(GE, 62, ">=", 2)                                       \
    X(AND, 63, "and", 2)                                     \
    X(OR, 64, "or", 2)                                       \
    X(BITAND, 65, "&", 2)                                    \
    X(BITOR, 66, "|", 2)                                     \
    X(BITXOR, 67, "^", 2)                                    \
    X(SHL, 68, "<<", 2)                                      \
    X(SHR, 69, ">>", 2)                                      \
    /* ternary: pops c, b, a; where(a, b, c), clamp(a, b, c) */ \
    X(WHERE, 80, "where", 3)                                 \
    X(CLAMP, 81, "clamp", 3)

typedef enum goblin__fop {
#define GOBLIN__FOP_ENUM(name, value, str, arity) GOBLIN__FOP_##name = value,
    GOBLIN__FOP_MAP(GOBLIN__FOP_ENUM)
#undef GOBLIN__FOP_ENUM
    GOBLIN__FOP_COUNT
} goblin__fop;

/* Arity of @p op (0 for leaves), or -1 if @p op is not an opcode. */
int goblin__fop_arity(int op);
/* Spelling of @p op in formulas ("exp", "//"), or NULL. */
const char *goblin__fop_name(int op);
/* Which dtypes @p op accepts: bit 0 floats, bit 1 integers. 0 if not an opcode. */
#define GOBLIN__FOP_ON_FLOAT 1u
#define GOBLIN__FOP_ON_INT 2u
unsigned goblin__fop_dtypes(int op);

/* What validation learned about a program. */
typedef struct goblin__fprog_info {
    int32_t n_vars;
    int32_t n_instr;
    int32_t max_depth; /* deepest stack */
} goblin__fprog_info;

/* Check @p size bytes at @p prog as hostile input: header, bounds, opcodes, operand
 * bytes, stack depth (never below an op's arity, exactly one value at the end),
 * input positions < @p n_inputs (and n_vars == n_inputs), and that every opcode and
 * literal suits dtype @p dt ('/' and transcendental functions need a float dtype,
 * bitwise ops and shifts an integer one, float literals are rejected in integer
 * formulas). GOBLIN_EFORMAT for a malformed program, GOBLIN_EDTYPE for a dtype
 * mismatch, GOBLIN_EINVAL for an input-count mismatch; @p msg says why.
 * @p info may be NULL. */
goblin_err goblin__formula_validate(const void *prog, size_t size, int32_t n_inputs,
                                    goblin_dtype dt, goblin__fprog_info *info, char *msg,
                                    size_t cap);

/* ---- formula bridge (formula.c) ------------------------------------------
 * A FORMULA node's payload is a self-contained, position-independent program
 * (bytes) compiled from a parsed goblin_formula: it names variables by input
 * position only. ops_formula.c's inference validates such a payload as hostile
 * bytes (it also arrives from the wire). */
goblin_err goblin__formula_compile(const goblin_formula *f, void **payload, size_t *size);

#endif
