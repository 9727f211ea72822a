/* goblin/goblin.h - the whole public API of libgoblin. */
#ifndef GOBLIN_GOBLIN_H
#define GOBLIN_GOBLIN_H

#include "api.h"
#include "version.h"
#include "error.h"
#include "log.h"
#include "alloc.h"
#include "dtype.h"
#include "tensor.h"
#include "ops.h"
#include "formula.h"
#include "graph.h"
#include "exec.h"
#include "verify.h"
#include "tls.h"
#include "node.h"
#include "worker.h"
#include "grid.h"
#include "npy.h"
#include "client.h"
#include "principal.h"
#include "gateway.h"
#include "autodiff.h"
#include "optim.h"
#include "train.h"
#include "testctrl.h"

#endif
