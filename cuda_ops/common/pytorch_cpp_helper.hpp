// Input checks shared by the C++ and CUDA sources of mmlaplacian._ext.
//
// The Python wrappers validate shapes, dtypes and devices with messages aimed at
// users; these checks are the last line of defence for direct calls into _ext.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

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

// How X0 is chosen; the integer values are part of the _ext interface.
enum class NewtonSchulzInit : int64_t {
  kAuto = 0,       // identity start for symmetric A, transpose start otherwise
  kIdentity = 1,   // X0 = I / ||A||_inf
  kTranspose = 2,  // X0 = A^T / (||A||_1 ||A||_inf)
};

inline NewtonSchulzInit to_init(int64_t init) {
  TORCH_CHECK_VALUE(init >= 0 && init <= 2,
                    "newton_schulz_inverse: init code must be 0 (auto), 1 "
                    "(identity) or 2 (transpose), got ",
                    init);
  return static_cast<NewtonSchulzInit>(init);
}

// A matrix counts as symmetric when max|A - A^T| <= kSymmetryTol * max|A|;
// 100 ulp of fp32 absorbs rounding in how callers build kernel matrices.
constexpr double kSymmetryTol = 1.2e-5;

}  // namespace mmlaplacian
