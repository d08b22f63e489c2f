// mmlaplacian_executorch_runner: runs an ExecuTorch program (.pte) as an
// application on a device does, with ExecuTorch's C++ runtime, the XNNPACK
// backend, ExecuTorch's kernels and ours (cuda_ops/executorch/, compiled in),
// and no Python. It reads the inputs from .npy files (or makes seeded random
// ones), writes the outputs as .npy files and prints the time per inference.
//
//   mmlaplacian_executorch_runner PROGRAM.pte [--input X.npy]...
//       [--output-dir DIR] [--method forward] [--warmup 1] [--passes 5]
//       [--seed 0]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include "npy_file.hpp"

namespace {

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::EValue;
using executorch::runtime::Error;
using executorch::runtime::MethodMeta;
using mmlaplacian::runner::Float32Array;
using mmlaplacian::runner::read_npy;
using mmlaplacian::runner::shape_string;
using mmlaplacian::runner::write_npy;

const char kUsage[] =
    "usage: mmlaplacian_executorch_runner PROGRAM.pte [--input X.npy]...\n"
    "           [--output-dir DIR] [--method NAME] [--warmup N] "
    "[--passes N] [--seed N]\n"
    "\n"
    "  --input X.npy    a float32 input, one per input of the method in\n"
    "                   order; without any, seeded uniform [0, 1) values\n"
    "  --output-dir DIR write output_<i>.npy there (float32 outputs)\n"
    "  --method NAME    the program's method (default forward)\n"
    "  --warmup N       untimed runs first (default 1)\n"
    "  --passes N       timed runs; their median is printed (default 5)\n"
    "  --seed N         seed of the random inputs (default 0)\n";

struct Options {
  std::string program;
  std::string method = "forward";
  std::vector<std::string> inputs;
  std::string output_dir;
  int warmup = 1;
  int passes = 5;
  unsigned seed = 0;
};

[[noreturn]] void usage_error(const std::string& problem) {
  std::fprintf(stderr, "error: %s\n\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

int parse_count(const std::string& flag, const char* text, int minimum) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < minimum)
    usage_error(flag + " takes an integer >= " + std::to_string(minimum) +
                ", got '" + text + "'");
  return static_cast<int>(value);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) {
      if (!options.program.empty())
        usage_error("more than one program: " + options.program + ", " + arg);
      options.program = arg;
      continue;
    }
    if (i + 1 >= argc) usage_error(arg + " needs a value");
    const char* value = argv[++i];
    if (arg == "--input") {
      options.inputs.push_back(value);
    } else if (arg == "--output-dir") {
      options.output_dir = value;
    } else if (arg == "--method") {
      options.method = value;
    } else if (arg == "--warmup") {
      options.warmup = parse_count(arg, value, 0);
    } else if (arg == "--passes") {
      options.passes = parse_count(arg, value, 1);
    } else if (arg == "--seed") {
      options.seed = static_cast<unsigned>(parse_count(arg, value, 0));
    } else {
      usage_error("unknown option " + arg);
    }
  }
  if (options.program.empty()) usage_error("no program given");
  return options;
}

void check(Error error, const std::string& what) {
  if (error != Error::Ok)
    throw std::runtime_error(what + " (ExecuTorch " +
                             executorch::runtime::to_string(error) + ")");
}

// The method's float32 inputs: from the files given, else seeded random.
std::vector<Float32Array> make_inputs(const Options& options,
                                      const MethodMeta& meta) {
  const size_t count = meta.num_inputs();
  if (!options.inputs.empty() && options.inputs.size() != count)
    throw std::runtime_error(
        "method " + options.method + " takes " + std::to_string(count) +
        " input(s), " + std::to_string(options.inputs.size()) + " given");
  std::mt19937 generator(options.seed);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  std::vector<Float32Array> inputs;
  for (size_t i = 0; i < count; ++i) {
    auto info = meta.input_tensor_meta(i);
    if (!info.ok())
      throw std::runtime_error("input " + std::to_string(i) +
                               " is not a tensor; this runner feeds tensors");
    if (info->scalar_type() != ScalarType::Float)
      throw std::runtime_error("input " + std::to_string(i) +
                               " is not float32; this runner feeds float32");
    std::vector<int64_t> shape(info->sizes().begin(), info->sizes().end());
    Float32Array input;
    if (options.inputs.empty()) {
      input.shape = shape;
      input.values.resize(info->nbytes() / sizeof(float));
      for (float& value : input.values) value = uniform(generator);
      std::printf("input %zu: float32 %s, uniform [0, 1) with seed %u\n", i,
                  shape_string(shape).c_str(), options.seed);
    } else {
      input = read_npy(options.inputs[i]);
      if (input.shape != shape)
        throw std::runtime_error(
            options.inputs[i] + ": shape " + shape_string(input.shape) +
            ", but input " + std::to_string(i) + " of the program is " +
            shape_string(shape) +
            " (a program takes the size it was exported at)");
      std::printf("input %zu: float32 %s from %s\n", i,
                  shape_string(shape).c_str(), options.inputs[i].c_str());
    }
    inputs.push_back(std::move(input));
  }
  return inputs;
}

void save_outputs(const std::vector<EValue>& outputs, const std::string& dir) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].isTensor()) {
      std::printf("output %zu: not a tensor, not saved\n", i);
      continue;
    }
    const auto& tensor = outputs[i].toTensor();
    std::vector<int64_t> shape(tensor.sizes().begin(), tensor.sizes().end());
    if (tensor.scalar_type() != ScalarType::Float) {
      std::printf("output %zu: %s, not float32, not saved\n", i,
                  shape_string(shape).c_str());
      continue;
    }
    std::string saved;
    if (!dir.empty()) {
      saved = dir + "/output_" + std::to_string(i) + ".npy";
      write_npy(saved, shape, tensor.const_data_ptr<float>(),
                static_cast<size_t>(tensor.numel()));
      saved = " -> " + saved;
    }
    std::printf("output %zu: float32 %s%s\n", i, shape_string(shape).c_str(),
                saved.c_str());
  }
}

// The process's own peak resident memory: VmHWM, not ru_maxrss, which
// survives exec and so can report the footprint of the process that
// started the runner.
double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stod(line.substr(6)) / 1024.0;  // kilobytes
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // kilobytes on Linux
}

int run(const Options& options) {
  Module module(options.program, Module::LoadMode::Mmap);
  check(module.load(), "cannot load " + options.program);
  auto names = module.method_names();
  check(names.error(), "cannot read the methods of " + options.program);
  if (names->count(options.method) == 0) {
    std::vector<std::string> sorted(names->begin(), names->end());
    std::sort(sorted.begin(), sorted.end());
    std::string known;
    for (const std::string& name : sorted)
      known += (known.empty() ? "" : ", ") + name;
    throw std::runtime_error(options.program + " has no method " +
                             options.method + "; its methods: " + known +
                             " (--method)");
  }
  check(module.load_method(options.method),
        "cannot load method " + options.method + " of " + options.program +
            "; an operator the runtime lacks is named in the log above");
  auto meta = module.method_meta(options.method);
  check(meta.error(), "no method " + options.method);
  std::printf("program: %s, method %s: %zu input(s), %zu output(s)\n",
              options.program.c_str(), options.method.c_str(),
              meta->num_inputs(), meta->num_outputs());

  std::vector<Float32Array> inputs = make_inputs(options, *meta);
  std::vector<TensorPtr> tensors;
  std::vector<EValue> values;
  for (Float32Array& input : inputs) {
    std::vector<executorch::aten::SizesType> sizes(input.shape.begin(),
                                                   input.shape.end());
    tensors.push_back(executorch::extension::from_blob(input.values.data(),
                                                       sizes));
    values.emplace_back(tensors.back());
  }

  auto execute = [&]() {
    auto outputs = module.execute(options.method, values);
    check(outputs.error(), "method " + options.method + " failed");
    return std::move(outputs.get());
  };
  for (int i = 0; i < options.warmup; ++i) execute();
  std::vector<double> times_ms;
  std::vector<EValue> outputs;
  for (int i = 0; i < options.passes; ++i) {
    const auto start = std::chrono::steady_clock::now();
    outputs = execute();
    times_ms.push_back(std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - start)
                           .count());
  }
  save_outputs(outputs, options.output_dir);
  std::sort(times_ms.begin(), times_ms.end());
  std::printf(
      "time: median %.1f ms over %d pass(es) (min %.1f, max %.1f), after %d "
      "warm-up run(s)\n",
      times_ms[times_ms.size() / 2], options.passes, times_ms.front(),
      times_ms.back(), options.warmup);
  std::printf("peak RSS: %.0f MB\n", peak_rss_mb());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
