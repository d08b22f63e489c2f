"""Pure-PyTorch references of the fused ops (forward and backward math).

They run on any device, need no compiled code, and serve as the ground truth
of the tests and as the fallback of ``impl='auto'``. Their memory stays
O(B·N·M): the L1 distance is accumulated one feature at a time, so no
(B, N, M, d) tensor is ever formed.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

NEWTON_SCHULZ_INITS = ('auto', 'identity', 'transpose')
# A is treated as symmetric when max|A - Aᵀ| <= SYMMETRY_TOL * max|A| (the
# compiled kernels use the same value).
SYMMETRY_TOL = 1.2e-5


def laplace_kernel_forward_reference(x: torch.Tensor,
                                     y: torch.Tensor) -> torch.Tensor:
    """``K[b, i, j] = exp(-sum_c |x[b, i, c] - y[b, j, c]|)``.

    Args:
        x (torch.Tensor): (B, N, d).
        y (torch.Tensor): (B, M, d), same dtype and device.

    Returns:
        torch.Tensor: K of shape (B, N, M).
    """
    batch, rows, dim = x.shape
    dist = x.new_zeros(batch, rows, y.shape[1])
    for c in range(dim):
        term = x[:, :, c, None] - y[:, None, :, c]
        dist += term.abs_()
    # The output is a new tensor, not dist exponentiated in place: a
    # compiled autograd.Function (torch 2.11, aot_eager) saves an output made
    # by an in-place op as it was before that op, and the backward, which
    # reads the saved output, then returns zeros.
    return dist.neg_().exp()


def laplace_kernel_backward_reference(
    grad: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    out: torch.Tensor,
    need_x: bool = True,
    need_y: bool = True,
) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Gradients of :func:`laplace_kernel_forward_reference` from its output.

    With ``W = grad * K``: ``dx_i = -sum_j W_ij sign(x_i - y_j)`` and
    ``dy_j = +sum_i W_ij sign(x_i - y_j)``, with ``sign(0) = 0``.

    Returns:
        tuple: ``(dx, dy)`` shaped like x and y; a gradient that is not
        needed (``need_x`` / ``need_y`` False) is not computed and is None.
    """
    weight = grad * out
    dx = torch.empty_like(x) if need_x else None
    dy = torch.empty_like(y) if need_y else None
    if dx is None and dy is None:
        return None, None
    for c in range(x.shape[2]):
        signed = torch.sign(x[:, :, c, None] - y[:, None, :, c]).mul_(weight)
        if dx is not None:
            dx[:, :, c] = -signed.sum(2)
        if dy is not None:
            dy[:, :, c] = signed.sum(1)
    return dx, dy


def is_symmetric(a: torch.Tensor) -> torch.Tensor:
    """Per-matrix flag (B,): ``max|A - Aᵀ| <= SYMMETRY_TOL * max|A|``."""
    asym = (a - a.mT).abs().amax(dim=(1, 2))
    return asym <= SYMMETRY_TOL * a.abs().amax(dim=(1, 2))


def newton_schulz_initial_guess(a: torch.Tensor, init: str) -> torch.Tensor:
    """The starting point X0 of the Newton–Schulz iteration.

    ``'identity'``: ``X0 = I / ||A||_inf``, convergent for symmetric positive
    definite A. ``'transpose'``: ``X0 = Aᵀ / (||A||_1 ||A||_inf)``,
    convergent for any non-singular A, slower. ``'auto'``: identity for
    symmetric matrices, transpose otherwise, chosen per matrix.
    """
    abs_a = a.abs()
    norm_inf = abs_a.sum(2).amax(1)[:, None, None]
    eye = torch.eye(a.shape[1], dtype=a.dtype, device=a.device)
    identity_start = eye / norm_inf
    if init == 'identity':
        return identity_start
    norm_1 = abs_a.sum(1).amax(1)[:, None, None]
    transpose_start = a.mT / (norm_1 * norm_inf)
    if init == 'transpose':
        return transpose_start.contiguous()
    return torch.where(is_symmetric(a)[:, None, None], identity_start,
                       transpose_start)


def newton_schulz_forward_reference(a: torch.Tensor, num_iters: int,
                                    init: str) -> torch.Tensor:
    """``num_iters`` steps of ``X <- 2X - X A X`` from
    :func:`newton_schulz_initial_guess`, in the dtype of ``a``."""
    if a.numel() == 0:
        return torch.empty_like(a)
    x = newton_schulz_initial_guess(a, init)
    for _ in range(num_iters):
        x = torch.baddbmm(x, x, torch.bmm(a, x), beta=2, alpha=-1)
    return x


def newton_schulz_backward(grad: torch.Tensor,
                           x: torch.Tensor) -> torch.Tensor:
    """Gradient of ``X = A⁻¹`` w.r.t. A: ``-Xᵀ G Xᵀ``, exact once X has
    converged."""
    xt = x.mT
    return -torch.bmm(torch.bmm(xt, grad), xt)


def inverse_residual(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``||I - A X||_F`` per matrix, shape (B,)."""
    eye = torch.eye(a.shape[1], dtype=a.dtype, device=a.device)
    return torch.linalg.matrix_norm(eye - torch.bmm(a, x))
