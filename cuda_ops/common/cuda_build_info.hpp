// Build facts of the CUDA kernels (defined in cuda/cuda_info.cu). Kept free
// of ATen includes so that file compiles in seconds.
#pragma once

namespace mmlaplacian {

// CUDA runtime version the kernels were compiled against (e.g. 13000).
int cuda_runtime_version();
// Architectures the kernels were compiled for, as nvcc lists them
// ("800,900").
const char* cuda_arch_list();

}  // namespace mmlaplacian
