// Kernels with one planted bug each, to show that every compute-sanitizer
// tool of tools/gpu/sanitize.sh finds its kind of bug in our kernels (the
// namespace puts "mmlaplacian" in their names, which the sanitizer filter
// selects), and a clean case with the same patterns done right.
//
//   broken_kernels clean|oob-write|race|uninit-read|bad-warp-mask
//
// Exits 0 unless a CUDA call fails: the bugs are silent without the tool.
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

namespace mmlaplacian {
namespace broken {

constexpr int kThreads = 128;

// memcheck: a block of kThreads writes an array of n < kThreads elements.
__global__ void oob_write(float *out, int n, bool guard) {
  const int i = threadIdx.x;
  if (!guard || i < n) out[i] = static_cast<float>(i);
}

// racecheck: thread 0 sums a shared tile the other warps are still writing
// (no barrier between the writes and the reads).
__global__ void tile_sum(const float *in, float *out, bool barrier) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  tile[t] = in[t] + t;
  if (barrier) __syncthreads();
  if (t == 0) {
    float sum = 0.f;
    for (int k = 0; k < kThreads; ++k) sum += tile[k];
    *out = sum;
  }
}

// initcheck: a shared tile loaded from global memory of which only part was
// ever written (initcheck tracks global memory, where the data comes from).
__global__ void tile_load(const int *in, int *out) {
  __shared__ int tile[kThreads];
  const int t = threadIdx.x;
  tile[t] = in[t];
  __syncthreads();
  out[t] = tile[kThreads - 1 - t];
}

// synccheck: a warp barrier whose mask leaves out a thread that calls it
// (lanes 0-15 are named, lanes 0-16 arrive). A __syncthreads() that some
// threads skip and then exit is no such bug: since Volta, exited threads
// count as arrived, and synccheck rightly stays silent.
__global__ void masked_warp_barrier(float *data, int callers) {
  const int t = threadIdx.x;
  const unsigned named = __ballot_sync(0xffffffffu, t < 16);
  if (t < callers) {
    data[t] += 1.f;
    __syncwarp(named);
  }
}

}  // namespace broken
}  // namespace mmlaplacian

namespace {

using namespace mmlaplacian::broken;

bool check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return false;
}

bool finish(const char *name) {
  if (!check(cudaGetLastError(), name) ||
      !check(cudaDeviceSynchronize(), name))
    return false;
  std::printf("%s ran\n", name);
  return true;
}

bool run(const char *name, bool buggy) {
  float *f = nullptr, *sum = nullptr;
  int *src = nullptr, *dst = nullptr;
  const size_t floats = kThreads * sizeof(float), ints = kThreads * sizeof(int);
  if (!check(cudaMalloc(&f, floats), "cudaMalloc") ||
      !check(cudaMalloc(&sum, sizeof(float)), "cudaMalloc") ||
      !check(cudaMalloc(&src, ints), "cudaMalloc") ||
      !check(cudaMalloc(&dst, ints), "cudaMalloc") ||
      !check(cudaMemset(f, 0, floats), "cudaMemset"))
    return false;
  bool ok = true;
  if (!buggy || !std::strcmp(name, "oob-write")) {
    // 100 elements: writes 28 past the end when unguarded.
    float *small = nullptr;
    ok &= check(cudaMalloc(&small, 100 * sizeof(float)), "cudaMalloc");
    oob_write<<<1, kThreads>>>(small, 100, !buggy);
    ok &= finish("oob-write") && check(cudaFree(small), "cudaFree");
  }
  if (!buggy || !std::strcmp(name, "race")) {
    tile_sum<<<1, kThreads>>>(f, sum, !buggy);
    ok &= finish("race");
  }
  if (!buggy || !std::strcmp(name, "uninit-read")) {
    // The classic slip: the byte count of the memset lacks sizeof(int).
    ok &= check(cudaMemset(src, 0, buggy ? kThreads : ints), "cudaMemset");
    tile_load<<<1, kThreads>>>(src, dst);
    ok &= finish("uninit-read");
  }
  if (!buggy || !std::strcmp(name, "bad-warp-mask")) {
    // Lane 16 calls the barrier of lanes 0-15.
    masked_warp_barrier<<<1, 32>>>(f, buggy ? 17 : 16);
    ok &= finish("bad-warp-mask");
  }
  cudaFree(f);
  cudaFree(sum);
  cudaFree(src);
  cudaFree(dst);
  return ok;
}

}  // namespace

int main(int argc, char **argv) {
  const char *cases[] = {"clean", "oob-write", "race", "uninit-read",
                         "bad-warp-mask"};
  if (argc == 2) {
    for (const char *name : cases) {
      if (!std::strcmp(argv[1], name)) {
        const bool buggy = std::strcmp(name, "clean") != 0;
        return run(name, buggy) ? 0 : 1;
      }
    }
  }
  std::fprintf(stderr,
               "usage: %s clean|oob-write|race|uninit-read|"
               "bad-warp-mask\n",
               argv[0]);
  return 2;
}
