// Build facts of the CUDA kernels, reported by mmlaplacian.ops.ext_info().
#include <cuda_runtime_api.h>

#include "cuda_build_info.hpp"

#define MMLAPLACIAN_STRINGIFY_IMPL(...) #__VA_ARGS__
#define MMLAPLACIAN_STRINGIFY(...) MMLAPLACIAN_STRINGIFY_IMPL(__VA_ARGS__)

namespace mmlaplacian {

int cuda_runtime_version() { return CUDART_VERSION; }

const char* cuda_arch_list() {
#ifdef __CUDA_ARCH_LIST__  // defined by nvcc >= 11.5, e.g. 800,900
  return MMLAPLACIAN_STRINGIFY(__CUDA_ARCH_LIST__);
#else
  return "";
#endif
}

}  // namespace mmlaplacian
