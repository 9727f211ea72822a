/* libgoblin/proto/wire_impl.h - internal encoder entry points (not part of the public API). */
#ifndef GOBLIN_WIRE_IMPL_H
#define GOBLIN_WIRE_IMPL_H

#include "wire.h"

/* As goblin__wire_encoded_size / goblin__wire_encode_into, but tensors may be strided
 * views (the public calls refuse them): their elements are gathered in row-major
 * order straight into the message, so a panel of a larger matrix needs no separate
 * packing copy. The bytes produced are those of the contiguous copy. */
goblin_err goblin__wire_encoded_size_strided(const goblin__wire_msg *m, size_t *out_len);
goblin_err goblin__wire_encode_into_strided(const goblin__wire_msg *m, uint8_t *buf, size_t cap,
                                            size_t *out_len);

/* Layout encoding, for a sender that writes tensor data in place (a worker computing
 * its RESULT straight into the message): as goblin__wire_encode_into, but the data of
 * the message's @p n_tensors tensors (RESULT outputs or TASK inputs, in order; data may
 * be NULL) is neither read nor written: its bytes are left for the caller, who must
 * fill numel * dtype size bytes at buf + data_off[i] for each tensor i (contiguous,
 * row-major) before the message is sent. Everything else, padding included, is
 * written as goblin__wire_encode_into would. EINVAL if the message does not hold
 * exactly n_tensors tensors. */
goblin_err goblin__wire_layout_size(const goblin__wire_msg *m, int32_t n_tensors, size_t *out_len);
goblin_err goblin__wire_encode_layout(const goblin__wire_msg *m, uint8_t *buf, size_t cap, size_t *out_len,
                                      size_t *data_off, int32_t n_tensors);

#endif
