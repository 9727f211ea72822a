/* tests/unit/tsan_criterion.c - lets Criterion start under ThreadSanitizer; linked into
 * the unit tests of a -Db_sanitize=thread build only (tests/meson.build).
 *
 * Criterion (BoxFort 0.1) maps its "inheritable arena" at a random address between
 * 0x2000'0000'0000 and 0x6000'0000'0000, 2^24-byte steps drawn with rand_r, and gives
 * up after 10 tries that are already mapped (Criterion issue #274: "Could not
 * initialize inheritable arena: Resource temporarily unavailable"). TSan reserves all
 * of that range for its shadow except 0x5500'0000'0000..0x5680'0000'0000, where
 * position-independent programs load, so about 2 % of the draws can succeed. This
 * rand_r hands Criterion's arena draws from that hole instead (the arena check skips a
 * candidate already mapped, such as the program itself); every other caller gets the
 * C library's. Exported (the project builds with -fvisibility=hidden) so that
 * libcriterion's calls bind to it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int (*rand_r_fn)(unsigned *);

__attribute__((visibility("default"))) int rand_r(unsigned *seed) {
    Dl_info info;
    if (dladdr(__builtin_return_address(0), &info) && info.dli_fname &&
        strstr(info.dli_fname, "libcriterion")) {
        /* base = 0x2000'0000'0000 + (r & 0x3fffff) << 24: from 0x5600'0000'0000 on,
         * 16 GiB apart, eight times over the hole before starting again */
        static unsigned next;
        unsigned r = 0x360000u + (next++ % 32u) * 0x400u;
        (void)seed;
        return (int)r;
    }
    static rand_r_fn real;
    if (!real) real = (rand_r_fn)dlsym(RTLD_NEXT, "rand_r");
    return real ? real(seed) : 0;
}
