/* tests/fuzz/fuzz_graph.c - fuzz target for goblin_graph_deserialize.
 *
 * Oracles beyond "no crash, no leak, no sanitizer report": a rejected graph leaves
 * *out untouched and explains itself; an accepted graph serializes, that encoding
 * decodes again, and re-serializing it gives the same bytes (a fixed point). */
#include <goblin/alloc.h>
#include <goblin/graph.h>
#include <string.h>
#include "fuzz.h"

int fuzz_graph_one(const uint8_t *data, size_t size) {
    goblin_errbuf msg_eb = {0};
    goblin_graph *g = (goblin_graph *)(uintptr_t)1;
    goblin_err e = goblin_graph_deserialize(data, size, NULL, &g, &msg_eb);
    if (e != GOBLIN_OK) {
        FUZZ_CHECK(g == (goblin_graph *)(uintptr_t)1, "*out written on failure");
        FUZZ_CHECK(msg_eb.message[0] != 0, "rejected without a message");
        return 0;
    }
    uint8_t *s1 = NULL, *s2 = NULL;
    size_t n1 = 0, n2 = 0;
    goblin_graph *h = NULL;
    if (goblin_graph_serialize(g, &s1, &n1) == GOBLIN_OK) {
        e = goblin_graph_deserialize(s1, n1, NULL, &h, &msg_eb);
        FUZZ_CHECK(e == GOBLIN_OK || e == GOBLIN_ENOMEM, "a serialized graph does not decode");
        if (h && goblin_graph_serialize(h, &s2, &n2) == GOBLIN_OK)
            FUZZ_CHECK(n1 == n2 && memcmp(s1, s2, n1) == 0, "serialization is not a fixed point");
    }
    goblin_buffer_free(s2);
    goblin_buffer_free(s1);
    goblin_graph_free(h);
    goblin_graph_free(g);
    return 0;
}

/* The graph format ends with a CRC-32 (IEEE) of everything before it. */
void fuzz_graph_fixup(uint8_t *data, size_t size) {
    if (size < 8) return;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < size - 4; i++) {
        c ^= data[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    c = ~c;
    for (int i = 0; i < 4; i++) data[size - 4 + i] = (uint8_t)(c >> (8 * i));
}

#ifdef GOBLIN_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_graph_one(data, size); }

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if (seed % 8 != 0) fuzz_graph_fixup(data, size);
    return size;
}
#endif
