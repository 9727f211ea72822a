/* libgoblin/core/shape.c - the small shape helpers: broadcasting, axes, element
 * counts, strides, printing; and the unit roundoff of a dtype. */
#include <stdio.h>
#include <string.h>
#include "node.h"

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
