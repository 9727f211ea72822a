/* goblin/tensor.h - tensor descriptors.
 *
 * A goblin_tensor describes memory the caller owns: dtype, shape and strides
 * (in elements, may be 0 for broadcast or negative), and a data pointer. The
 * library never frees a descriptor's data unless a function says it allocated
 * it for the caller (then release it with goblin_buffer_free). */
#ifndef GOBLIN_TENSOR_H
#define GOBLIN_TENSOR_H

#include "api.h"
#include "dtype.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

#define GOBLIN_MAX_RANK 8

typedef struct goblin_tensor {
    goblin_dtype dtype;
    int32_t rank;                      /* 0..GOBLIN_MAX_RANK; 0 is a scalar */
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t strides[GOBLIN_MAX_RANK];  /* in elements */
    void *data;
} goblin_tensor;

/** Fill @p t as a contiguous (row-major) tensor over @p data (borrowed).
 *  GOBLIN_EINVAL on bad rank, negative dims or bad dtype; GOBLIN_ELIMIT if the
 *  element count overflows int64. */
GOBLIN_API goblin_err goblin_tensor_init(goblin_tensor *t, goblin_dtype dt, int32_t rank,
                                  const int64_t *shape, void *data);

/** Number of elements (product of the shape; 1 for rank 0). */
GOBLIN_API int64_t goblin_tensor_numel(const goblin_tensor *t);

/** True when the strides are the row-major ones for the shape (dims of size 1 ignored). */
GOBLIN_API bool goblin_tensor_is_contiguous(const goblin_tensor *t);

GOBLIN_END_DECLS

#endif
