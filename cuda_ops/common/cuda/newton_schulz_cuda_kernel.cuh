// Fused Newton-Schulz inverse: one block per matrix, A, X and AX resident in
// shared memory for all iterations (m <= 128).
#pragma once

#include <cstdint>

#include "cuda/cuda_helper.cuh"
#include "newton_schulz_init.hpp"

namespace mmlaplacian {
namespace cuda {

constexpr int kNsThreads = 16;  // 16x16 threads per block
constexpr int kNsWarps = kNsThreads * kNsThreads / 32;
constexpr int kNsMaxDim = 128;

// Row stride of the shared-memory matrices: odd, so the two rows a warp reads
// at once fall in different banks.
__host__ __device__ inline int ns_leading_dim(int m) { return m | 1; }

// acc[a][b] = sum_k P[r_a, k] Q[k, c_b] for the thread's micro-tile
// r_a = ty + 16a, c_b = tx + 16b (P, Q in shared memory, row stride ld).
template <int kMicro, typename T>
__device__ __forceinline__ void ns_block_matmul(const T* P, const T* Q, int m,
                                                int ld,
                                                T (&acc)[kMicro][kMicro]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int a = 0; a < kMicro; ++a)
#pragma unroll
    for (int b = 0; b < kMicro; ++b) acc[a][b] = T(0);
  for (int k = 0; k < m; ++k) {
    T p[kMicro], q[kMicro];
#pragma unroll
    for (int a = 0; a < kMicro; ++a) {
      const int r = ty + kNsThreads * a;
      p[a] = r < m ? P[r * ld + k] : T(0);
    }
#pragma unroll
    for (int b = 0; b < kMicro; ++b) {
      const int c = tx + kNsThreads * b;
      q[b] = c < m ? Q[k * ld + c] : T(0);
    }
#pragma unroll
    for (int a = 0; a < kMicro; ++a)
#pragma unroll
      for (int b = 0; b < kMicro; ++b) acc[a][b] = fma(p[a], q[b], acc[a][b]);
  }
}

// X = NewtonSchulz(A) for matrix blockIdx.x of a (B, m, m) batch, with
// m <= kNsThreads * kMicro, from the start `init` selects. Dynamic shared
// memory: 3 * m * ns_leading_dim(m) T.
template <int kMicro, typename T>
__global__ void __launch_bounds__(kNsThreads * kNsThreads)
    newton_schulz_cuda_kernel(const T* __restrict__ a_in, T* __restrict__ x_out,
                              int m, int num_iters, NewtonSchulzInit init,
                              T symmetry_tol) {
  extern __shared__ __align__(16) unsigned char ns_smem[];
  __shared__ T scratch[kNsWarps];
  const int ld = ns_leading_dim(m);
  T* A = reinterpret_cast<T*>(ns_smem);
  T* X = A + m * ld;
  T* AX = X + m * ld;

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kNsThreads + tx;
  constexpr int kThreads = kNsThreads * kNsThreads;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * m * m;

  for (int e = tid; e < m * m; e += kThreads) {
    A[(e / m) * ld + e % m] = a_in[offset + e];
  }
  __syncthreads();

  // ||A||_inf (max row sum), ||A||_1 (max column sum), and the symmetry test
  // max|A - A^T| <= tol * max|A|; thread t handles row and column t.
  T row_sum = 0, col_sum = 0, asym = 0, amax = 0;
  for (int t = tid; t < m; t += kThreads) {
    T rs = 0, cs = 0;
    for (int k = 0; k < m; ++k) {
      const T atk = A[t * ld + k], akt = A[k * ld + t];
      rs += fabs(atk);
      cs += fabs(akt);
      asym = nan_max(asym, T(fabs(atk - akt)));
      amax = nan_max(amax, T(fabs(atk)));
    }
    row_sum = nan_max(row_sum, rs);
    col_sum = nan_max(col_sum, cs);
  }
  const T norm_inf = block_reduce_max<kNsWarps>(row_sum, scratch);
  const T norm_1 = block_reduce_max<kNsWarps>(col_sum, scratch);
  const T asym_max = block_reduce_max<kNsWarps>(asym, scratch);
  const T abs_max = block_reduce_max<kNsWarps>(amax, scratch);
  const bool identity_start =
      init == NewtonSchulzInit::kIdentity ||
      (init == NewtonSchulzInit::kAuto && asym_max <= symmetry_tol * abs_max);

  // Divide as the reference does (exact division, not a reciprocal of the
  // product, which may lie near FLT_MAX and flush to zero).
  const T inv_inf = div_rn(T(1), norm_inf);
  const T norm_1_inf = norm_1 * norm_inf;
  for (int e = tid; e < m * m; e += kThreads) {
    const int i = e / m, j = e % m;
    X[i * ld + j] = identity_start ? (i == j ? inv_inf : T(0))
                                   : div_rn(A[j * ld + i], norm_1_inf);
  }
  __syncthreads();

  T acc[kMicro][kMicro];
  for (int it = 0; it < num_iters; ++it) {
    ns_block_matmul<kMicro>(A, X, m, ld, acc);  // AX = A X
#pragma unroll
    for (int a = 0; a < kMicro; ++a)
#pragma unroll
      for (int b = 0; b < kMicro; ++b) {
        const int r = ty + kNsThreads * a, c = tx + kNsThreads * b;
        if (r < m && c < m) AX[r * ld + c] = acc[a][b];
      }
    __syncthreads();
    ns_block_matmul<kMicro>(X, AX, m, ld, acc);  // X (AX)
    __syncthreads();  // every read of X is done before it is overwritten
#pragma unroll
    for (int a = 0; a < kMicro; ++a)
#pragma unroll
      for (int b = 0; b < kMicro; ++b) {
        const int r = ty + kNsThreads * a, c = tx + kNsThreads * b;
        if (r < m && c < m) X[r * ld + c] = T(2) * X[r * ld + c] - acc[a][b];
      }
    __syncthreads();
  }

  for (int e = tid; e < m * m; e += kThreads) {
    x_out[offset + e] = X[(e / m) * ld + e % m];
  }
}

}  // namespace cuda
}  // namespace mmlaplacian
