// A registry of per-device implementations, in the style of mmcv's
// pytorch_device_registry.hpp.
//
// Each op has one dispatch function (the "key", declared in
// mmlaplacian_ops.hpp and defined in pybind.cpp). Device sources register
// their implementation for that key at load time:
//
//   REGISTER_DEVICE_IMPL(laplace_kernel_forward_impl, CPU,
//                        laplace_kernel_forward_cpu);
//
// and the key forwards its arguments to the implementation for the device of
// its tensor arguments:
//
//   return DISPATCH_DEVICE_IMPL(laplace_kernel_forward_impl, x, y);
//
// CUDA implementations register from the .cu sources, which are only compiled
// when MMLAPLACIAN_WITH_CUDA is defined, so CPU builds never reference them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace mmlaplacian {

template <typename F, F f>
class DeviceRegistry;

template <typename Ret, typename... Args, Ret (*f)(Args...)>
class DeviceRegistry<Ret (*)(Args...), f> {
 public:
  using FunctionType = Ret (*)(Args...);
  static constexpr int kMaxDeviceTypes =
      static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);

  void Register(c10::DeviceType device, FunctionType function) {
    funcs_[static_cast<int>(device)] = function;
  }

  FunctionType Find(c10::DeviceType device) const {
    return funcs_[static_cast<int>(device)];
  }

  static DeviceRegistry& instance() {
    static DeviceRegistry inst;
    return inst;
  }

 private:
  DeviceRegistry() {
    for (auto& fn : funcs_) fn = nullptr;
  }
  FunctionType funcs_[kMaxDeviceTypes];
};

namespace detail {

template <typename T>
constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, at::Tensor>;

// The device of the first tensor argument, and whether all tensor arguments
// share it.
template <typename... Args>
std::pair<std::optional<c10::Device>, bool> common_device(const Args&... args) {
  std::optional<c10::Device> device;
  bool consistent = true;
  auto visit = [&](const auto& arg) {
    if constexpr (is_tensor_v<decltype(arg)>) {
      if (!device) {
        device = arg.device();
      } else if (arg.device() != *device) {
        consistent = false;
      }
    }
  };
  (visit(args), ...);
  return {device, consistent};
}

}  // namespace detail

template <typename Registry, typename... Args>
auto Dispatch(const Registry& registry, const char* name, Args&&... args) {
  auto [device, consistent] = detail::common_device(args...);
  TORCH_CHECK_VALUE(device.has_value(), name, ": no tensor argument");
  TORCH_CHECK_VALUE(consistent, name,
                    ": all tensor arguments must be on the same device");
  auto fn = registry.Find(device->type());
  TORCH_CHECK(fn != nullptr, name, ": no implementation for device ",
              c10::DeviceTypeName(device->type()),
              " in this build of mmlaplacian._ext");
  return fn(std::forward<Args>(args)...);
}

}  // namespace mmlaplacian

#define DEVICE_REGISTRY(key) \
  ::mmlaplacian::DeviceRegistry<decltype(&(key)), key>::instance()

#define REGISTER_DEVICE_IMPL(key, device, value)                   \
  namespace {                                                      \
  struct key##_##device##_registerer {                             \
    key##_##device##_registerer() {                                \
      DEVICE_REGISTRY(key).Register(c10::DeviceType::device, value); \
    }                                                              \
  };                                                               \
  const key##_##device##_registerer key##_##device##_registerer_;  \
  }

#define DISPATCH_DEVICE_IMPL(key, ...) \
  ::mmlaplacian::Dispatch(DEVICE_REGISTRY(key), #key, __VA_ARGS__)
