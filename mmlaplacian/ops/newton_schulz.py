"""Matrix inverse by Newton–Schulz iteration as a PyTorch operator.

``torch.ops.mmlaplacian.newton_schulz_inverse`` is declared by the extension
or by :mod:`.extension`, which also says which compiled kernels it has.
Here it gets the batched-matmul reference as the kernel of every device
without a compiled one, a fake kernel, and the analytic backward of the
exact inverse.
"""
from __future__ import annotations

from typing import Tuple, Union

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from .extension import resolve_impl
from .reference import (NEWTON_SCHULZ_INITS, inverse_residual,
                        newton_schulz_backward,
                        newton_schulz_forward_reference)
from .validation import (autocast_disabled, autocast_enabled, check_tensor,
                         compute_dtype)

_OP = 'newton_schulz_inverse'
OPS = torch.ops.mmlaplacian
Tensor = torch.Tensor

torch.library.register_kernel('mmlaplacian::newton_schulz_inverse', None,
                              newton_schulz_forward_reference)


@torch.library.register_fake('mmlaplacian::newton_schulz_inverse')
def _newton_schulz_fake(a: Tensor, num_iters: int, init: str) -> Tensor:
    return torch.empty_like(a)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _backward(ctx, grad: Tensor):
    """The gradient of the exact inverse, ``dA = -Xᵀ G Xᵀ``, not of the
    unrolled iteration: cheap, and exact once X has converged."""
    if not ctx.needs_input_grad[0]:
        return None, None, None
    x, = ctx.saved_tensors
    return newton_schulz_backward(grad, x), None, None


torch.library.register_autograd(
    'mmlaplacian::newton_schulz_inverse', _backward,
    setup_context=_setup_context)


class NewtonSchulzReference(Function):
    """``impl='pytorch'``: the batched-matmul reference with the same
    backward as the operator."""

    @staticmethod
    def forward(ctx, a: Tensor, num_iters: int, init: str) -> Tensor:
        x = newton_schulz_forward_reference(a, num_iters, init)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        return _backward(ctx, grad)


def _check_inputs(a: object, num_iters: object, init: object) -> None:
    check_tensor(_OP, 'A', a, rank=3)
    if a.shape[1] != a.shape[2]:
        raise ValueError(f'{_OP}: A must be a batch of square matrices '
                         f'(B, m, m), got shape {tuple(a.shape)}')
    if not isinstance(num_iters, int) or isinstance(num_iters, bool):
        raise TypeError(f'{_OP}: num_iters must be an int, got '
                        f'{type(num_iters).__name__}')
    if num_iters < 0:
        raise ValueError(f'{_OP}: num_iters must be >= 0, got {num_iters}')
    if init not in NEWTON_SCHULZ_INITS:
        raise ValueError(f'{_OP}: init must be one of {NEWTON_SCHULZ_INITS}, '
                         f'got {init!r}')


def newton_schulz_inverse(
    a: torch.Tensor,
    num_iters: int = 20,
    init: str = 'auto',
    impl: str = 'auto',
    return_residual: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Approximate ``A⁻¹`` for a batch of matrices by Newton–Schulz iteration.

    Runs a fixed number of steps ``X <- 2X - X A X``, which converges
    quadratically once ``||I - A X0|| < 1``. The start is chosen per matrix:

    - ``'identity'``: ``X0 = I / ||A||_inf``; converges for symmetric
      positive definite A (kernel matrices plus εI), fast.
    - ``'transpose'``: ``X0 = Aᵀ / (||A||_1 ||A||_inf)``; converges for any
      non-singular A, in about twice as many steps (it works on AᵀA).
    - ``'auto'``: identity when A is symmetric (``max|A - Aᵀ| <= 1.2e-5 ·
      max|A|``), transpose otherwise. Symmetric but indefinite matrices need
      ``init='transpose'``.

    Computes in fp32 at least (fp64 stays fp64; fp16/bf16 are upcast and the
    result cast back). Under autocast it computes and returns fp32. The
    gradient is that of the exact inverse, ``dA = -Xᵀ G Xᵀ``. A singular or
    NaN-containing matrix gives non-finite entries in its X.

    Args:
        a (torch.Tensor): (B, m, m) floating-point tensor.
        num_iters (int): Number of steps. Defaults to 20, which reaches a
            residual below 1e-5 (fp64) for symmetric positive definite
            matrices up to a condition number of about 1e4 with the identity
            start.
        init (str): ``'auto'``, ``'identity'`` or ``'transpose'``.
        impl (str): ``'auto'``, ``'cpp'``, ``'cuda'`` or ``'pytorch'`` (the
            batched-matmul reference).
        return_residual (bool): Also return ``||I - A X||_F`` per matrix,
            shape (B,), in the compute dtype, not differentiable.

    Returns:
        torch.Tensor | tuple[torch.Tensor, torch.Tensor]: X of shape
        (B, m, m), and the residual when ``return_residual`` is True.

    Raises:
        TypeError: Non-tensor or non-floating A, non-integer ``num_iters``.
        ValueError: A not (B, m, m), negative ``num_iters``, unknown
            ``init`` or ``impl``, or an impl for another device.
        RuntimeError: A compiled impl was asked for but is not built.

    Example:
        >>> a = torch.eye(4).expand(2, 4, 4) * 2
        >>> newton_schulz_inverse(a)[0, 0, 0]
        tensor(0.5000)
    """
    _check_inputs(a, num_iters, init)
    resolve_impl(_OP, impl, a.device)  # refuses an impl that cannot run
    autocast = autocast_enabled(a.device)
    dtype = compute_dtype(a.dtype)
    out_dtype = dtype if autocast else a.dtype
    a = a.to(dtype).contiguous()
    with autocast_disabled(a.device):
        if impl == 'pytorch':
            x = NewtonSchulzReference.apply(a, num_iters, init)
        else:
            x = OPS.newton_schulz_inverse(a, num_iters, init)
    out = x.to(out_dtype)
    if not return_residual:
        return out
    with torch.no_grad(), autocast_disabled(a.device):
        residual = inverse_residual(a.detach(), x.detach())
    return out, residual


def newton_schulz_reference(
    a: torch.Tensor,
    num_iters: int = 20,
    init: str = 'auto',
    return_residual: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """:func:`newton_schulz_inverse` computed by the batched-matmul reference.

    Same contract as ``newton_schulz_inverse(..., impl='pytorch')``.
    """
    return newton_schulz_inverse(
        a, num_iters, init, impl='pytorch', return_residual=return_residual)
