/* libgoblin/kernels/hd.h - GOBLIN_HD, the qualifier that makes a header-only kernels/
 * function callable from CUDA device code as well: __host__ __device__ under nvcc,
 * nothing in C. The CUDA backend includes these headers and calls the very same code. */
#ifndef GOBLIN__KERNELS_HD_H
#define GOBLIN__KERNELS_HD_H

#ifdef __CUDACC__
#define GOBLIN_HD __host__ __device__
#else
#define GOBLIN_HD
#endif

#endif
