// ExecuTorch kernel of mmlaplacian::laplace_kernel.out: the Laplacian kernel
// K = exp(-||x_i - y_j||_1) in one pass over (B, N, M), for programs that
// keep the operator instead of its standard-operator form (a maximum over a
// (B, Nb, M, d) block and a product per block of rows; export_forms.py).
//
// Built into mmlaplacian._executorch_kernels against the executorch wheel's
// runtime (setup.py), and loaded into ExecuTorch's Python runtime by
// mmlaplacian.deployment.executorch_kernels.load_executorch_kernels(). An
// application that links ExecuTorch from source compiles the kernel files of
// this folder with its runtime and ET_USE_THREADPOOL: their
// EXECUTORCH_LIBRARY lines register the kernels when the library is loaded.
#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "executorch_kernel.hpp"
#include "laplace_kernel_forward.hpp"

namespace mmlaplacian {
namespace executorch_kernels {
namespace {

using laplace_forward::forward_grain;
using laplace_forward::forward_rows_simd;
using laplace_forward::padded_columns;
using laplace_forward::transpose_padded;

bool check_inputs(const Tensor& x, const Tensor& y) {
  ET_CHECK_OR_RETURN_FALSE(
      x.dim() == 3 && y.dim() == 3,
      "mmlaplacian::laplace_kernel.out: x (B, N, d) and y (B, M, d) must be "
      "3-D, got %zd-D and %zd-D",
      static_cast<ssize_t>(x.dim()), static_cast<ssize_t>(y.dim()));
  ET_CHECK_OR_RETURN_FALSE(
      x.scalar_type() == ScalarType::Float &&
          y.scalar_type() == ScalarType::Float,
      "mmlaplacian::laplace_kernel.out: x and y must be float32, got %s and "
      "%s",
      executorch::runtime::toString(x.scalar_type()),
      executorch::runtime::toString(y.scalar_type()));
  ET_CHECK_OR_RETURN_FALSE(
      x.size(0) == y.size(0) && x.size(2) == y.size(2),
      "mmlaplacian::laplace_kernel.out: x (B, N, d) and y (B, M, d) must "
      "agree in B and d, got x (%zd, %zd, %zd) and y (%zd, %zd, %zd)",
      static_cast<ssize_t>(x.size(0)), static_cast<ssize_t>(x.size(1)),
      static_cast<ssize_t>(x.size(2)), static_cast<ssize_t>(y.size(0)),
      static_cast<ssize_t>(y.size(1)), static_cast<ssize_t>(y.size(2)));
  ET_CHECK_OR_RETURN_FALSE(
      executorch::runtime::tensor_is_default_dim_order(x) &&
          executorch::runtime::tensor_is_default_dim_order(y),
      "mmlaplacian::laplace_kernel.out: x and y must be contiguous");
  return true;
}

Tensor& laplace_kernel_out(KernelRuntimeContext& ctx, const Tensor& x,
                           const Tensor& y, Tensor& out) {
  ET_KERNEL_CHECK(ctx, check_inputs(x, y), InvalidArgument, out);
  const int64_t batch = x.size(0), rows = x.size(1), cols = y.size(1);
  const int64_t dim = x.size(2);
  const SizesType sizes[3] = {static_cast<SizesType>(batch),
                              static_cast<SizesType>(rows),
                              static_cast<SizesType>(cols)};
  ET_KERNEL_CHECK_MSG(
      ctx,
      executorch::runtime::resize_tensor(out, {sizes, 3}) == Error::Ok &&
          out.scalar_type() == ScalarType::Float &&
          executorch::runtime::tensor_is_default_dim_order(out),
      InvalidArgument, out,
      "mmlaplacian::laplace_kernel.out: out must be a contiguous float32 "
      "tensor that can hold (B, N, M)");
  if (out.numel() == 0) return out;

  // yt (B, d, Mp): y transposed, zero-padded to whole column blocks.
  const float* xp = x.const_data_ptr<float>();
  const float* yp = y.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const int64_t padded_cols = padded_columns(cols);
  std::vector<float> yt;
  try {
    yt.resize(static_cast<size_t>(batch * dim * padded_cols));
  } catch (const std::bad_alloc&) {
    ET_KERNEL_CHECK_MSG(ctx, false, MemoryAllocationFailed, out,
                        "mmlaplacian::laplace_kernel.out: no memory for the "
                        "transposed landmarks");
  }
  for (int64_t b = 0; b < batch; ++b) {
    transpose_padded(yp + b * cols * dim, yt.data() + b * dim * padded_cols,
                     cols, padded_cols, dim);
  }
  // Flattened (batch, row) range; a task may straddle a batch boundary.
  const bool done = executorch::extension::parallel_for(
      0, batch * rows, forward_grain(cols, dim),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end;) {
          const int64_t b = r / rows;
          const int64_t stop = std::min(end, (b + 1) * rows);
          forward_rows_simd(xp + r * dim, yt.data() + b * dim * padded_cols,
                            op + r * cols, stop - r, cols, padded_cols, dim);
          r = stop;
        }
      });
  ET_KERNEL_CHECK_MSG(ctx, done, Internal, out,
                      "mmlaplacian::laplace_kernel.out: parallel_for failed");
  return out;
}

}  // namespace
}  // namespace executorch_kernels
}  // namespace mmlaplacian

EXECUTORCH_LIBRARY(mmlaplacian, "laplace_kernel.out",
                   mmlaplacian::executorch_kernels::laplace_kernel_out);
