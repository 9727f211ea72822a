/* libgoblin/backends/cuda/cuda_backend.h - queries into the CUDA backend for
 * the rest of the library (worker memory budget), the tests and the GPU
 * benchmark. C and C++. Only linked when GOBLIN_HAVE_CUDA. */
#ifndef GOBLIN__CUDA_BACKEND_H
#define GOBLIN__CUDA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <goblin/error.h>
#include <goblin/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Free and total memory of CUDA device @p device, for a worker's advertised
 * budget. GOBLIN_ENODEV if there is no such device or no driver. */
goblin_err goblin__cuda_device_memory(int32_t device, uint64_t *free_bytes, uint64_t *total_bytes);

/* Device time (ms, CUDA events) of the last node this thread computed on the
 * CUDA backend, transfers excluded; -1 if none. For bench/gpu_bench. */
double goblin__cuda_last_kernel_ms(void);

/* Does the CUDA backend have a device kernel for @p op (whatever the dtypes)? */
bool goblin__cuda_op_has_kernel(goblin_op op);

/* Was libcublas found (matmul/conv2d then use it, else our own GEMM kernel)? */
bool goblin__cuda_cublas_loaded(void);

#ifdef __cplusplus
}
#endif

#endif
