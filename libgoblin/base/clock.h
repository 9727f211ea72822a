/* libgoblin/base/clock.h - the library's clocks (internal). */
#ifndef GOBLIN__BASE_CLOCK_H
#define GOBLIN__BASE_CLOCK_H

#include <stdint.h>

/** Monotonic milliseconds. */
int64_t goblin__now_ms(void);
/** Monotonic nanoseconds. */
int64_t goblin__now_ns(void);
/** CPU time of the calling thread, nanoseconds (0 if the system cannot tell). */
int64_t goblin__thread_cpu_ns(void);

#endif
