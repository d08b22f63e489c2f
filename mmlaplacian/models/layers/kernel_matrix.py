"""Kernel matrices between token sets, dispatching to the fused ops."""
from __future__ import annotations

import torch

from mmlaplacian.ops import laplace_kernel

KERNELS = ('laplacian', 'gaussian')


def kernel_matrix(a: torch.Tensor,
                  b: torch.Tensor,
                  kernel: str = 'laplacian',
                  impl: str = 'auto') -> torch.Tensor:
    """Kernel matrix between two batches of bandwidth-scaled vectors.

    The bandwidth is applied by the caller (``a / λ``, ``b / λ``), so a
    learnable λ receives its gradient through autograd.

    Args:
        a (Tensor): ``(..., N, d)``.
        b (Tensor): ``(..., M, d)``; leading dims equal to ``a``'s.
        kernel (str): ``'laplacian'`` for ``exp(-||a - b||_1)`` (fused op) or
            ``'gaussian'`` for ``exp(-||a - b||_2^2 / 2)`` (SOFT's kernel).
        impl (str): Implementation of the fused Laplacian op.

    Returns:
        Tensor: ``(..., N, M)``.
    """
    lead = a.shape[:-2]
    a3 = a.reshape(-1, a.shape[-2], a.shape[-1])
    b3 = b.reshape(-1, b.shape[-2], b.shape[-1])
    if kernel == 'laplacian':
        out = laplace_kernel(a3, b3, impl=impl)
    elif kernel == 'gaussian':
        # Squared distances in at least fp32: the expansion cancels badly
        # in half precision.
        dtype = torch.promote_types(a3.dtype, torch.float32)
        a32, b32 = a3.to(dtype), b3.to(dtype)
        sq = (a32.pow(2).sum(-1, keepdim=True) + b32.pow(2).sum(-1)[:, None] -
              2 * a32 @ b32.transpose(1, 2)).clamp_min(0)
        out = torch.exp(-0.5 * sq)
    else:
        raise ValueError(f'kernel must be one of {KERNELS}, got {kernel!r}')
    return out.reshape(*lead, a.shape[-2], b.shape[-2])
