// What our ExecuTorch kernels share: the runtime's headers and the names of
// its types they use. Each kernel file registers itself (EXECUTORCH_LIBRARY).
#pragma once

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/kernel_includes.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>

namespace mmlaplacian {
namespace executorch_kernels {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::KernelRuntimeContext;

}  // namespace executorch_kernels
}  // namespace mmlaplacian
