/* wire_impl.h - internal encoder entry points (not part of the public API). */
#ifndef GOBLIN_WIRE_IMPL_H
#define GOBLIN_WIRE_IMPL_H

#include "goblin/wire.h"

/* As goblin_wire_encoded_size / goblin_wire_encode_into, but tensors may be strided
 * views (the public calls refuse them): their elements are gathered in row-major
 * order straight into the message, so a panel of a larger matrix needs no separate
 * packing copy. The bytes produced are those of the contiguous copy. */
goblin_err goblin__wire_encoded_size_strided(const goblin_wire_msg *m, size_t *out_len);
goblin_err goblin__wire_encode_into_strided(const goblin_wire_msg *m, uint8_t *buf, size_t cap,
                                            size_t *out_len);

#endif
