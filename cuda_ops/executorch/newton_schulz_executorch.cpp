// ExecuTorch kernel of mmlaplacian::newton_schulz_inverse.out: num_iters
// Newton-Schulz steps X <- 2X - X(AX) on each (m, m) matrix of A (B, m, m),
// from the start `init` names, for programs exported with our kernels
// (laplace='operator').
//
// In standard operators the inverse is the start's norms and symmetry test
// (amax, le and where on the portable kernels, one thread) and then 2 x
// num_iters batched products of (m, m) matrices in XNNPACK, each paying a
// GEMM call's fixed cost for a few matrices of 49 x 49. Here each matrix is
// iterated start to finish in its own small workspace, the batch split over
// ExecuTorch's thread pool (common/newton_schulz_forward.hpp).
//
// Built into mmlaplacian._executorch_kernels with the Laplacian kernel
// (laplace_kernel_executorch.cpp, which says how a device's runtime gets
// them).
#include <cstdint>
#include <new>
#include <string_view>
#include <vector>

#include "executorch_kernel.hpp"
#include "newton_schulz_forward.hpp"

namespace mmlaplacian {
namespace executorch_kernels {
namespace {

constexpr const char* kName = "mmlaplacian::newton_schulz_inverse.out";

bool check_inputs(const Tensor& a, int64_t num_iters) {
  ET_CHECK_OR_RETURN_FALSE(
      a.dim() == 3 && a.size(1) == a.size(2),
      "%s: A must be a batch of square matrices (B, m, m), got %zd-D with "
      "last sizes (%zd, %zd)",
      kName, static_cast<ssize_t>(a.dim()),
      static_cast<ssize_t>(a.dim() >= 2 ? a.size(a.dim() - 2) : -1),
      static_cast<ssize_t>(a.dim() >= 1 ? a.size(a.dim() - 1) : -1));
  ET_CHECK_OR_RETURN_FALSE(a.scalar_type() == ScalarType::Float,
                           "%s: A must be float32, got %s", kName,
                           executorch::runtime::toString(a.scalar_type()));
  ET_CHECK_OR_RETURN_FALSE(
      executorch::runtime::tensor_is_default_dim_order(a),
      "%s: A must be contiguous", kName);
  ET_CHECK_OR_RETURN_FALSE(num_iters >= 0,
                           "%s: num_iters must be >= 0, got %zd", kName,
                           static_cast<ssize_t>(num_iters));
  return true;
}

Tensor& newton_schulz_inverse_out(KernelRuntimeContext& ctx, const Tensor& a,
                                  int64_t num_iters,
                                  std::string_view init_name, Tensor& out) {
  ET_KERNEL_CHECK(ctx, check_inputs(a, num_iters), InvalidArgument, out);
  NewtonSchulzInit init;
  ET_KERNEL_CHECK_MSG(ctx, newton_schulz_init_from_name(init_name, &init),
                      InvalidArgument, out,
                      "%s: init must be 'auto', 'identity' or 'transpose', "
                      "got '%.*s'",
                      kName, static_cast<int>(init_name.size()),
                      init_name.data());
  ET_KERNEL_CHECK_MSG(
      ctx,
      executorch::runtime::resize_tensor(out, a.sizes()) == Error::Ok &&
          out.scalar_type() == ScalarType::Float &&
          executorch::runtime::tensor_is_default_dim_order(out),
      InvalidArgument, out,
      "%s: out must be a contiguous float32 tensor that can hold (B, m, m)",
      kName);
  if (out.numel() == 0) return out;

  const int64_t batch = a.size(0), m = a.size(1);
  const int64_t workspace = newton_schulz_forward::workspace_size(m);
  const float* ap = a.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  // One workspace per matrix, so that tasks share nothing: a few KiB to
  // tens of KiB each at the landmark counts models use.
  std::vector<float> buffers;
  try {
    buffers.resize(static_cast<size_t>(batch * workspace));
  } catch (const std::bad_alloc&) {
    ET_KERNEL_CHECK_MSG(ctx, false, MemoryAllocationFailed, out,
                        "%s: no memory for the workspace", kName);
  }
  const bool done = executorch::extension::parallel_for(
      0, batch, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          newton_schulz_forward::invert(ap + b * m * m, m, num_iters, init,
                                        buffers.data() + b * workspace,
                                        op + b * m * m);
        }
      });
  ET_KERNEL_CHECK_MSG(ctx, done, Internal, out, "%s: parallel_for failed",
                      kName);
  return out;
}

}  // namespace
}  // namespace executorch_kernels
}  // namespace mmlaplacian

EXECUTORCH_LIBRARY(mmlaplacian, "newton_schulz_inverse.out",
                   mmlaplacian::executorch_kernels::newton_schulz_inverse_out);
