// Small device helpers shared by the CUDA kernels.
#pragma once

#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>

#include <cstdint>

namespace mmlaplacian {
namespace cuda {

// Accumulation type: fp32 for fp16/bf16/fp32, fp64 for fp64.
template <typename scalar_t>
using acc_type = at::opmath_type<scalar_t>;

template <typename T>
C10_HOST_DEVICE inline T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// sign(t) with sign(0) = 0.
template <typename T>
__device__ __forceinline__ T sign0(T t) {
  return static_cast<T>(t > T(0)) - static_cast<T>(t < T(0));
}

// a / b correctly rounded whatever the compile flags: --use_fast_math makes
// '/' an approximate division that returns 0 for |b| > 2^126, so a start
// A^T / (||A||_1 ||A||_inf) with a product near 1e38 would become all zeros.
__device__ __forceinline__ float div_rn(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double div_rn(double a, double b) {
  return __ddiv_rn(a, b);
}

// max that propagates NaN (fmax would drop it).
template <typename T>
__device__ __forceinline__ T nan_max(T a, T b) {
  return (a != a || a > b) ? a : b;
}

// Max over all threads of a block of kWarps full warps; every thread gets
// the result. `scratch` holds kWarps values in shared memory.
template <int kWarps, typename T>
__device__ T block_reduce_max(T v, T* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  if (tid % 32 == 0) scratch[tid / 32] = v;
  __syncthreads();
  v = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) v = nan_max(v, scratch[w]);
  __syncthreads();  // scratch may be reused right after
  return v;
}

}  // namespace cuda
}  // namespace mmlaplacian
