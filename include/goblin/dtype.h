/* goblin/dtype.h - element types. */
#ifndef GOBLIN_DTYPE_H
#define GOBLIN_DTYPE_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

/* X(NAME, value, "name", size in bytes). Append-only: values are on the wire. */
#define GOBLIN_DTYPE_MAP(X)    \
    X(F32, 0, "f32", 4)        \
    X(F64, 1, "f64", 8)        \
    X(F16, 2, "f16", 2)        \
    X(BF16, 3, "bf16", 2)      \
    X(I8, 4, "i8", 1)          \
    X(I16, 5, "i16", 2)        \
    X(I32, 6, "i32", 4)        \
    X(I64, 7, "i64", 8)        \
    X(U8, 8, "u8", 1)          \
    X(BOOL, 9, "bool", 1)

typedef enum goblin_dtype {
#define GOBLIN__DT_ENUM(name, value, str, size) GOBLIN_DTYPE_##name = value,
    GOBLIN_DTYPE_MAP(GOBLIN__DT_ENUM)
#undef GOBLIN__DT_ENUM
    GOBLIN_DTYPE_COUNT
} goblin_dtype;

/* Bit masks of dtypes, used by the catalogue to say which dtypes an op takes. */
#define GOBLIN_DTMASK(dt) (1u << (unsigned)(dt))
#define GOBLIN_DTMASK_FLOAT                                                      \
    (GOBLIN_DTMASK(GOBLIN_DTYPE_F32) | GOBLIN_DTMASK(GOBLIN_DTYPE_F64) |        \
     GOBLIN_DTMASK(GOBLIN_DTYPE_F16) | GOBLIN_DTMASK(GOBLIN_DTYPE_BF16))
#define GOBLIN_DTMASK_SINT                                                       \
    (GOBLIN_DTMASK(GOBLIN_DTYPE_I8) | GOBLIN_DTMASK(GOBLIN_DTYPE_I16) |         \
     GOBLIN_DTMASK(GOBLIN_DTYPE_I32) | GOBLIN_DTMASK(GOBLIN_DTYPE_I64))
#define GOBLIN_DTMASK_INT (GOBLIN_DTMASK_SINT | GOBLIN_DTMASK(GOBLIN_DTYPE_U8))
#define GOBLIN_DTMASK_NUMERIC (GOBLIN_DTMASK_FLOAT | GOBLIN_DTMASK_INT)
#define GOBLIN_DTMASK_ALL (GOBLIN_DTMASK_NUMERIC | GOBLIN_DTMASK(GOBLIN_DTYPE_BOOL))

/** Size of one element in bytes; 0 for an invalid dtype. */
GOBLIN_API size_t goblin_dtype_size(goblin_dtype dt);
/** Short name ("f32", "i64", ...); "invalid" for an invalid dtype. */
GOBLIN_API const char *goblin_dtype_name(goblin_dtype dt);
/** Parse a short name; GOBLIN_EINVAL if unknown. */
GOBLIN_API goblin_err goblin_dtype_from_name(const char *name, goblin_dtype *out);
GOBLIN_API bool goblin_dtype_is_float(goblin_dtype dt);
GOBLIN_API bool goblin_dtype_is_int(goblin_dtype dt); /* signed or unsigned integers, not bool */

GOBLIN_END_DECLS

#endif
