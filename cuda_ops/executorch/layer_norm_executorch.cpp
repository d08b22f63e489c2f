// ExecuTorch kernel of mmlaplacian::layer_norm.out: LayerNorm over the last
// dimension with an affine weight and bias, for programs exported with our
// kernels (laplace='operator'). ExecuTorch's own LayerNorm kernel, which
// XNNPACK cannot take, runs on one thread; at 800x1344 its 20 calls took
// about 65 ms of the Tiny backbone's program. This one splits the rows over
// ExecuTorch's thread pool and vectorises each row.
//
// Built into mmlaplacian._executorch_kernels with the Laplacian kernel
// (laplace_kernel_executorch.cpp, which says how a device's runtime gets
// them).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu_simd.hpp"
#include "executorch_kernel.hpp"

namespace mmlaplacian {
namespace executorch_kernels {
namespace {

// y = (x - mean) / sqrt(var + eps) * weight + bias for each of `rows` rows
// of `cols` elements. The variance is the mean of the squared deviations, a
// second pass over the row, which stays accurate for rows with a large mean;
// compiled for AVX-512, AVX2 and the baseline ISA (cpu_simd.hpp).
MMLAPLACIAN_SIMD_CLONES void layer_norm_rows(const float* x,
                                             const float* weight,
                                             const float* bias, float* y,
                                             int64_t rows, int64_t cols,
                                             float eps) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const float mean = sum * inv_cols;
    float squares = 0.f;
#pragma omp simd reduction(+ : squares)
    for (int64_t c = 0; c < cols; ++c) {
      const float centred = xr[c] - mean;
      squares += centred * centred;
    }
    const float rstd = 1.f / std::sqrt(squares * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
    }
  }
}

bool check_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ET_CHECK_OR_RETURN_FALSE(
      x.dim() >= 1, "mmlaplacian::layer_norm.out: x must have a dimension to "
      "normalise, got a 0-D tensor");
  ET_CHECK_OR_RETURN_FALSE(
      x.scalar_type() == ScalarType::Float &&
          weight.scalar_type() == ScalarType::Float &&
          bias.scalar_type() == ScalarType::Float,
      "mmlaplacian::layer_norm.out: x, weight and bias must be float32, got "
      "%s, %s and %s",
      executorch::runtime::toString(x.scalar_type()),
      executorch::runtime::toString(weight.scalar_type()),
      executorch::runtime::toString(bias.scalar_type()));
  const ssize_t channels = static_cast<ssize_t>(x.size(x.dim() - 1));
  ET_CHECK_OR_RETURN_FALSE(
      weight.dim() == 1 && bias.dim() == 1 && weight.size(0) == channels &&
          bias.size(0) == channels,
      "mmlaplacian::layer_norm.out: weight and bias must be 1-D of x's last "
      "dimension (%zd), got %zd-D and %zd-D of %zd and %zd elements",
      channels, static_cast<ssize_t>(weight.dim()),
      static_cast<ssize_t>(bias.dim()), static_cast<ssize_t>(weight.numel()),
      static_cast<ssize_t>(bias.numel()));
  ET_CHECK_OR_RETURN_FALSE(
      executorch::runtime::tensor_is_default_dim_order(x),
      "mmlaplacian::layer_norm.out: x must be contiguous");
  return true;
}

Tensor& layer_norm_out(KernelRuntimeContext& ctx, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& out) {
  ET_KERNEL_CHECK(ctx, check_inputs(x, weight, bias), InvalidArgument, out);
  ET_KERNEL_CHECK_MSG(
      ctx,
      executorch::runtime::resize_tensor(out, x.sizes()) == Error::Ok &&
          out.scalar_type() == ScalarType::Float &&
          executorch::runtime::tensor_is_default_dim_order(out),
      InvalidArgument, out,
      "mmlaplacian::layer_norm.out: out must be a contiguous float32 tensor "
      "that can hold x's shape");
  if (out.numel() == 0) return out;
  const int64_t cols = x.size(x.dim() - 1);
  const int64_t rows = x.numel() / cols;
  const float* xp = x.const_data_ptr<float>();
  const float* wp = weight.const_data_ptr<float>();
  const float* bp = bias.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  // About 16k elements per task: enough to amortise scheduling.
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / cols);
  const bool done = executorch::extension::parallel_for(
      0, rows, grain, [&](int64_t begin, int64_t end) {
        layer_norm_rows(xp + begin * cols, wp, bp, op + begin * cols,
                        end - begin, cols, static_cast<float>(eps));
      });
  ET_KERNEL_CHECK_MSG(ctx, done, Internal, out,
                      "mmlaplacian::layer_norm.out: parallel_for failed");
  return out;
}

}  // namespace
}  // namespace executorch_kernels
}  // namespace mmlaplacian

EXECUTORCH_LIBRARY(mmlaplacian, "layer_norm.out",
                   mmlaplacian::executorch_kernels::layer_norm_out);
