// Helpers that let gcc vectorise the CPU kernels for the host's vector ISA.
//
// The extension is compiled for the baseline x86-64 ISA (SSE2). Functions
// marked MMLAPLACIAN_SIMD_CLONES are additionally compiled for AVX2 and
// AVX-512 and the best clone is picked once at load time (GNU ifunc), so one
// binary runs everywhere and still uses wide vectors where they exist.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__linux__)
#define MMLAPLACIAN_SIMD_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
// For a kernel whose best register tiling differs with the vector width: its
// AVX-512 variant, called where mmlaplacian::cpu_has_avx512().
#define MMLAPLACIAN_AVX512 __attribute__((target("avx512f")))
#define MMLAPLACIAN_X86_DISPATCH 1
#else
#define MMLAPLACIAN_SIMD_CLONES
#define MMLAPLACIAN_AVX512
#define MMLAPLACIAN_X86_DISPATCH 0
#endif

#if defined(__GNUC__)
#define MMLAPLACIAN_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MMLAPLACIAN_ALWAYS_INLINE inline
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mmlaplacian {

// Whether this CPU runs the MMLAPLACIAN_AVX512 variants.
inline bool cpu_has_avx512() {
#if MMLAPLACIAN_X86_DISPATCH
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// w * sign(t) with sign(0) = 0, as bit operations that vectorise to a
// compare and one logic instruction: w with its sign bit flipped where t < 0.
template <typename T, typename Bits>
MMLAPLACIAN_ALWAYS_INLINE T mul_sign0_impl(T w, T t) {
  static_assert(sizeof(T) == sizeof(Bits), "T and Bits must match in size");
  constexpr Bits kSignBit = Bits(1) << (8 * sizeof(Bits) - 1);
  Bits wb, tb;
  std::memcpy(&wb, &w, sizeof(T));
  std::memcpy(&tb, &t, sizeof(T));
  const Bits sb = wb ^ (tb & kSignBit);
  T s;
  std::memcpy(&s, &sb, sizeof(T));
  return t != T(0) ? s : T(0);
}

MMLAPLACIAN_ALWAYS_INLINE float mul_sign0(float w, float t) {
  return mul_sign0_impl<float, uint32_t>(w, t);
}

MMLAPLACIAN_ALWAYS_INLINE double mul_sign0(double w, double t) {
  return mul_sign0_impl<double, uint64_t>(w, t);
}

// exp(a) for a <= 0 (or NaN), in a form gcc vectorises: Cody-Waite range
// reduction to r in [-ln2/2, ln2/2], Cephes' degree-6 minimax polynomial
// (about 1 ulp), and 2^n assembled from its bits. Results below FLT_MIN
// flush to 0; NaN propagates. The laplace kernel only needs a <= 0.
MMLAPLACIAN_ALWAYS_INLINE float exp_nonpositive(float a) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adds round to integer
  constexpr float kMin = -87.3f;         // exp(kMin) ~ 1.2e-38 = FLT_MIN
  const float clamped = a < kMin ? kMin : a;
  const float shifted = clamped * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // The low mantissa bits of `shifted` hold n; 2^n has exponent field n + 127.
  uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  const uint32_t scale_bits = (bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return a < kMin ? 0.0f : p * scale;
}

MMLAPLACIAN_ALWAYS_INLINE double exp_nonpositive(double a) {
  return std::exp(a);
}

}  // namespace mmlaplacian
