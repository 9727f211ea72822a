/* libgoblin/verify/sample.c - which elements a spot-check looks at: a keyed
 * pseudo-random sample without repeats (goblin_verify_sample_indices). */
#include <goblin/verify.h>
#include "kernels/random.h"
#include "verdict.h"

/* A keyed permutation of [0, 2^(2h)): an 8-round balanced Feistel network whose
 * round function is Philox (a PRF), so by Luby-Rackoff it is a pseudo-random
 * permutation; 8 rounds rather than 4 because h can be tiny. */
static uint64_t feistel(uint64_t x, int h, uint64_t seed) {
    uint64_t mask = (((uint64_t)1) << h) - 1;
    uint64_t L = x >> h, R = x & mask;
    for (uint64_t round = 0; round < 8; round++) {
        uint32_t o[4];
        goblin__rng_draw(seed, (round << 32) | R, VERIFY_STREAM_SAMPLE, 0, o);
        uint64_t fo = ((((uint64_t)o[1]) << 32) | o[0]) & mask;
        uint64_t nl = R;
        R = L ^ fo;
        L = nl;
    }
    return (L << h) | R;
}

goblin_err goblin_verify_sample_indices(uint64_t seed, int64_t numel, int64_t count, int64_t *out) {
    if (numel < 0 || count < 0 || count > numel || numel > ((int64_t)1 << 62) ||
        (count > 0 && !out))
        return GOBLIN_EINVAL;
    if (count == 0) return GOBLIN_OK;
    int bits = 0;
    for (uint64_t v = (uint64_t)(numel - 1); v; v >>= 1) bits++;
    int h = (bits + 1) / 2; /* domain 2^(2h) < 4 numel: under 4 walks per index expected */
    for (int64_t i = 0; i < count; i++) {
        /* Cycle-walking: the permutation's cycle through i < numel returns below
         * numel, so this ends, and it is a permutation of [0, numel). */
        uint64_t x = (uint64_t)i;
        do x = feistel(x, h, seed);
        while (x >= (uint64_t)numel);
        out[i] = (int64_t)x;
    }
    return GOBLIN_OK;
}
