/* tests/fuzz/fuzz_wire.c - fuzz target for goblin__wire_decode.
 *
 * Oracles beyond "no crash, no leak, no sanitizer report":
 *   - a rejected message leaves *out untouched and explains itself;
 *   - an accepted message is canonical: it re-encodes to exactly the input bytes;
 *   - the copying and the zero-copy decodes agree;
 *   - a TASK's graph blob goes through goblin_graph_deserialize as a worker would. */
#include <goblin/alloc.h>
#include <goblin/graph.h>
#include "proto/wire.h"
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"

static void check_reencodes(const goblin__wire_msg *m, const uint8_t *data, size_t size) {
    uint8_t *buf = NULL;
    size_t len = 0;
    goblin_err e = goblin__wire_encode(m, &buf, &len);
    if (e == GOBLIN_ENOMEM) return;
    FUZZ_CHECK(e == GOBLIN_OK, "an accepted message does not re-encode");
    FUZZ_CHECK(len == size && memcmp(buf, data, size) == 0, "an accepted message is not canonical");
    goblin_buffer_free(buf);
}

int fuzz_wire_one(const uint8_t *data, size_t size) {
    goblin_errbuf msg_eb = {0};
    goblin__wire_msg *m = (goblin__wire_msg *)(uintptr_t)1; /* must stay untouched on failure */
    goblin_err e = goblin__wire_decode(data, size, NULL, 0, &m, msg_eb.message, sizeof msg_eb.message);
    if (e != GOBLIN_OK) {
        FUZZ_CHECK(m == (goblin__wire_msg *)(uintptr_t)1, "*out written on failure");
        FUZZ_CHECK(msg_eb.message[0] != 0, "rejected without a message");
        FUZZ_CHECK(e == GOBLIN_EFORMAT || e == GOBLIN_ELIMIT || e == GOBLIN_EPROTO ||
                       e == GOBLIN_EVERSION || e == GOBLIN_ENOMEM,
                   "unexpected error code");
    }

    /* The same bytes in an 8-aligned copy, decoded in place. */
    uint8_t *copy = malloc(size ? (size + 7) / 8 * 8 : 8);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    goblin__wire_msg *z = NULL;
    goblin_err ez = goblin__wire_decode(copy, size, NULL, GOBLIN_WIRE_DECODE_ZERO_COPY, &z, msg_eb.message,
                                       sizeof msg_eb.message);
    FUZZ_CHECK(ez == e || e == GOBLIN_ENOMEM || ez == GOBLIN_ENOMEM,
               "zero-copy and copying decodes disagree");

    if (e == GOBLIN_OK) {
        check_reencodes(m, data, size);
        if (m->type == GOBLIN_WIRE_TYPE_TASK) {
            goblin_graph *g = NULL;
            if (goblin_graph_deserialize(m->body.task.graph, (size_t)m->body.task.graph_len, NULL,
                                         &g, &msg_eb) == GOBLIN_OK)
                goblin_graph_free(g);
        }
        goblin__wire_msg_free(m);
    }
    if (ez == GOBLIN_OK) {
        check_reencodes(z, data, size);
        goblin__wire_msg_free(z);
    }
    free(copy);

    /* Stream framing reads the header alone; it must agree with the full decode. */
    goblin__wire_header h;
    goblin_err eh = goblin__wire_header_decode(data, size, NULL, &h, msg_eb.message, sizeof msg_eb.message);
    if (e == GOBLIN_OK) FUZZ_CHECK(eh == GOBLIN_OK && h.body_len == size - GOBLIN_WIRE_HEADER_SIZE,
                                   "header decode disagrees with a full decode");

    /* The same bytes as a batch (protocol 1.1): the splitter walks forward inside the
     * buffer, leaves the offset alone on failure, hands out slices that start and end
     * inside it, and a single valid message is a batch of one. */
    size_t off = 0, n_msgs = 0;
    while (off < size && n_msgs < 4096) {
        size_t at = off, ml = 0;
        goblin_err eb = goblin__wire_batch_next(data, size, &off, NULL, &ml, msg_eb.message, sizeof msg_eb.message);
        if (eb != GOBLIN_OK) {
            FUZZ_CHECK(off == at, "the batch offset moved on failure");
            FUZZ_CHECK(msg_eb.message[0] != 0, "a batch rejected without a message");
            break;
        }
        FUZZ_CHECK(off > at && off <= size && ml >= GOBLIN_WIRE_HEADER_SIZE && at + ml <= off,
                   "a batch slice outside the buffer");
        goblin__wire_msg *bm = NULL;
        if (goblin__wire_decode(data + at, ml, NULL, 0, &bm, msg_eb.message, sizeof msg_eb.message) == GOBLIN_OK) goblin__wire_msg_free(bm);
        n_msgs++;
    }
    if (e == GOBLIN_OK) {
        size_t o1 = 0, ml1 = 0;
        FUZZ_CHECK(goblin__wire_batch_next(data, size, &o1, NULL, &ml1, msg_eb.message, sizeof msg_eb.message) == GOBLIN_OK &&
                       ml1 == size,
                   "a valid message is not a batch of one");
    }
    return 0;
}

/* Make the header's body length agree with the buffer, so a mutation that grew or
 * shrank the message is judged by the body parser instead of the length check. */
void fuzz_wire_fixup(uint8_t *data, size_t size) {
    if (size < GOBLIN_WIRE_HEADER_SIZE) return;
    uint64_t body = (uint64_t)(size - GOBLIN_WIRE_HEADER_SIZE);
    for (int i = 0; i < 8; i++) data[16 + i] = (uint8_t)(body >> (8 * i));
}

#ifdef GOBLIN_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_wire_one(data, size); }

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if (seed % 4 != 0) fuzz_wire_fixup(data, size); /* keep some length mismatches too */
    return size;
}
#endif
