/* goblin/version.h - library and catalogue version numbers.
 *
 * meson reads GOBLIN_VERSION_* from this file for the project version and the
 * shared-library soname, so these lines must stay in this simple form. */
#ifndef GOBLIN_VERSION_H
#define GOBLIN_VERSION_H

#define GOBLIN_VERSION_MAJOR 0
#define GOBLIN_VERSION_MINOR 1
#define GOBLIN_VERSION_PATCH 0

#define GOBLIN_VERSION_STRING "0.1.0"

/* The operator catalogue version. It is part of the wire format: workers and
 * nodes refuse to talk when it differs. Bump it whenever an op is appended or
 * an op's semantics, attributes or numeric contract change. */
#define GOBLIN_CATALOG_VERSION 4

/* The version of the node/worker protocol (docs/wire-protocol.md): peers must speak
 * exactly this one (batches are negotiated in HELLO and do not change it). 2: workers
 * prove their identity (CHALLENGE, PROOF) before HELLO_ACK. */
#define GOBLIN_PROTOCOL_VERSION 2

#endif
