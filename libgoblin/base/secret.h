/* libgoblin/base/secret.h - secret random numbers (internal): Freivalds vectors,
 * cache ids, audit draws; never predictable to a peer. */
#ifndef GOBLIN__BASE_SECRET_H
#define GOBLIN__BASE_SECRET_H

#include <stdint.h>

/** A secret random number (getrandom, batched per thread). Thread-safe. */
uint64_t goblin__secret_u64(void);

#endif
