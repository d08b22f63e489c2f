// The Newton-Schulz inverse of one small float matrix, X <- 2X - X(AX), for
// the ExecuTorch kernel (executorch/newton_schulz_executorch.cpp). Plain
// C++: no ATen or ExecuTorch type appears here; the caller brings its
// tensors, threads and workspace.
//
// A program's Newton-Schulz inverses are of the (m, m) landmark kernel
// matrices, m = 49 for 7x7 landmarks: far too small for a batched GEMM
// library to pay off its per-call costs, twice per step. Here a matrix is
// iterated start to finish in a workspace that stays in L2 (54 KiB at
// m = 49), each product by register tiles of kTileRows rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu_simd.hpp"
#include "newton_schulz_init.hpp"

namespace mmlaplacian {
namespace newton_schulz_forward {

// A tile of the product: kTileRows rows x kCols columns of accumulators,
// so that each step of k loads kCols values of the right-hand side once for
// kTileRows rows. Seven rows divide the 49 of a 7x7 landmark grid. Columns:
// 32 with AVX-512 (14 of its 32 registers), 16 otherwise (14 of AVX2's 16,
// 28 of NEON's 32). On 49 x 49 against 4 x 32 tiles: 0.8x the time with
// AVX-512 and with AVX2.
constexpr int64_t kTileRows = 7;
constexpr int kWideCols = 32;
constexpr int kNarrowCols = 16;

// The workspace's layout: every matrix is stored as padded_rows(m) x
// padded_cols<kCols>(m) floats, zero outside its m x m corner. Products of
// such matrices are zero there too, so tiles never need bounds checks. The
// last column tile may be a half tile.
inline int64_t padded_rows(int64_t m) {
  return (m + kTileRows - 1) / kTileRows * kTileRows;
}
template <int kCols>
inline int64_t padded_cols(int64_t m) {
  constexpr int64_t pad = kCols / 2;
  return (m + pad - 1) / pad * pad;
}
// Floats of workspace one matrix's inversion needs (A, X, AX, next X), for
// either tiling.
inline int64_t workspace_size(int64_t m) {
  return 4 * padded_rows(m) * padded_cols<kWideCols>(m);
}

// Columns [j0, j0 + kCols) of rows [i0, i0 + kTileRows): out = lhs @ rhs,
// or with kStep out = 2 lhs - lhs @ rhs, over padded (rows x ld) matrices
// whose inner dimension is m.
template <bool kStep, int kCols>
MMLAPLACIAN_ALWAYS_INLINE void product_tile(const float* lhs,
                                            const float* rhs, float* out,
                                            int64_t i0, int64_t j0, int64_t m,
                                            int64_t ld) {
  float acc[kTileRows][kCols];
  for (int r = 0; r < kTileRows; ++r) {
#pragma omp simd
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.f;
  }
  const float* lhs_rows = lhs + i0 * ld;
  for (int64_t k = 0; k < m; ++k) {
    const float* rhs_row = rhs + k * ld + j0;
    for (int r = 0; r < kTileRows; ++r) {
      const float scale = lhs_rows[r * ld + k];
#pragma omp simd
      for (int c = 0; c < kCols; ++c) acc[r][c] += scale * rhs_row[c];
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    float* out_row = out + (i0 + r) * ld + j0;
    const float* lhs_row = lhs_rows + r * ld + j0;
#pragma omp simd
    for (int c = 0; c < kCols; ++c) {
      out_row[c] = kStep ? 2.f * lhs_row[c] - acc[r][c] : acc[r][c];
    }
  }
}

template <bool kStep, int kCols>
MMLAPLACIAN_ALWAYS_INLINE void product(const float* lhs, const float* rhs,
                                       float* out, int64_t m) {
  const int64_t rows = padded_rows(m), ld = padded_cols<kCols>(m);
  for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) {
    int64_t j0 = 0;
    for (; j0 + kCols <= ld; j0 += kCols) {
      product_tile<kStep, kCols>(lhs, rhs, out, i0, j0, m, ld);
    }
    if (j0 < ld) {
      product_tile<kStep, kCols / 2>(lhs, rhs, out, i0, j0, m, ld);
    }
  }
}

// X0 into the zeroed padded buffer x, as the reference's
// newton_schulz_initial_guess: I / ||A||_inf, or A^T / (||A||_1 ||A||_inf),
// or (kAuto) the first for a symmetric A and the second otherwise.
inline void initial_guess(const float* a, int64_t m, NewtonSchulzInit init,
                          float* x, int64_t ld) {
  float norm_inf = 0.f, norm_1 = 0.f, largest = 0.f, asymmetry = 0.f;
  for (int64_t i = 0; i < m; ++i) {
    float row_sum = 0.f, col_sum = 0.f;
    for (int64_t j = 0; j < m; ++j) {
      row_sum += std::abs(a[i * m + j]);
      col_sum += std::abs(a[j * m + i]);
      largest = std::max(largest, std::abs(a[i * m + j]));
      asymmetry = std::max(asymmetry, std::abs(a[i * m + j] - a[j * m + i]));
    }
    norm_inf = std::max(norm_inf, row_sum);
    norm_1 = std::max(norm_1, col_sum);
  }
  const bool identity =
      init == NewtonSchulzInit::kIdentity ||
      (init == NewtonSchulzInit::kAuto &&
       asymmetry <= largest * static_cast<float>(kSymmetryTol));
  if (identity) {
    const float diagonal = 1.f / norm_inf;
    for (int64_t i = 0; i < m; ++i) x[i * ld + i] = diagonal;
    return;
  }
  const float scale = norm_1 * norm_inf;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < m; ++j) x[i * ld + j] = a[j * m + i] / scale;
  }
}

template <int kCols>
MMLAPLACIAN_ALWAYS_INLINE void invert_tiled(const float* a, int64_t m,
                                            int64_t num_iters,
                                            NewtonSchulzInit init,
                                            float* workspace, float* out) {
  const int64_t ld = padded_cols<kCols>(m), size = padded_rows(m) * ld;
  float* a_padded = workspace;
  float* x = workspace + size;
  float* ax = workspace + 2 * size;
  float* next = workspace + 3 * size;
  std::fill(workspace, workspace + 2 * size, 0.f);
  for (int64_t i = 0; i < m; ++i) {
    std::copy(a + i * m, a + (i + 1) * m, a_padded + i * ld);
  }
  initial_guess(a, m, init, x, ld);
  for (int64_t step = 0; step < num_iters; ++step) {
    product<false, kCols>(a_padded, x, ax, m);  // AX
    product<true, kCols>(x, ax, next, m);       // 2X - X(AX)
    std::swap(x, next);
  }
  for (int64_t i = 0; i < m; ++i) {
    std::copy(x + i * ld, x + i * ld + m, out + i * m);
  }
}

[[maybe_unused]] MMLAPLACIAN_AVX512 static void invert_wide(
    const float* a, int64_t m, int64_t num_iters, NewtonSchulzInit init,
    float* workspace, float* out) {
  invert_tiled<kWideCols>(a, m, num_iters, init, workspace, out);
}

[[maybe_unused]] MMLAPLACIAN_SIMD_CLONES static void invert_narrow(
    const float* a, int64_t m, int64_t num_iters, NewtonSchulzInit init,
    float* workspace, float* out) {
  invert_tiled<kNarrowCols>(a, m, num_iters, init, workspace, out);
}

// The inverse of the contiguous (m, m) matrix a after num_iters steps, into
// the contiguous (m, m) out; workspace holds workspace_size(m) floats.
[[maybe_unused]] static void invert(const float* a, int64_t m,
                                    int64_t num_iters, NewtonSchulzInit init,
                                    float* workspace, float* out) {
  static const bool wide = cpu_has_avx512();
  (wide ? invert_wide : invert_narrow)(a, m, num_iters, init, workspace, out);
}

}  // namespace newton_schulz_forward
}  // namespace mmlaplacian
