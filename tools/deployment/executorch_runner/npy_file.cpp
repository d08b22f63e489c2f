#include "npy_file.hpp"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace mmlaplacian {
namespace runner {
namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw std::runtime_error(path + ": " + problem);
}

uint32_t little_endian(const unsigned char* bytes, size_t count) {
  uint32_t value = 0;
  for (size_t i = 0; i < count; ++i) value |= uint32_t(bytes[i]) << (8 * i);
  return value;
}

std::vector<int64_t> parse_shape(const std::string& path,
                                 const std::string& header) {
  std::smatch match;
  if (!std::regex_search(header, match,
                         std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)")))
    fail(path, "its .npy header has no shape: " + header);
  std::vector<int64_t> shape;
  std::stringstream dims(match[1].str());
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    if (dim.find_first_not_of(" \t") == std::string::npos) continue;
    shape.push_back(std::stoll(dim));
  }
  return shape;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

Float32Array read_npy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(path, "cannot be opened");
  unsigned char preamble[kMagicSize + 2];
  if (!file.read(reinterpret_cast<char*>(preamble), sizeof(preamble)) ||
      std::memcmp(preamble, kMagic, kMagicSize) != 0)
    fail(path, "is not a .npy file (numpy.save writes one)");
  const int major = preamble[kMagicSize];
  unsigned char length_bytes[4];
  const size_t length_size = major == 1 ? 2 : 4;
  if (!file.read(reinterpret_cast<char*>(length_bytes), length_size))
    fail(path, "ends inside its .npy header");
  std::string header(little_endian(length_bytes, length_size), '\0');
  if (!file.read(&header[0], header.size()))
    fail(path, "ends inside its .npy header");
  if (header.find("'descr': '<f4'") == std::string::npos)
    fail(path, "is not float32 (header " + header +
                   "); save it with numpy.save(path, array.astype('float32'))");
  if (header.find("'fortran_order': False") == std::string::npos)
    fail(path, "is in Fortran order; save a C-ordered array");
  Float32Array array;
  array.shape = parse_shape(path, header);
  size_t count = 1;
  for (int64_t dim : array.shape) count *= size_t(dim);
  array.values.resize(count);
  if (!file.read(reinterpret_cast<char*>(array.values.data()),
                 count * sizeof(float)))
    fail(path, "holds fewer values than its shape " +
                   shape_string(array.shape) + " needs");
  return array;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const float* values, size_t count) {
  std::string dims;
  for (int64_t dim : shape) dims += std::to_string(dim) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 1);  // "(2, 3)", "(4,)"
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       dims + "), }";
  // Magic, version, length and header, padded with spaces to a multiple of
  // 64 bytes and ended by a newline, as the format asks.
  const size_t unpadded = kMagicSize + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream file(path, std::ios::binary);
  if (!file) fail(path, "cannot be written");
  file.write(kMagic, kMagicSize);
  const unsigned char version_and_length[4] = {
      1, 0, static_cast<unsigned char>(header.size() & 0xff),
      static_cast<unsigned char>(header.size() >> 8)};
  file.write(reinterpret_cast<const char*>(version_and_length), 4);
  file << header;
  file.write(reinterpret_cast<const char*>(values), count * sizeof(float));
  if (!file) fail(path, "could not be written in full");
}

}  // namespace runner
}  // namespace mmlaplacian
