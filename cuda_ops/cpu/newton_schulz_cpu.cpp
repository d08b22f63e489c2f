// CPU kernel of newton_schulz_inverse, registered for the CPU dispatch key.
//
// The iteration runs in C++ on preallocated buffers (two ATen matmul calls a
// step). With at least as many matrices as threads, each thread iterates its
// own share of the batch inside a single parallel region, with sequential
// matmuls: small matrices then pay no thread synchronisation per step. Fewer
// matrices leave the threading to the batched matmul itself.
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <string_view>

#include "newton_schulz_matmul.hpp"
#include "pytorch_cpp_helper.hpp"

namespace mmlaplacian {

namespace {

at::Tensor newton_schulz_cpu_compute(const at::Tensor& a, int64_t num_iters,
                                     NewtonSchulzInit init) {
  const int64_t batch = a.size(0);
  const int threads = at::get_num_threads();
  if (threads <= 1 || batch < threads) {
    return newton_schulz_matmul(a, num_iters, init);
  }
  at::Tensor x = at::empty_like(a);
  // Worker threads start with default modes: give them the caller's
  // inference and grad modes (inference tensors refuse copies outside
  // torch.inference_mode). Not the whole at::ThreadLocalState: it also holds
  // Python objects (saved-tensor hooks of torch.utils.checkpoint, dispatch
  // modes), and installing those on a worker takes the GIL, which the caller
  // holds while it waits for the workers: a deadlock.
  const bool inference = c10::InferenceMode::is_enabled();
  const bool grad_enabled = at::GradMode::is_enabled();
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    c10::InferenceMode inference_guard(inference);
    at::AutoGradMode grad_guard(grad_enabled);
    x.narrow(0, begin, end - begin)
        .copy_(newton_schulz_matmul(a.narrow(0, begin, end - begin),
                                    num_iters, init));
  });
  return x;
}

at::Tensor newton_schulz_inverse_cpu(const at::Tensor& a_in,
                                     int64_t num_iters,
                                     std::string_view init_name) {
  check_newton_schulz_inputs(a_in, num_iters);
  const NewtonSchulzInit init = parse_newton_schulz_init(init_name);
  CHECK_CPU(a_in);
  const at::ScalarType dtype = a_in.scalar_type();
  const bool low_precision = dtype == at::kHalf || dtype == at::kBFloat16;
  TORCH_CHECK_TYPE(low_precision || dtype == at::kFloat ||
                       dtype == at::kDouble,
                   "newton_schulz_inverse: expected a floating-point A, got ",
                   dtype);
  // Reduced-precision inputs are iterated in fp32.
  const at::Tensor a = (low_precision ? a_in.to(at::kFloat) : a_in).contiguous();
  if (a.numel() == 0) return at::empty_like(a_in);
  const at::Tensor x = newton_schulz_cpu_compute(a, num_iters, init);
  return low_precision ? x.to(dtype) : x;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmlaplacian, CPU, m) {
  m.impl("newton_schulz_inverse", &newton_schulz_inverse_cpu);
}

}  // namespace mmlaplacian
