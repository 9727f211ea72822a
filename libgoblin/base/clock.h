/* libgoblin/base/clock.h - the library's clocks (internal). */
#ifndef GOBLIN__BASE_CLOCK_H
#define GOBLIN__BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/** Monotonic milliseconds. */
int64_t goblin__now_ms(void);
/** Monotonic nanoseconds. */
int64_t goblin__now_ns(void);
/** CPU time of the calling thread, nanoseconds (0 if the system cannot tell). */
int64_t goblin__thread_cpu_ns(void);
/** CPU time of the whole process, nanoseconds (0 if the system cannot tell). */
int64_t goblin__process_cpu_ns(void);
/** The CLOCK_MONOTONIC time @p ms milliseconds from now (negative: in the past), the
 *  absolute deadline pthread_cond_timedwait takes on a condition variable whose
 *  clock is CLOCK_MONOTONIC (pthread_condattr_setclock). */
struct timespec goblin__deadline_after_ms(int64_t ms);

#endif
