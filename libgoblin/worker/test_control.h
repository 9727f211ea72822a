/* libgoblin/worker/test_control.h - the worker's and the node's ops of
 * goblin_test_control (misbehave.c), for the entry point in hub/testctrl.c. */
#ifndef GOBLIN__WORKER_TEST_CONTROL_H
#define GOBLIN__WORKER_TEST_CONTROL_H

#include <stdarg.h>

#include "goblin/error.h"

/** Run op @p op (a GOBLIN_TESTCTRL_WORKER_*, NODE_ORIGIN or MISBEHAVE_* op) with its
 *  arguments in @p ap. GOBLIN_EINVAL for another op or bad arguments. */
goblin_err goblin__worker_test_control(int op, va_list ap);

#endif
