"""Small launches of every CUDA kernel of mmlaplacian._ext, for
``compute-sanitizer`` (memcheck, racecheck, initcheck, synccheck) in
``tools/gpu_check.sh``.

    tools/gpu/sanitize.sh memcheck python tests/gpu/sanitizer_cases.py

Shapes are odd so that every tile has a ragged edge; each dtype the kernels
are compiled for runs once. Exits 1 if a result is wrong.
"""
import sys

import torch

from mmlaplacian.ops import laplace_kernel, newton_schulz_inverse
from mmlaplacian.ops.reference import newton_schulz_forward_reference

# (B, N, M, d): ragged 64-row / 32-feature tiles, d over one feature tile,
# and a one-row case.
LAPLACE_SHAPES = [(2, 67, 35, 33), (1, 1, 3, 16), (3, 40, 70, 7)]
NS_SIZES = [7, 33, 65, 129]  # fused kernel variants 2, 4, 8; matmul path


def check_laplace(shape, dtype) -> bool:
    batch, rows, cols, dim = shape
    x = (torch.randn(batch, rows, dim, dtype=torch.float64) / dim).to(dtype)
    y = (torch.randn(batch, cols, dim, dtype=torch.float64) / dim).to(dtype)
    ok = True
    for need_x, need_y in ((True, True), (True, False), (False, True)):
        xc = x.clone().cuda().requires_grad_(need_x)
        yc = y.clone().cuda().requires_grad_(need_y)
        out = laplace_kernel(xc, yc, impl='cuda')
        out.backward(torch.ones_like(out))
        expected = (x.double()[:, :, None] - y.double()[:, None]).abs().sum(
            -1).neg().exp()
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5
        ok &= torch.allclose(out.double().cpu(), expected, rtol=tol, atol=tol)
        ok &= (xc.grad is not None) == need_x
        ok &= (yc.grad is not None) == need_y
    return bool(ok)


def check_newton_schulz(m, dtype) -> bool:
    q = torch.randn(3, m, m, dtype=torch.float64)
    a = (q @ q.mT / m + torch.eye(m, dtype=torch.float64)).to(dtype)
    x = newton_schulz_inverse(a.cuda(), impl='cuda').cpu()
    expected = newton_schulz_forward_reference(a, 20, 'auto')
    return torch.allclose(x, expected, rtol=1e-4, atol=1e-5)


def main() -> int:
    torch.manual_seed(0)
    failed = []
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for shape in LAPLACE_SHAPES:
            if not check_laplace(shape, dtype):
                failed.append(f'laplace_kernel {shape} {dtype}')
    for dtype in (torch.float32, torch.float64):
        for m in NS_SIZES:
            if not check_newton_schulz(m, dtype):
                failed.append(f'newton_schulz m={m} {dtype}')
    torch.cuda.synchronize()
    print('sanitizer cases:', 'all correct' if not failed else failed)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
