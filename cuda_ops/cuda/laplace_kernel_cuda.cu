// The CUDA kernels of laplace_kernel and laplace_kernel_backward (launchers
// here, device code in common/cuda/), registered for the CUDA dispatch key.
// Only Tensor methods are used (no ATen/ops/*.h): those headers would more
// than double the compile time of this file.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>

#include "cuda/laplace_kernel_cuda_kernel.cuh"
#include "pytorch_cpp_helper.hpp"

namespace mmlaplacian {

namespace {

constexpr int64_t kMaxGridYZ = 65535;

// Rows of x each backward block reduces over when computing dy: at least 256
// (enough work per block), and at most 1024 chunks.
int64_t dy_chunk_len(int64_t rows) {
  const int64_t len = std::max<int64_t>(256, cuda::ceil_div<int64_t>(rows, 1024));
  return cuda::ceil_div<int64_t>(len, cuda::kBwdLanes) * cuda::kBwdLanes;
}

at::Tensor laplace_kernel_cuda(const at::Tensor& x_in,
                               const at::Tensor& y_in) {
  const LaplaceShape s = check_laplace_inputs(x_in, y_in);
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  CHECK_CUDA_INPUT(x);
  CHECK_CUDA_INPUT(y);
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = x.new_empty({s.batch, s.rows, s.cols});
  if (out.numel() == 0) return out;

  const int64_t col_tiles = cuda::ceil_div<int64_t>(s.cols, cuda::kLapTile);
  TORCH_CHECK_VALUE(col_tiles <= kMaxGridYZ,
                    "laplace_kernel: M = ", s.cols, " is too large");
  const dim3 block(cuda::kLapThreads, cuda::kLapThreads);
  const dim3 grid(cuda::ceil_div<int64_t>(s.rows, cuda::kLapTile), col_tiles,
                  std::min(s.batch, kMaxGridYZ));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "laplace_kernel_cuda",
      [&] {
        cuda::laplace_kernel_forward_cuda_kernel<scalar_t>
            <<<grid, block, 0, stream>>>(
                x.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(),
                out.mutable_data_ptr<scalar_t>(), s.batch, s.rows, s.cols,
                s.dim);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  return out;
}

LaplaceGrads laplace_kernel_backward_cuda(const at::Tensor& grad_in,
                                          const at::Tensor& x_in,
                                          const at::Tensor& y_in,
                                          const at::Tensor& out_in,
                                          bool need_x, bool need_y) {
  const LaplaceShape s =
      check_laplace_backward_inputs(grad_in, x_in, y_in, out_in);
  if (!need_x && !need_y) return {};
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  const at::Tensor grad = grad_in.to(x.scalar_type()).contiguous();
  const at::Tensor out = out_in.contiguous();
  CHECK_CUDA_INPUT(x);
  CHECK_CUDA_INPUT(y);
  CHECK_CUDA_INPUT(grad);
  CHECK_CUDA_INPUT(out);
  c10::cuda::CUDAGuard guard(x.device());
  if (x.numel() == 0 || y.numel() == 0) {
    return laplace_grads(need_x ? x.new_zeros(x.sizes()) : at::Tensor(),
                         need_y ? y.new_zeros(y.sizes()) : at::Tensor());
  }

  const at::ScalarType acc_dtype =
      x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t feature_tiles = cuda::ceil_div<int64_t>(s.dim, cuda::kBwdLanes);
  TORCH_CHECK_VALUE(feature_tiles <= kMaxGridYZ,
                    "laplace_kernel: d = ", s.dim, " is too large");
  const int64_t dy_len = dy_chunk_len(s.rows);
  const int64_t dy_chunks = cuda::ceil_div<int64_t>(s.rows, dy_len);
  // dx sums over all M landmarks in one chunk; dy sums chunk-wise over N.
  // Only the gradients autograd asks for are computed.
  at::Tensor dx_part, dy_part;
  if (need_x) {
    dx_part = x.new_empty({s.batch, 1, s.rows, s.dim},
                          x.options().dtype(acc_dtype));
  }
  if (need_y) {
    dy_part = y.new_empty({s.batch, dy_chunks, s.cols, s.dim},
                          y.options().dtype(acc_dtype));
  }

  const dim3 block(cuda::kBwdLanes, cuda::kBwdWarps);
  const dim3 grid_dx(cuda::ceil_div<int64_t>(s.rows, cuda::kBwdTile),
                     feature_tiles, std::min(s.batch, kMaxGridYZ));
  const dim3 grid_dy(
      cuda::ceil_div<int64_t>(s.cols, cuda::kBwdTile) * dy_chunks,
      feature_tiles, std::min(s.batch, kMaxGridYZ));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "laplace_kernel_backward_cuda",
      [&] {
        using acc_t = cuda::acc_type<scalar_t>;
        if (need_x) {
          cuda::laplace_kernel_backward_cuda_kernel<scalar_t, false>
              <<<grid_dx, block, 0, stream>>>(
                  grad.const_data_ptr<scalar_t>(),
                  out.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                  y.const_data_ptr<scalar_t>(),
                  dx_part.mutable_data_ptr<acc_t>(), s.batch, s.rows, s.cols,
                  s.dim, /*chunks=*/1, /*chunk_len=*/s.cols);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        if (need_y) {
          cuda::laplace_kernel_backward_cuda_kernel<scalar_t, true>
              <<<grid_dy, block, 0, stream>>>(
                  grad.const_data_ptr<scalar_t>(),
                  out.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                  y.const_data_ptr<scalar_t>(),
                  dy_part.mutable_data_ptr<acc_t>(), s.batch, s.rows, s.cols,
                  s.dim, dy_chunks, dy_len);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
      });
  at::Tensor dx, dy;
  if (need_x) dx = dx_part.view({s.batch, s.rows, s.dim}).to(x.scalar_type());
  if (need_y) dy = dy_part.sum(1).to(y.scalar_type());
  return laplace_grads(dx, dy);
}

}  // namespace

TORCH_LIBRARY_IMPL(mmlaplacian, CUDA, m) {
  m.impl("laplace_kernel", &laplace_kernel_cuda);
  m.impl("laplace_kernel_backward", &laplace_kernel_backward_cuda);
}

}  // namespace mmlaplacian
