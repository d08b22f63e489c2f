// The forward row kernel of laplace_kernel, K = exp(-||x_i - y_j||_1),
// shared by the ATen CPU operator (cpu/laplace_kernel_cpu.cpp) and the
// ExecuTorch kernel (executorch/laplace_kernel_executorch.cpp). Plain C++:
// no ATen or ExecuTorch type appears here, each caller brings its own
// tensors and threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu_simd.hpp"

namespace mmlaplacian {
namespace laplace_forward {

// The forward pass vectorises over landmarks j rather than features c: with y
// transposed to yt (d, Mp) (M zero-padded to a multiple of kColPad),
// a block of kRowBlock rows x kColBlock columns keeps its L1 sums in
// registers while c runs over d, and needs no horizontal reductions.

constexpr int64_t kRowBlock = 4;
constexpr int64_t kColBlock = 16;
constexpr int64_t kColPad = 8;  // M is padded to a multiple of this

// out[r, j0 + jj] = exp(-sum_c |x[r, c] - yt[c, j0 + jj]|) for R rows and
// the JB columns of one block that lie below `cols`.
template <typename T, int R, int JB>
MMLAPLACIAN_ALWAYS_INLINE void forward_block(const T* x, const T* yt,
                                             T* out, int64_t j0, int64_t cols,
                                             int64_t padded_cols, int64_t d) {
  T acc[R][JB];
  for (int r = 0; r < R; ++r) {
#pragma omp simd
    for (int jj = 0; jj < JB; ++jj) acc[r][jj] = 0;
  }
  for (int64_t c = 0; c < d; ++c) {
    const T* yc = yt + c * padded_cols + j0;
    for (int r = 0; r < R; ++r) {
      const T xv = x[r * d + c];
#pragma omp simd
      for (int jj = 0; jj < JB; ++jj) acc[r][jj] += std::abs(xv - yc[jj]);
    }
  }
  const int64_t valid = std::min<int64_t>(JB, cols - j0);
  for (int r = 0; r < R; ++r) {
    T* outr = out + r * cols + j0;
    if (valid == JB) {
#pragma omp simd
      for (int jj = 0; jj < JB; ++jj) outr[jj] = exp_nonpositive(-acc[r][jj]);
    } else {
#pragma omp simd
      for (int jj = 0; jj < JB; ++jj) acc[r][jj] = exp_nonpositive(-acc[r][jj]);
      for (int64_t jj = 0; jj < valid; ++jj) outr[jj] = acc[r][jj];
    }
  }
}

// R rows against all columns: blocks of kColBlock, then one of kColPad.
template <typename T, int R>
MMLAPLACIAN_ALWAYS_INLINE void forward_row_block(const T* x, const T* yt,
                                                 T* out, int64_t cols,
                                                 int64_t padded_cols,
                                                 int64_t d) {
  int64_t j0 = 0;
  for (; j0 + kColBlock <= padded_cols; j0 += kColBlock) {
    forward_block<T, R, kColBlock>(x, yt, out, j0, cols, padded_cols, d);
  }
  if (j0 < padded_cols) {
    forward_block<T, R, kColPad>(x, yt, out, j0, cols, padded_cols, d);
  }
}

// Rows [0, rows) of one batch against all columns.
template <typename T>
MMLAPLACIAN_ALWAYS_INLINE void forward_rows(const T* x, const T* yt, T* out,
                                            int64_t rows, int64_t cols,
                                            int64_t padded_cols, int64_t d) {
  int64_t r = 0;
  for (; r + kRowBlock <= rows; r += kRowBlock) {
    forward_row_block<T, kRowBlock>(x + r * d, yt, out + r * cols, cols,
                                    padded_cols, d);
  }
  for (; r < rows; ++r) {
    forward_row_block<T, 1>(x + r * d, yt, out + r * cols, cols, padded_cols,
                            d);
  }
}

// The rows kernel for float and double, compiled for AVX-512, AVX2 and the
// baseline ISA; the best clone is picked when the library loads. Static: each
// library that includes this header gets its own copy and resolver.
[[maybe_unused]] MMLAPLACIAN_SIMD_CLONES static void forward_rows_simd(
    const float* x, const float* yt, float* out, int64_t rows, int64_t cols,
    int64_t padded_cols, int64_t d) {
  forward_rows(x, yt, out, rows, cols, padded_cols, d);
}

[[maybe_unused]] MMLAPLACIAN_SIMD_CLONES static void forward_rows_simd(
    const double* x, const double* yt, double* out, int64_t rows,
    int64_t cols, int64_t padded_cols, int64_t d) {
  forward_rows(x, yt, out, rows, cols, padded_cols, d);
}

// Columns of yt: M rounded up to a whole number of kColPad.
inline int64_t padded_columns(int64_t cols) {
  return (cols + kColPad - 1) / kColPad * kColPad;
}

// yt (d, padded_cols) = y (cols, d) transposed, the padding columns zero.
template <typename T>
inline void transpose_padded(const T* y, T* yt, int64_t cols,
                             int64_t padded_cols, int64_t d) {
  for (int64_t c = 0; c < d; ++c) {
    T* row = yt + c * padded_cols;
    for (int64_t j = 0; j < cols; ++j) row[j] = y[j * d + c];
    std::fill(row + cols, row + padded_cols, T(0));
  }
}

// Rows per forward task: enough work per task (~256k |.| terms) to amortise
// scheduling, few enough to balance the threads.
inline int64_t forward_grain(int64_t cols, int64_t d) {
  const int64_t rows = (1 << 18) / std::max<int64_t>(1, cols * d);
  return std::max<int64_t>(kRowBlock, rows - rows % kRowBlock);
}

}  // namespace laplace_forward
}  // namespace mmlaplacian
