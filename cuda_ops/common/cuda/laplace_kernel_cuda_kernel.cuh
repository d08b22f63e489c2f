// CUDA kernels of laplace_kernel, templated over the input dtype
// (fp16/bf16/fp32/fp64) with fp32 (fp64 for fp64) accumulation.
#pragma once

#include <cstdint>

#include "cuda/cuda_helper.cuh"

namespace mmlaplacian {
namespace cuda {

// ---------------------------------------------------------------- forward --
// A 16x16 block computes a 64x64 tile of K; each thread owns a 4x4
// micro-tile (rows ty + 16a, columns tx + 16b). Tiles of x and y,
// kLapTileDim features deep, are staged in shared memory feature-major, so
// threads of a warp read consecutive columns or broadcast one row.
constexpr int kLapThreads = 16;
constexpr int kLapMicro = 4;
constexpr int kLapTile = kLapThreads * kLapMicro;  // 64
constexpr int kLapTileDim = 16;
// Row padding of the shared tiles. The staging store xs[c][r] by a warp
// covers 16 features c x 2 rows r (r0 even); with a row stride of
// kLapTile + 2 = 66 words its banks 2c + r are all distinct (fp32). A
// stride of 65 gives banks c + r: 32 stores on 17 banks, 2-way conflicts.
constexpr int kLapPad = 2;
static_assert((kLapTile + kLapPad) % 32 == 2 && kLapThreads * 2 == 32,
              "the conflict-free store needs a warp to cover 16 features x 2 "
              "rows and a row stride of 2 (mod 32) words");

template <typename scalar_t>
__global__ void __launch_bounds__(kLapThreads * kLapThreads)
    laplace_kernel_forward_cuda_kernel(const scalar_t* __restrict__ x,
                                       const scalar_t* __restrict__ y,
                                       scalar_t* __restrict__ out,
                                       int64_t batch, int64_t rows,
                                       int64_t cols, int64_t dim) {
  using acc_t = acc_type<scalar_t>;
  // Feature-major tiles; kLapPad makes the transposing stores conflict-free
  // for fp32. (An fp64 warp store is 256 bytes, two wavefronts at any
  // stride; strides 65 and 66 both reach that minimum.)
  __shared__ acc_t xs[kLapTileDim][kLapTile + kLapPad];
  __shared__ acc_t ys[kLapTileDim][kLapTile + kLapPad];

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kLapThreads + tx;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kLapTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kLapTile;

  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const scalar_t* xb = x + b * rows * dim;
    const scalar_t* yb = y + b * cols * dim;
    acc_t acc[kLapMicro][kLapMicro];
#pragma unroll
    for (int i = 0; i < kLapMicro; ++i)
#pragma unroll
      for (int j = 0; j < kLapMicro; ++j) acc[i][j] = acc_t(0);

    for (int64_t c0 = 0; c0 < dim; c0 += kLapTileDim) {
      // Zero padding beyond N, M or d adds |0 - 0| = 0 to the sums.
      for (int e = tid; e < kLapTile * kLapTileDim;
           e += kLapThreads * kLapThreads) {
        const int r = e / kLapTileDim, c = e % kLapTileDim;
        const int64_t gc = c0 + c;
        const int64_t gx = row0 + r, gy = col0 + r;
        xs[c][r] = (gx < rows && gc < dim)
                       ? static_cast<acc_t>(xb[gx * dim + gc])
                       : acc_t(0);
        ys[c][r] = (gy < cols && gc < dim)
                       ? static_cast<acc_t>(yb[gy * dim + gc])
                       : acc_t(0);
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kLapTileDim; ++c) {
        acc_t xv[kLapMicro], yv[kLapMicro];
#pragma unroll
        for (int i = 0; i < kLapMicro; ++i) xv[i] = xs[c][ty + kLapThreads * i];
#pragma unroll
        for (int j = 0; j < kLapMicro; ++j) yv[j] = ys[c][tx + kLapThreads * j];
#pragma unroll
        for (int i = 0; i < kLapMicro; ++i)
#pragma unroll
          for (int j = 0; j < kLapMicro; ++j) acc[i][j] += fabs(xv[i] - yv[j]);
      }
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kLapMicro; ++i) {
      const int64_t r = row0 + ty + kLapThreads * i;
      if (r >= rows) continue;
      scalar_t* outr = out + (b * rows + r) * cols;
#pragma unroll
      for (int j = 0; j < kLapMicro; ++j) {
        const int64_t c = col0 + tx + kLapThreads * j;
        if (c < cols) outr[c] = static_cast<scalar_t>(exp(-acc[i][j]));
      }
    }
  }
}

// --------------------------------------------------------------- backward --
// Both gradients have the form
//   g_own[o, c] = -sum_k w(o, k) sign(own[o, c] - other[k, c]),
// with w = grad * K:
//   dx: own = x rows i, other = y rows j, w(i, j) = W[i, j];
//   dy: own = y rows j, other = x rows i, w(j, i) = W[i, j]
//       (sign(x - y) = -sign(y - x) absorbs the sign flip).
// A 32x8 block owns 32 rows x 32 features of `own`; lane tx is the feature,
// each thread holds kBwdMicro rows in registers. The sum over `other` runs
// over [chunk * chunk_len, (chunk + 1) * chunk_len) in tiles of 32 staged in
// shared memory; each chunk writes its own partial sums (summed afterwards),
// which keeps the result deterministic.
constexpr int kBwdLanes = 32;
constexpr int kBwdWarps = 8;
constexpr int kBwdMicro = 4;
constexpr int kBwdTile = kBwdWarps * kBwdMicro;  // 32 own rows per block
// The W tile is staged with lane tx as the own row (w_s[tx][q], dy kernel)
// or as the landmark (w_s[q][tx], dx kernel), so a warp's lanes must span
// exactly one tile of own rows.
static_assert(kBwdTile == kBwdLanes,
              "w_s is indexed by lane as an own row: kBwdTile must equal "
              "kBwdLanes");

template <typename scalar_t, bool kOwnIsY>
__global__ void __launch_bounds__(kBwdLanes * kBwdWarps)
    laplace_kernel_backward_cuda_kernel(
        const scalar_t* __restrict__ grad, const scalar_t* __restrict__ out,
        const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
        acc_type<scalar_t>* __restrict__ partial, int64_t batch, int64_t rows,
        int64_t cols, int64_t dim, int64_t chunks, int64_t chunk_len) {
  using acc_t = acc_type<scalar_t>;
  __shared__ acc_t other_s[kBwdLanes][kBwdLanes + 1];  // [k][feature]
  __shared__ acc_t w_s[kBwdTile][kBwdLanes + 1];       // [own][k]

  const int64_t n_own = kOwnIsY ? cols : rows;
  const int64_t n_other = kOwnIsY ? rows : cols;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t own_tiles = ceil_div<int64_t>(n_own, kBwdTile);
  const int64_t chunk = blockIdx.x / own_tiles;
  const int64_t own0 = (blockIdx.x % own_tiles) * kBwdTile;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kBwdLanes + tx;
  const int64_t k_begin = chunk * chunk_len;
  const int64_t k_end = k_begin + chunk_len < n_other ? k_begin + chunk_len
                                                      : n_other;

  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const scalar_t* own = (kOwnIsY ? y + b * cols * dim : x + b * rows * dim);
    const scalar_t* other = (kOwnIsY ? x + b * rows * dim : y + b * cols * dim);
    const scalar_t* gb = grad + b * rows * cols;
    const scalar_t* kb = out + b * rows * cols;

    acc_t v[kBwdMicro], acc[kBwdMicro];
#pragma unroll
    for (int r = 0; r < kBwdMicro; ++r) {
      const int64_t o = own0 + ty + kBwdWarps * r;
      v[r] = (o < n_own && c < dim) ? static_cast<acc_t>(own[o * dim + c])
                                    : acc_t(0);
      acc[r] = acc_t(0);
    }

    for (int64_t k0 = k_begin; k0 < k_end; k0 += kBwdLanes) {
      for (int kk = ty; kk < kBwdLanes; kk += kBwdWarps) {
        const int64_t k = k0 + kk;
        other_s[kk][tx] = (k < k_end && c < dim)
                              ? static_cast<acc_t>(other[k * dim + c])
                              : acc_t(0);
      }
      // W tile, read along W's contiguous axis j; zero outside the ranges
      // so padded entries contribute nothing.
      for (int q = ty; q < kBwdLanes; q += kBwdWarps) {
        if (kOwnIsY) {  // W[i = k0 + q, j = own0 + tx] -> w_s[tx][q]
          const int64_t i = k0 + q, j = own0 + tx;
          acc_t w = acc_t(0);
          if (i < k_end && j < n_own) {
            w = static_cast<acc_t>(gb[i * cols + j]) *
                static_cast<acc_t>(kb[i * cols + j]);
          }
          w_s[tx][q] = w;
        } else {  // W[i = own0 + q, j = k0 + tx] -> w_s[q][tx]
          const int64_t i = own0 + q, j = k0 + tx;
          acc_t w = acc_t(0);
          if (i < n_own && j < k_end) {
            w = static_cast<acc_t>(gb[i * cols + j]) *
                static_cast<acc_t>(kb[i * cols + j]);
          }
          w_s[q][tx] = w;
        }
      }
      __syncthreads();
#pragma unroll 8
      for (int kk = 0; kk < kBwdLanes; ++kk) {
        const acc_t ov = other_s[kk][tx];
#pragma unroll
        for (int r = 0; r < kBwdMicro; ++r) {
          acc[r] += w_s[ty + kBwdWarps * r][kk] * sign0(v[r] - ov);
        }
      }
      __syncthreads();
    }

    if (c < dim) {
#pragma unroll
      for (int r = 0; r < kBwdMicro; ++r) {
        const int64_t o = own0 + ty + kBwdWarps * r;
        if (o < n_own) {
          partial[((b * chunks + chunk) * n_own + o) * dim + c] = -acc[r];
        }
      }
    }
  }
}

}  // namespace cuda
}  // namespace mmlaplacian
