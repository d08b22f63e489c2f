// How newton_schulz_inverse chooses X0. Free of ATen so that device code
// and the ExecuTorch kernel can use it.
#pragma once

#include <string_view>

namespace mmlaplacian {

enum class NewtonSchulzInit {
  kAuto,       // identity start for symmetric A, transpose start otherwise
  kIdentity,   // X0 = I / ||A||_inf
  kTranspose,  // X0 = A^T / (||A||_1 ||A||_inf)
};

// A matrix counts as symmetric when max|A - A^T| <= kSymmetryTol * max|A|;
// 100 ulp of fp32 absorbs rounding in how callers build kernel matrices.
constexpr double kSymmetryTol = 1.2e-5;

// The init argument's name as a NewtonSchulzInit; false for an unknown name
// (each caller reports it in its own way).
inline bool newton_schulz_init_from_name(std::string_view name,
                                         NewtonSchulzInit* init) {
  if (name == "auto") {
    *init = NewtonSchulzInit::kAuto;
  } else if (name == "identity") {
    *init = NewtonSchulzInit::kIdentity;
  } else if (name == "transpose") {
    *init = NewtonSchulzInit::kTranspose;
  } else {
    return false;
  }
  return true;
}

}  // namespace mmlaplacian
