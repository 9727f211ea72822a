/* libgoblin/verify/verify_impl.h - what the node reads of the verifier beyond
 * verify.h (internal). */
#ifndef GOBLIN__VERIFY_IMPL_H
#define GOBLIN__VERIFY_IMPL_H

#include <stdint.h>

/** CPU time that the Freivalds checks called by this thread spent on their second
 *  threads (goblin_freivalds_params.threads = 2) since the last call; resets it. */
int64_t goblin__freivalds_take_helper_cpu_ns(void);

#endif
