// CUDA kernel of newton_schulz_inverse, registered for the CUDA dispatch key:
// the fused shared-memory kernel (common/cuda/newton_schulz_cuda_kernel.cuh)
// when the matrices fit, else the batched-matmul iteration.
// Only Tensor methods are used (no ATen/ops/*.h), which keeps compiles short.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAMacros.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <string_view>

#include "cuda/newton_schulz_cuda_kernel.cuh"
#include "newton_schulz_matmul.hpp"
#include "pytorch_cpp_helper.hpp"

namespace mmlaplacian {

namespace {

constexpr size_t kStaticReserve = 1024;  // the kernel's reduction scratch

// Shared memory of the fused kernel's A, X and AX for m x m matrices.
size_t fused_bytes(int m, size_t elem_size) {
  return 3 * static_cast<size_t>(m) * cuda::ns_leading_dim(m) * elem_size;
}

// Lets kernel variant <kMicro, T> use the dynamic shared memory of its
// largest matrices on `device`. The limit is a per-device property of the
// kernel, so it is set once per device and variant (std::call_once: host
// threads sharing a GPU do not race; a failed call is retried next time).
template <int kMicro, typename T>
void allow_fused_smem(int device, int optin) {
  static std::once_flag set_once[C10_COMPILE_TIME_MAX_GPUS];
  TORCH_CHECK(device >= 0 && device < C10_COMPILE_TIME_MAX_GPUS,
              "newton_schulz_inverse: unexpected CUDA device index ", device);
  std::call_once(set_once[device], [&] {
    const size_t limit = std::min(
        fused_bytes(cuda::kNsThreads * kMicro, sizeof(T)),
        static_cast<size_t>(optin) - kStaticReserve);
    C10_CUDA_CHECK(cudaFuncSetAttribute(
        cuda::newton_schulz_cuda_kernel<kMicro, T>,
        cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(limit)));
  });
}

// Launches the fused kernel with kMicro x kMicro outputs per thread
// (m <= 16 * kMicro); smem_bytes <= the limit allow_fused_smem sets.
template <int kMicro, typename T>
void launch_fused(const at::Tensor& a, at::Tensor& x, int m, int num_iters,
                  NewtonSchulzInit init, size_t smem_bytes, int optin,
                  cudaStream_t stream) {
  auto kernel = cuda::newton_schulz_cuda_kernel<kMicro, T>;
  allow_fused_smem<kMicro, T>(a.device().index(), optin);
  const dim3 block(cuda::kNsThreads, cuda::kNsThreads);
  kernel<<<static_cast<unsigned int>(a.size(0)), block, smem_bytes, stream>>>(
      a.const_data_ptr<T>(), x.mutable_data_ptr<T>(), m, num_iters, init,
      static_cast<T>(kSymmetryTol));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The most shared memory a block of `device` may opt in to.
int smem_optin(int device) {
  int optin = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(
      &optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin;
}

// Shared memory the fused kernel needs (A, X and AX), or 0 when it exceeds
// what a block may use (`optin` bytes).
size_t fused_smem_bytes(int m, size_t elem_size, int optin) {
  if (m > cuda::kNsMaxDim) return 0;
  const size_t bytes = fused_bytes(m, elem_size);
  return bytes + kStaticReserve <= static_cast<size_t>(optin) ? bytes : 0;
}

at::Tensor newton_schulz_compute(const at::Tensor& a, int64_t num_iters,
                                 NewtonSchulzInit init) {
  const int m = static_cast<int>(a.size(1));
  const int optin = smem_optin(a.device().index());
  const size_t smem = fused_smem_bytes(m, a.element_size(), optin);
  if (smem == 0 || a.size(0) > INT32_MAX || num_iters > INT32_MAX) {
    return newton_schulz_matmul(a, num_iters, init);
  }
  at::Tensor x = a.new_empty(a.sizes());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "newton_schulz_inverse_cuda",
                             [&] {
    const int iters = static_cast<int>(num_iters);
    if (m <= 16 * 2) {
      launch_fused<2, scalar_t>(a, x, m, iters, init, smem, optin, stream);
    } else if (m <= 16 * 4) {
      launch_fused<4, scalar_t>(a, x, m, iters, init, smem, optin, stream);
    } else {
      launch_fused<8, scalar_t>(a, x, m, iters, init, smem, optin, stream);
    }
  });
  return x;
}

at::Tensor newton_schulz_inverse_cuda(const at::Tensor& a_in,
                                      int64_t num_iters,
                                      std::string_view init_name) {
  check_newton_schulz_inputs(a_in, num_iters);
  const NewtonSchulzInit init = parse_newton_schulz_init(init_name);
  CHECK_CUDA(a_in);
  TORCH_CHECK_TYPE(at::isFloatingType(a_in.scalar_type()),
                   "newton_schulz_inverse: expected a floating-point A, got ",
                   a_in.scalar_type());
  c10::cuda::CUDAGuard guard(a_in.device());
  // Reduced-precision inputs are iterated in fp32.
  const bool low_precision = a_in.scalar_type() == at::kHalf ||
                             a_in.scalar_type() == at::kBFloat16;
  const at::Tensor a =
      (low_precision ? a_in.to(at::kFloat) : a_in).contiguous();
  if (a.numel() == 0) return a_in.new_empty(a_in.sizes());
  at::Tensor x = newton_schulz_compute(a, num_iters, init);
  return low_precision ? x.to(a_in.scalar_type()) : x;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmlaplacian, CUDA, m) {
  m.impl("newton_schulz_inverse", &newton_schulz_inverse_cuda);
}

}  // namespace mmlaplacian
