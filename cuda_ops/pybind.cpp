// Python bindings of mmlaplacian._ext and the device dispatch of each op.
#include <torch/extension.h>

#include <string>
#include <vector>

#include "cuda_build_info.hpp"
#include "mmlaplacian_ops.hpp"
#include "pytorch_device_registry.hpp"

namespace mmlaplacian {

at::Tensor laplace_kernel_forward_impl(const at::Tensor& x,
                                       const at::Tensor& y) {
  return DISPATCH_DEVICE_IMPL(laplace_kernel_forward_impl, x, y);
}

std::vector<at::Tensor> laplace_kernel_backward_impl(const at::Tensor& grad,
                                                     const at::Tensor& x,
                                                     const at::Tensor& y,
                                                     const at::Tensor& out,
                                                     bool need_x, bool need_y) {
  return DISPATCH_DEVICE_IMPL(laplace_kernel_backward_impl, grad, x, y, out,
                              need_x, need_y);
}

at::Tensor newton_schulz_forward_impl(const at::Tensor& a, int64_t num_iters,
                                      int64_t init) {
  return DISPATCH_DEVICE_IMPL(newton_schulz_forward_impl, a, num_iters, init);
}

namespace {

// Device types ("cpu", "cuda") for which every op has an implementation.
std::vector<std::string> compiled_devices() {
  std::vector<std::string> devices;
  for (const auto type : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    if (DEVICE_REGISTRY(laplace_kernel_forward_impl).Find(type) &&
        DEVICE_REGISTRY(laplace_kernel_backward_impl).Find(type) &&
        DEVICE_REGISTRY(newton_schulz_forward_impl).Find(type)) {
      devices.push_back(c10::DeviceTypeName(type, /*lower_case=*/true));
    }
  }
  return devices;
}

}  // namespace
}  // namespace mmlaplacian

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace mmlaplacian;
  m.doc() = "Fused ops of mmlaplacian (Laplacian kernel, Newton-Schulz).";
  // Raised whenever a binding's signature changes; mmlaplacian.ops refuses
  // an older build (ext_loader.EXT_ABI_VERSION).
  m.attr("abi_version") = 2;
  m.def("laplace_kernel_forward", &laplace_kernel_forward_impl,
        "K = exp(-||x_i - y_j||_1) for x (B, N, d), y (B, M, d)",
        py::arg("x"), py::arg("y"));
  m.def("laplace_kernel_backward", &laplace_kernel_backward_impl,
        "(dx, dy) of laplace_kernel from grad and the saved output K; a "
        "gradient not needed is not computed and returned as None",
        py::arg("grad"), py::arg("x"), py::arg("y"), py::arg("out"),
        py::arg("need_x") = true, py::arg("need_y") = true);
  m.def("newton_schulz_forward", &newton_schulz_forward_impl,
        "Newton-Schulz inverse of A (B, m, m); init: 0 auto, 1 identity, "
        "2 transpose",
        py::arg("a"), py::arg("num_iters"), py::arg("init"));
  m.def("compiled_devices", &compiled_devices,
        "Device types with kernels for every op");
#ifdef MMLAPLACIAN_WITH_CUDA
  m.def("cuda_runtime_version", &cuda_runtime_version,
        "CUDA runtime version the kernels were compiled against");
  m.def("cuda_arch_list", &cuda_arch_list,
        "Architectures the kernels were compiled for, e.g. '800,900'");
#endif
}
