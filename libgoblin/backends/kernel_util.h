/* libgoblin/backends/kernel_util.h - what a CPU kernel includes: the backend
 * interface and the header-only pieces of kernels/ (half conversion, element
 * access, strided iteration). */
#ifndef GOBLIN__KERNEL_UTIL_H
#define GOBLIN__KERNEL_UTIL_H

#include <math.h>
#include <string.h>
#include "backend.h"
#include "kernels/element.h"
#include "kernels/half.h"
#include "kernels/nditer.h"

#endif
