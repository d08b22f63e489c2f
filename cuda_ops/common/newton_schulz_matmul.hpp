// Newton-Schulz inverse built on batched matmuls (ATen bmm/baddbmm): the CPU
// kernel, and the CUDA kernel's path for matrices too large for its fused
// shared-memory kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "newton_schulz_init.hpp"

namespace mmlaplacian {

// num_iters steps of X <- 2X - X A X from the start `init` selects, in the
// dtype of `a` (B, m, m).
at::Tensor newton_schulz_matmul(const at::Tensor& a, int64_t num_iters,
                                NewtonSchulzInit init);

}  // namespace mmlaplacian
