/* libgoblin/service/sp_probe.h - what speaks at a plain tcp:// address (internal).
 *
 * nng refuses a peer of the wrong protocol without telling either side's code, so a
 * client that dials a node's worker address (pair1) would wait for an answer that never
 * comes. Before dialing, a client opens one TCP connection of its own, sends the SP
 * handshake of req0 and reads the peer's: its protocol number says at once whether a
 * gateway (rep0) is there. */
#ifndef GOBLIN__SERVICE_SP_PROBE_H
#define GOBLIN__SERVICE_SP_PROBE_H

#include <stdbool.h>
#include <stdint.h>

/** The SP protocol number of the peer at @p url (tcp://, tcp4://, tcp6:// only), into
 *  *proto, within @p timeout_ms. false when it cannot be learnt that way (another
 *  transport, nobody there, no handshake in time): the caller then just dials. */
bool goblin__sp_probe(const char *url, uint32_t timeout_ms, int *proto);

#endif
