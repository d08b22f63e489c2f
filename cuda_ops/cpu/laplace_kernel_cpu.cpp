// CPU kernels of laplace_kernel (K = exp(-||x_i - y_j||_1)) and
// laplace_kernel_backward, registered for the CPU dispatch key.
//
// Work is split over (batch, row) blocks with at::parallel_for; the inner
// loops are written for gcc's vectoriser, and compiled for AVX2 and AVX-512
// as well as the baseline ISA (MMLAPLACIAN_SIMD_CLONES).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_simd.hpp"
#include "laplace_kernel_forward.hpp"
#include "pytorch_cpp_helper.hpp"

namespace mmlaplacian {
namespace {

using laplace_forward::forward_grain;
using laplace_forward::forward_rows_simd;
using laplace_forward::padded_columns;

// --------------------------------------------------------------- backward --

// Which gradients a backward call computes (from autograd's
// needs_input_grad): the loops below drop the work of the other one.
enum class Sides { kBoth, kDxOnly, kDyOnly };

// For R rows of one batch: writes dx for each row and adds the rows'
// contribution to dy_part (cols, d), with w = grad * K; with S = kDxOnly
// (kDyOnly) dy_part (dx) is neither read nor written. Handling R rows per
// landmark j shares the loads of y_j and the update of dy_j between them.
// D > 0 fixes d at compile time (the accumulators then live in registers);
// D == 0 reads it from `d` and uses `scratch` (R * d values).
template <typename T, int D, int R, Sides S>
MMLAPLACIAN_ALWAYS_INLINE void backward_block(const T* grad, const T* out,
                                              const T* x, const T* y, T* dx,
                                              T* dy_part, int64_t cols,
                                              int64_t d, T* scratch) {
  constexpr bool kDx = S != Sides::kDyOnly, kDy = S != Sides::kDxOnly;
  const int64_t dim = D > 0 ? D : d;
  T fixed_acc[R * (D > 0 ? D : 1)];
  T* acc = D > 0 ? fixed_acc : scratch;
  if constexpr (kDx) {
#pragma omp simd
    for (int64_t c = 0; c < R * dim; ++c) acc[c] = 0;
  }
  for (int64_t j = 0; j < cols; ++j) {
    T w[R];
    bool any = false;
    for (int r = 0; r < R; ++r) {
      w[r] = grad[r * cols + j] * out[r * cols + j];
      // Exact: zero weights contribute 0 to both gradients (NaN weights do
      // not compare equal and still propagate).
      any = any || w[r] != T(0);
    }
    if (!any) continue;
    const T* yj = y + j * dim;
    T* dyj = kDy ? dy_part + j * dim : nullptr;
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) {
      const T yc = yj[c];
      T dy_sum = 0;
      for (int r = 0; r < R; ++r) {
        const T s = mul_sign0(w[r], x[r * dim + c] - yc);
        if constexpr (kDx) acc[r * dim + c] -= s;
        if constexpr (kDy) dy_sum += s;
      }
      if constexpr (kDy) dyj[c] += dy_sum;
    }
  }
  if constexpr (kDx) {
#pragma omp simd
    for (int64_t c = 0; c < R * dim; ++c) dx[c] = acc[c];
  }
}

constexpr int kBackwardRows = 2;

template <typename T, int D, Sides S>
MMLAPLACIAN_ALWAYS_INLINE void backward_rows(const T* grad, const T* out,
                                             const T* x, const T* y, T* dx,
                                             T* dy_part, int64_t rows,
                                             int64_t cols, int64_t d,
                                             T* scratch) {
  // dx (when not needed, null) advances with the rows; dy_part does not.
  const auto dx_at = [&](int64_t r) { return dx ? dx + r * d : nullptr; };
  int64_t r = 0;
  for (; r + kBackwardRows <= rows; r += kBackwardRows) {
    backward_block<T, D, kBackwardRows, S>(grad + r * cols, out + r * cols,
                                           x + r * d, y, dx_at(r), dy_part,
                                           cols, d, scratch);
  }
  for (; r < rows; ++r) {
    backward_block<T, D, 1, S>(grad + r * cols, out + r * cols, x + r * d, y,
                               dx_at(r), dy_part, cols, d, scratch);
  }
}

template <typename T, Sides S>
MMLAPLACIAN_ALWAYS_INLINE void backward_rows_dim(const T* grad, const T* out,
                                                 const T* x, const T* y,
                                                 T* dx, T* dy_part,
                                                 int64_t rows, int64_t cols,
                                                 int64_t d, T* scratch) {
  switch (d) {
    case 16:
      return backward_rows<T, 16, S>(grad, out, x, y, dx, dy_part, rows, cols,
                                     d, scratch);
    case 32:
      return backward_rows<T, 32, S>(grad, out, x, y, dx, dy_part, rows, cols,
                                     d, scratch);
    case 64:
      return backward_rows<T, 64, S>(grad, out, x, y, dx, dy_part, rows, cols,
                                     d, scratch);
    default:
      return backward_rows<T, 0, S>(grad, out, x, y, dx, dy_part, rows, cols,
                                    d, scratch);
  }
}

// dx or dy_part is null when that gradient is not needed.
template <typename T>
MMLAPLACIAN_ALWAYS_INLINE void backward_rows_any(const T* grad, const T* out,
                                                 const T* x, const T* y,
                                                 T* dx, T* dy_part,
                                                 int64_t rows, int64_t cols,
                                                 int64_t d, T* scratch) {
  if (dx == nullptr) {
    return backward_rows_dim<T, Sides::kDyOnly>(grad, out, x, y, dx, dy_part,
                                                rows, cols, d, scratch);
  }
  if (dy_part == nullptr) {
    return backward_rows_dim<T, Sides::kDxOnly>(grad, out, x, y, dx, dy_part,
                                                rows, cols, d, scratch);
  }
  return backward_rows_dim<T, Sides::kBoth>(grad, out, x, y, dx, dy_part,
                                            rows, cols, d, scratch);
}

MMLAPLACIAN_SIMD_CLONES
void backward_rows_simd(const float* grad, const float* out, const float* x,
                        const float* y, float* dx, float* dy_part,
                        int64_t rows, int64_t cols, int64_t d,
                        float* scratch) {
  backward_rows_any(grad, out, x, y, dx, dy_part, rows, cols, d, scratch);
}

MMLAPLACIAN_SIMD_CLONES
void backward_rows_simd(const double* grad, const double* out, const double* x,
                        const double* y, double* dx, double* dy_part,
                        int64_t rows, int64_t cols, int64_t d,
                        double* scratch) {
  backward_rows_any(grad, out, x, y, dx, dy_part, rows, cols, d, scratch);
}

// The dy reduction over rows uses one partial buffer per row chunk; the
// chunking depends only on N, so results do not depend on the thread count.
int64_t backward_chunks(int64_t rows) {
  constexpr int64_t kMinRows = 256, kMaxChunks = 64;
  return std::clamp<int64_t>((rows + kMinRows - 1) / kMinRows, 1, kMaxChunks);
}

at::Tensor laplace_kernel_cpu(const at::Tensor& x_in, const at::Tensor& y_in) {
  const LaplaceShape s = check_laplace_inputs(x_in, y_in);
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  CHECK_CPU_INPUT(x);
  CHECK_CPU_INPUT(y);
  at::Tensor out = at::empty({s.batch, s.rows, s.cols}, x.options());
  if (out.numel() == 0) return out;

  // yt (B, d, Mp): y transposed, zero-padded to whole column blocks.
  const int64_t padded_cols = padded_columns(s.cols);
  at::Tensor yt = at::zeros({s.batch, s.dim, padded_cols}, y.options());
  yt.narrow(2, 0, s.cols).copy_(y.transpose(1, 2));

  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "laplace_kernel_cpu", [&] {
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* ytp = yt.const_data_ptr<scalar_t>();
    scalar_t* op = out.mutable_data_ptr<scalar_t>();
    // Flattened (batch, row) range; a task may straddle a batch boundary.
    at::parallel_for(0, s.batch * s.rows, forward_grain(s.cols, s.dim),
                     [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end;) {
        const int64_t b = r / s.rows;
        const int64_t stop = std::min(end, (b + 1) * s.rows);
        forward_rows_simd(xp + r * s.dim, ytp + b * s.dim * padded_cols,
                          op + r * s.cols, stop - r, s.cols, padded_cols,
                          s.dim);
        r = stop;
      }
    });
  });
  return out;
}

LaplaceGrads laplace_kernel_backward_cpu(const at::Tensor& grad_in,
                                         const at::Tensor& x_in,
                                         const at::Tensor& y_in,
                                         const at::Tensor& out_in, bool need_x,
                                         bool need_y) {
  const LaplaceShape s =
      check_laplace_backward_inputs(grad_in, x_in, y_in, out_in);
  if (!need_x && !need_y) return {};
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  const at::Tensor grad = grad_in.to(x.scalar_type()).contiguous();
  const at::Tensor out = out_in.contiguous();
  CHECK_CPU_INPUT(grad);
  CHECK_CPU_INPUT(out);

  if (x.numel() == 0 || y.numel() == 0) {
    return laplace_grads(need_x ? at::zeros_like(x) : at::Tensor(),
                         need_y ? at::zeros_like(y) : at::Tensor());
  }
  at::Tensor dx = need_x ? at::empty_like(x) : at::Tensor();
  const int64_t chunks = backward_chunks(s.rows);
  at::Tensor dy_part =
      need_y ? at::zeros({s.batch, chunks, s.cols, s.dim}, y.options())
             : at::Tensor();
  const int64_t chunk_rows = (s.rows + chunks - 1) / chunks;

  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "laplace_kernel_backward_cpu", [&] {
    const scalar_t* gp = grad.const_data_ptr<scalar_t>();
    const scalar_t* kp = out.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* yp = y.const_data_ptr<scalar_t>();
    scalar_t* dxp = need_x ? dx.mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* dyp = need_y ? dy_part.mutable_data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, s.batch * chunks, 1, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> scratch(kBackwardRows * s.dim);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / chunks, chunk = task % chunks;
        const int64_t r0 = chunk * chunk_rows;
        const int64_t r1 = std::min(s.rows, r0 + chunk_rows);
        if (r0 >= r1) continue;
        const int64_t row = b * s.rows + r0;
        backward_rows_simd(gp + row * s.cols, kp + row * s.cols,
                           xp + row * s.dim, yp + b * s.cols * s.dim,
                           dxp ? dxp + row * s.dim : nullptr,
                           dyp ? dyp + task * s.cols * s.dim : nullptr,
                           r1 - r0, s.cols, s.dim, scratch.data());
      }
    });
  });
  return laplace_grads(dx, need_y ? at::sum(dy_part, 1) : at::Tensor());
}

}  // namespace

TORCH_LIBRARY_IMPL(mmlaplacian, CPU, m) {
  m.impl("laplace_kernel", &laplace_kernel_cpu);
  m.impl("laplace_kernel_backward", &laplace_kernel_backward_cpu);
}

}  // namespace mmlaplacian
