/* libgoblin/verify/verdict.h - what the checks share (internal to verify/): their
 * draws' streams, the f64 constants of their bounds, and building a verdict.
 *
 * Notation (docs/verification.md): u is the unit roundoff of the result's dtype,
 * u64 = 2^-53 that of the f64 arithmetic the checks themselves run in,
 * gamma_j(u) = j u / (1 - j u). */
#ifndef GOBLIN__VERIFY_VERDICT_H
#define GOBLIN__VERIFY_VERDICT_H

#include <goblin/verify.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* Philox streams of our draws, outside the catalogue's range (the random ops use
 * their op value as stream), so no op output can ever equal a secret vector. */
#define VERIFY_STREAM_FREIVALDS 0x46524556u /* "FREV" */
#define VERIFY_STREAM_SAMPLE 0x53414d50u    /* "SAMP" */

#define U64 0x1p-53
#define ETA64 0x1p-1074 /* absolute error of an underflowing f64 product */

static inline double gamma_n(double n, double u) {
    double nu = n * u;
    return nu < 1 ? nu / (1 - nu) : INFINITY;
}

static inline double max_finite(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return DBL_MAX;
    case GOBLIN_DTYPE_F16: return 65504.0;
    case GOBLIN_DTYPE_BF16: return 0x1.fep127;
    default: return FLT_MAX;
    }
}

static inline void verdict_init(goblin_verdict *v) {
    memset(v, 0, sizeof *v);
    v->kind = GOBLIN_VERDICT_ACCEPT;
    v->reason = GOBLIN_VERIFY_OK;
    v->worst_index = -1;
}

static inline goblin_err verdict_reject(goblin_verdict *v, goblin_verify_reason why) {
    verdict_init(v);
    v->kind = GOBLIN_VERDICT_REJECT;
    v->reason = why;
    v->worst_ratio = INFINITY;
    v->worst_tight_ratio = INFINITY;
    return GOBLIN_OK;
}

/* discrepancy / level, with 0/0 = 0 and x/0 = inf. */
static inline double ratio_of(double d, double level) {
    if (d == 0) return 0;
    if (!(level > 0)) return INFINITY;
    return d / level;
}


#endif
