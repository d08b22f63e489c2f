// The schemas of the operators torch.ops.mmlaplacian.*, declared once.
//
// The kernels register per dispatch key beside their code (cpu/*.cpp: CPU,
// cuda/*.cu: CUDA). mmlaplacian/ops adds the fake kernels, the autograd
// formulas and the PyTorch reference, and defines these same schemas itself
// when the extension is not built (mmlaplacian/ops/extension.py: SCHEMAS).
#include <torch/library.h>

TORCH_LIBRARY(mmlaplacian, m) {
  // K[b, i, j] = exp(-sum_c |x[b, i, c] - y[b, j, c]|) for x (B, N, d) and
  // y (B, M, d) of one floating dtype.
  m.def("laplace_kernel(Tensor x, Tensor y) -> Tensor");
  // (dx, dy) of laplace_kernel from grad and its output K; a gradient that
  // is not needed is not computed and is None.
  m.def(
      "laplace_kernel_backward(Tensor grad, Tensor x, Tensor y, Tensor out, "
      "bool need_x, bool need_y) -> (Tensor?, Tensor?)");
  // X ~= A^-1 for A (B, m, m) after num_iters steps of X <- 2X - X A X from
  // the start `init` selects: 'auto', 'identity' or 'transpose'.
  m.def("newton_schulz_inverse(Tensor a, int num_iters, str init) -> Tensor");
}
