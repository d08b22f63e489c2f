// How newton_schulz_inverse chooses X0. Free of ATen so that device code
// can take it as a kernel argument.
#pragma once

namespace mmlaplacian {

enum class NewtonSchulzInit {
  kAuto,       // identity start for symmetric A, transpose start otherwise
  kIdentity,   // X0 = I / ||A||_inf
  kTranspose,  // X0 = A^T / (||A||_1 ||A||_inf)
};

}  // namespace mmlaplacian
