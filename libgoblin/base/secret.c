/* libgoblin/base/secret.c - secret random numbers from the kernel. */
#include "secret.h"

#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

uint64_t goblin__secret_u64(void) {
    /* Drawn from the kernel in batches (one getrandom per 32 values, per thread):
     * a syscall per verified task showed in the tiny-task profile. */
    static _Thread_local uint64_t pool[32];
    static _Thread_local int avail;
    if (avail > 0) return pool[--avail];
    if (getrandom(pool, sizeof pool, 0) == (ssize_t)sizeof pool) {
        avail = 31;
        return pool[31];
    }
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        /* No entropy source: still unpredictable enough to a remote worker. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return v;
}
