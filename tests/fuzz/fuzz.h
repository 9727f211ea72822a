/* tests/fuzz/fuzz.h - the fuzz targets, shared by the libFuzzer builds and the
 * standalone driver (standalone.c, built with any C compiler).
 *
 * Each target has:
 *   one(data, size)   the entry point: decode hostile bytes; returns 0. It traps
 *                     (__builtin_trap) when an oracle fails, so both libFuzzer and
 *                     the driver report a crash with the input.
 *   seeds(emit, ctx)  well-formed inputs built through the public API (no binary
 *                     corpus is committed).
 *   fixup(data, size) repairs the checks a random mutation almost always breaks
 *                     first (the wire header's body length, the graph format's
 *                     CRC), so mutations reach the decoders' inner layers. */
#ifndef GOBLIN_FUZZ_H
#define GOBLIN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

typedef void (*fuzz_emit_fn)(void *ctx, const uint8_t *data, size_t size);

int fuzz_wire_one(const uint8_t *data, size_t size);
void fuzz_wire_seeds(fuzz_emit_fn emit, void *ctx);
void fuzz_wire_fixup(uint8_t *data, size_t size);

int fuzz_graph_one(const uint8_t *data, size_t size);
void fuzz_graph_seeds(fuzz_emit_fn emit, void *ctx);
void fuzz_graph_fixup(uint8_t *data, size_t size);

/* The client protocol (libgoblin/client_wire.h): gateway requests and client replies. */
int fuzz_client_wire_one(const uint8_t *data, size_t size);
void fuzz_client_wire_seeds(fuzz_emit_fn emit, void *ctx);
void fuzz_client_wire_fixup(uint8_t *data, size_t size);

/* Trap with a reason on stderr (the input is what matters; the reason says which
 * oracle failed). */
void fuzz_fail(const char *why);
#define FUZZ_CHECK(cond, why)            \
    do {                                 \
        if (!(cond)) fuzz_fail(why);     \
    } while (0)

#endif
