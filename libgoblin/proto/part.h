/* libgoblin/proto/part.h - a worker's large messages in parts (internal).
 *
 * nng buffers a whole message before the node sees it, and its receive limit is per
 * socket, so a node that took 1 GiB messages let any peer on its worker port, before
 * it had said who it is, make the node hold that much per connection. A worker
 * therefore sends a message over GOBLIN__PART_MAX bytes (a RESULT, a batch) as parts,
 * in order, each
 *
 *   "GBLP"  u32 0  u64 total  u64 offset  u64 len  bytes[len]
 *
 * and the node, whose socket takes nothing over GOBLIN__PART_WIRE_MAX, reassembles
 * them for a worker that has proved its identity only, within its limits; parts from
 * anyone else are dropped unread (docs/wire-protocol.md). */
#ifndef GOBLIN__PROTO_PART_H
#define GOBLIN__PROTO_PART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"

#define GOBLIN__PART_HEADER 32
#define GOBLIN__PART_MAX ((size_t)4 << 20)
/* A part on the wire: nng's protocol header (pair1 adds 4 bytes) needs room too. */
#define GOBLIN__PART_WIRE_MAX (GOBLIN__PART_MAX + GOBLIN__PART_HEADER + 64)

/** Does @p buf (@p len bytes) start with the part magic? */
bool goblin__part_is(const uint8_t *buf, size_t len);
/** The header of a part of @p n bytes at @p offset of a @p total-byte message. */
void goblin__part_header(uint8_t out[GOBLIN__PART_HEADER], uint64_t total, uint64_t offset,
                         uint64_t n);
/** Decode a part (hostile bytes): *data points into @p buf. GOBLIN_EFORMAT (bad header,
 *  lengths that do not add up, n of 0 or over GOBLIN__PART_MAX), GOBLIN_ELIMIT (total
 *  over @p max_total); (msg, cap) say why. */
goblin_err goblin__part_decode(const uint8_t *buf, size_t len, uint64_t max_total, uint64_t *total,
                               uint64_t *offset, const uint8_t **data, size_t *n, char *msg,
                               size_t cap);

#endif
