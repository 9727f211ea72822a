/* libgoblin/verify/verdict.c - the names of verdicts and of their reasons (goblin/verify.h). */
#include <goblin/verify.h>

const char *goblin_verdict_name(goblin_verdict_kind kind) {
    switch (kind) {
    case GOBLIN_VERDICT_ACCEPT: return "accept";
    case GOBLIN_VERDICT_ESCALATE: return "escalate";
    case GOBLIN_VERDICT_REJECT: return "reject";
    default: return "invalid";
    }
}

const char *goblin_verify_reason_name(goblin_verify_reason reason) {
    static const char *const names[GOBLIN_VERIFY_REASON_COUNT] = {
        "ok", "bit_equal", "between", "exceeds_bound", "nonfinite", "shape", "dtype", "uncheckable",
    };
    if ((unsigned)reason >= GOBLIN_VERIFY_REASON_COUNT) return "invalid";
    return names[reason];
}
