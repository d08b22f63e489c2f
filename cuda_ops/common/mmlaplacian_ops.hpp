// Declarations of the fused ops: one dispatch key per op (defined in
// pybind.cpp) and the per-device implementations registered for it.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace mmlaplacian {

// K[b, i, j] = exp(-sum_c |x[b, i, c] - y[b, j, c]|) for x (B, N, d) and
// y (B, M, d), both contiguous and of the same floating dtype.
at::Tensor laplace_kernel_forward_impl(const at::Tensor& x,
                                       const at::Tensor& y);

// Gradients of laplace_kernel from the saved output K: with W = grad * K,
//   dx[i] = -sum_j W[i, j] sign(x[i] - y[j]),
//   dy[j] = +sum_i W[i, j] sign(x[i] - y[j]).
// Returns {dx, dy}; a gradient that is not needed (need_x / need_y false) is
// not computed and comes back undefined (None in Python).
std::vector<at::Tensor> laplace_kernel_backward_impl(const at::Tensor& grad,
                                                     const at::Tensor& x,
                                                     const at::Tensor& y,
                                                     const at::Tensor& out,
                                                     bool need_x, bool need_y);

// X ~= A^-1 after num_iters steps of X <- 2X - X A X from the start selected
// by init (a NewtonSchulzInit code), computed in fp32 at least.
at::Tensor newton_schulz_forward_impl(const at::Tensor& a, int64_t num_iters,
                                      int64_t init);

at::Tensor laplace_kernel_forward_cpu(const at::Tensor& x, const at::Tensor& y);
std::vector<at::Tensor> laplace_kernel_backward_cpu(const at::Tensor& grad,
                                                    const at::Tensor& x,
                                                    const at::Tensor& y,
                                                    const at::Tensor& out,
                                                    bool need_x, bool need_y);
at::Tensor newton_schulz_forward_cpu(const at::Tensor& a, int64_t num_iters,
                                     int64_t init);

// Device-agnostic Newton-Schulz built on batched matmuls (ATen bmm/baddbmm):
// the CPU implementation, and the CUDA path for matrices too large for the
// fused shared-memory kernel. Computes in the dtype of `a`.
at::Tensor newton_schulz_matmul(const at::Tensor& a, int64_t num_iters,
                                int64_t init);

#ifdef MMLAPLACIAN_WITH_CUDA
at::Tensor laplace_kernel_forward_cuda(const at::Tensor& x,
                                       const at::Tensor& y);
std::vector<at::Tensor> laplace_kernel_backward_cuda(const at::Tensor& grad,
                                                     const at::Tensor& x,
                                                     const at::Tensor& y,
                                                     const at::Tensor& out,
                                                     bool need_x, bool need_y);
at::Tensor newton_schulz_forward_cuda(const at::Tensor& a, int64_t num_iters,
                                      int64_t init);
#endif

}  // namespace mmlaplacian
