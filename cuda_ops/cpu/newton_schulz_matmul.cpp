// Newton-Schulz inverse built on batched matmuls, for any device ATen has
// bmm/baddbmm for: the CPU implementation, and the CUDA path for matrices
// above the fused kernel's shared-memory limit.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/where.h>

#include <utility>

#include "newton_schulz_matmul.hpp"
#include "pytorch_cpp_helper.hpp"

namespace mmlaplacian {

namespace {

// The starting point X0 for each matrix of the batch (see NewtonSchulzInit).
at::Tensor initial_guess(const at::Tensor& a, NewtonSchulzInit init) {
  const at::Tensor abs_a = a.abs();
  const at::Tensor norm_inf = abs_a.sum(2).amax(1).view({-1, 1, 1});
  const at::Tensor identity_start =
      at::eye(a.size(1), a.options()).unsqueeze(0) / norm_inf;
  if (init == NewtonSchulzInit::kIdentity) return identity_start;

  const at::Tensor norm_1 = abs_a.sum(1).amax(1).view({-1, 1, 1});
  const at::Tensor transpose_start = a.transpose(1, 2) / (norm_1 * norm_inf);
  if (init == NewtonSchulzInit::kTranspose) return transpose_start.contiguous();

  const at::Tensor asym = (a - a.transpose(1, 2)).abs().amax({1, 2});
  const at::Tensor symmetric =
      (asym <= abs_a.amax({1, 2}) * kSymmetryTol).view({-1, 1, 1});
  return at::where(symmetric, identity_start, transpose_start).contiguous();
}

}  // namespace

at::Tensor newton_schulz_matmul(const at::Tensor& a_in, int64_t num_iters,
                                NewtonSchulzInit init) {
  check_newton_schulz_inputs(a_in, num_iters);
  // The out= matmuls refuse inputs that require grad while grad mode is on,
  // which it is in fresh worker threads; the gradient is analytic anyway.
  at::NoGradGuard no_grad;
  const at::Tensor a = a_in.contiguous();
  if (a.numel() == 0) return at::empty_like(a);

  at::Tensor x = initial_guess(a, init);
  at::Tensor ax = at::empty_like(x);
  at::Tensor next = at::empty_like(x);
  for (int64_t it = 0; it < num_iters; ++it) {
    at::bmm_out(ax, a, x);                            // AX = A X
    at::baddbmm_out(next, x, x, ax, /*beta=*/2, /*alpha=*/-1);  // 2X - X(AX)
    std::swap(x, next);
  }
  return x;
}

}  // namespace mmlaplacian
