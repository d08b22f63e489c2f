// float32 arrays in NumPy's .npy format: what the runner reads as inputs and
// writes as outputs, so that Python compares them with numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mmlaplacian {
namespace runner {

struct Float32Array {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Reads a C-ordered little-endian float32 .npy file (format 1.0 to 3.0).
// Throws std::runtime_error naming the file and what is wrong with it.
Float32Array read_npy(const std::string& path);

// Writes `count` values of `shape` as a float32 .npy file (format 1.0).
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const float* values, size_t count);

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace runner
}  // namespace mmlaplacian
