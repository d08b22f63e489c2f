// Input checks and argument types shared by the CPU and CUDA kernels.
//
// The Python wrappers validate shapes, dtypes and devices with messages aimed
// at users; these checks are the last line of defence for direct calls of
// torch.ops.mmlaplacian.*.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string_view>
#include <tuple>

#include "newton_schulz_init.hpp"

#define CHECK_CPU(x) \
  TORCH_CHECK_VALUE(x.device().is_cpu(), #x " must be a CPU tensor")
#define CHECK_CUDA(x) \
  TORCH_CHECK_VALUE(x.device().is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) \
  TORCH_CHECK_VALUE(x.is_contiguous(), #x " must be contiguous")
#define CHECK_CPU_INPUT(x) \
  CHECK_CPU(x);            \
  CHECK_CONTIGUOUS(x)
#define CHECK_CUDA_INPUT(x) \
  CHECK_CUDA(x);            \
  CHECK_CONTIGUOUS(x)

namespace mmlaplacian {

// Shapes of laplace_kernel's operands; every kernel reads them the same way.
struct LaplaceShape {
  int64_t batch;  // B
  int64_t rows;   // N (x)
  int64_t cols;   // M (y)
  int64_t dim;    // d
};

inline LaplaceShape check_laplace_inputs(const at::Tensor& x,
                                         const at::Tensor& y) {
  TORCH_CHECK_VALUE(x.dim() == 3 && y.dim() == 3,
                    "laplace_kernel: x and y must be 3-D (B, N, d) and "
                    "(B, M, d), got ",
                    x.sizes(), " and ", y.sizes());
  TORCH_CHECK_VALUE(x.size(0) == y.size(0) && x.size(2) == y.size(2),
                    "laplace_kernel: batch and feature sizes must match, got ",
                    x.sizes(), " and ", y.sizes());
  TORCH_CHECK_TYPE(x.scalar_type() == y.scalar_type(),
                   "laplace_kernel: x and y must have the same dtype, got ",
                   x.scalar_type(), " and ", y.scalar_type());
  return {x.size(0), x.size(1), y.size(1), x.size(2)};
}

// The backward's inputs: the forward's checks plus grad and K of shape
// (B, N, M).
inline LaplaceShape check_laplace_backward_inputs(const at::Tensor& grad,
                                                  const at::Tensor& x,
                                                  const at::Tensor& y,
                                                  const at::Tensor& out) {
  const LaplaceShape s = check_laplace_inputs(x, y);
  TORCH_CHECK_VALUE(
      grad.sizes() == out.sizes() &&
          out.sizes() == at::IntArrayRef({s.batch, s.rows, s.cols}),
      "laplace_kernel backward: grad and K must have shape (B, N, M) = (",
      s.batch, ", ", s.rows, ", ", s.cols, "), got ", grad.sizes(), " and ",
      out.sizes());
  return s;
}

inline void check_newton_schulz_inputs(const at::Tensor& a,
                                       int64_t num_iters) {
  TORCH_CHECK_VALUE(a.dim() == 3 && a.size(1) == a.size(2),
                    "newton_schulz_inverse: A must be a batch of square "
                    "matrices (B, m, m), got ",
                    a.sizes());
  TORCH_CHECK_VALUE(num_iters >= 0,
                    "newton_schulz_inverse: num_iters must be >= 0, got ",
                    num_iters);
}

// The init argument of newton_schulz_inverse.
inline NewtonSchulzInit parse_newton_schulz_init(std::string_view name) {
  NewtonSchulzInit init;
  TORCH_CHECK_VALUE(newton_schulz_init_from_name(name, &init),
                    "newton_schulz_inverse: init must be 'auto', 'identity' "
                    "or 'transpose', got '", name, "'");
  return init;
}

// (dx, dy) of laplace_kernel_backward: a gradient that was not needed is
// None (std::nullopt).
using LaplaceGrads =
    std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>>;

// The kernels' (dx, dy), undefined where not computed, as LaplaceGrads.
inline LaplaceGrads laplace_grads(const at::Tensor& dx, const at::Tensor& dy) {
  const auto optional = [](const at::Tensor& t) {
    return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
  };
  return {optional(dx), optional(dy)};
}

}  // namespace mmlaplacian
