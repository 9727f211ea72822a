/* libgoblin/hub/testctrl.c - goblin_test_control (testctrl.h), the one entry point to
 * the hooks that make the library misbehave on purpose, in the highest layer that has
 * hooks: the hub's own op here, the worker's and the node's handed to worker/misbehave.c.
 * Built with the runtime whether or not the hub is (then its op is GOBLIN_ENOTSUP). */
#include <stdarg.h>

#include "goblin/testctrl.h"
#include "worker/test_control.h"
#if GOBLIN_HAVE_HUB
#include "goblin/hub.h"
#include "hub_impl.h"
#endif

goblin_err goblin_test_control(int op, ...) {
    va_list ap;
    va_start(ap, op);
    goblin_err e;
    if (op == GOBLIN_TESTCTRL_HUB_WORKER_ADDR) {
#if GOBLIN_HAVE_HUB
        goblin_hub *h = va_arg(ap, goblin_hub *);
        const char *ip = va_arg(ap, const char *);
        e = goblin__hub_relay_test_addr(h, ip);
#else
        e = GOBLIN_ENOTSUP;
#endif
    } else {
        e = goblin__worker_test_control(op, ap);
    }
    va_end(ap);
    return e;
}
