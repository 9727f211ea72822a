/* libgoblin/node/origin.h - network origins of worker connections (origin.c): what
 * the node's files, the test-control entry point (worker/misbehave.c) and the tests
 * use. */
#ifndef GOBLIN__NODE_ORIGIN_H
#define GOBLIN__NODE_ORIGIN_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"
#include "goblin/node.h"

/** The origin of remote address @p sa (borrowed; NULL: 0): its IPv4 /24 or IPv6 /48
 *  (an IPv4-mapped IPv6 address as IPv4) as a non-zero key; 0 for a local or unknown
 *  address (inproc, ipc, abstract, 127.0.0.0/8, ::1). */
uint64_t goblin__node_origin_key(const nng_sockaddr *sa);
/** The origin a hub reported for a worker it relays (hub_wire.h, OPEN): @p kind 4 (an
 *  IPv4 /24 in @p prefix[0..2]) or 6 (an IPv6 /48 in @p prefix[0..5]) as the key a
 *  direct connection from that block would have; 0 for kind 0 (local) or 127.0.0.0/8. */
uint64_t goblin__node_origin_of_prefix(uint8_t kind, const uint8_t prefix[7]);
/** Origin @p key as text into @p buf (@p cap bytes): "10.1.2.0/24", "2001:db8:1::/48",
 *  "test:7" or "local". */
void goblin__node_origin_name(uint64_t key, char *buf, size_t cap);
/** Tests only (GOBLIN_TESTCTRL_NODE_ORIGIN): the local connections of identity
 *  @p identity (64 hex digits, copied) have origin @p origin (< 2^60; 0: none again),
 *  from now on and for those connected now. EINVAL, ENOMEM. Thread-safe (node->mu). */
goblin_err goblin__node_test_origin(goblin_node *n, const char *identity, uint64_t origin);

#endif
