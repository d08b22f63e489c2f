"""The Laplacian kernel ``exp(-||x_i - y_j||_1)`` as a PyTorch operator.

``torch.ops.mmlaplacian.laplace_kernel`` and its analytic backward, the
operator ``torch.ops.mmlaplacian.laplace_kernel_backward``, are declared by
the extension or by :mod:`.extension`, which also says which compiled
kernels they have. Here they get the PyTorch reference as the kernel of
every device without a compiled one, their fake kernels for
``torch.compile``/``torch.export``, and the forward its autograd formula.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from .extension import resolve_impl
from .reference import (laplace_kernel_backward_reference,
                        laplace_kernel_forward_reference)
from .validation import (autocast_disabled, autocast_enabled,
                         check_same_device, check_same_dtype, check_tensor,
                         compute_dtype)

_OP = 'laplace_kernel'
_LOW_PRECISION = (torch.float16, torch.bfloat16)
OPS = torch.ops.mmlaplacian
Tensor = torch.Tensor

torch.library.register_kernel('mmlaplacian::laplace_kernel', None,
                              laplace_kernel_forward_reference)
torch.library.register_kernel('mmlaplacian::laplace_kernel_backward', None,
                              laplace_kernel_backward_reference)


@torch.library.register_fake('mmlaplacian::laplace_kernel')
def _laplace_kernel_fake(x: Tensor, y: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], x.shape[1], y.shape[1])


@torch.library.register_fake('mmlaplacian::laplace_kernel_backward')
def _laplace_kernel_backward_fake(
        grad: Tensor, x: Tensor, y: Tensor, out: Tensor, need_x: bool,
        need_y: bool) -> tuple[Optional[Tensor], Optional[Tensor]]:
    return (torch.empty_like(x) if need_x else None,
            torch.empty_like(y) if need_y else None)


def _setup_context(ctx, inputs, output) -> None:
    x, y = inputs
    ctx.save_for_backward(x, y, output)


def _backward(ctx, grad: Tensor):
    """Uses the saved output K: the distances are never recomputed and no
    (B, N, M, d) tensor is formed. Only the needed gradients are computed."""
    need_x, need_y = ctx.needs_input_grad[:2]
    if not (need_x or need_y):
        return None, None
    x, y, out = ctx.saved_tensors
    return OPS.laplace_kernel_backward(grad.contiguous(), x, y, out, need_x,
                                       need_y)


torch.library.register_autograd(
    'mmlaplacian::laplace_kernel', _backward, setup_context=_setup_context)


class LaplaceKernelReference(Function):
    """``impl='pytorch'``: the reference forward with the same analytic
    backward (autograd through the per-feature loop would save d tensors of
    size B·N·M)."""

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor) -> Tensor:
        out = laplace_kernel_forward_reference(x, y)
        ctx.save_for_backward(x, y, out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        need_x, need_y = ctx.needs_input_grad
        if not (need_x or need_y):
            return None, None
        x, y, out = ctx.saved_tensors
        return laplace_kernel_backward_reference(grad.contiguous(), x, y, out,
                                                 need_x, need_y)


def _check_inputs(x: object, y: object, autocast: bool) -> None:
    check_tensor(_OP, 'x', x, rank=3)
    check_tensor(_OP, 'y', y, rank=3)
    check_same_device(_OP, x=x, y=y)
    if not autocast:  # autocast casts both to one dtype, as torch ops do
        check_same_dtype(_OP, x=x, y=y)
    if x.shape[0] != y.shape[0] or x.shape[2] != y.shape[2]:
        raise ValueError(
            f'{_OP}: x (B, N, d) and y (B, M, d) must agree in B and d, got '
            f'x {tuple(x.shape)} and y {tuple(y.shape)}')


def laplace_kernel(x: torch.Tensor,
                   y: torch.Tensor,
                   impl: str = 'auto') -> torch.Tensor:
    """Laplacian kernel ``K[b, i, j] = exp(-sum_c |x[b,i,c] - y[b,j,c]|)``.

    Differentiable in ``x`` and ``y``. A bandwidth λ is applied by scaling the
    inputs: ``exp(-||a - b||_1 / λ) = laplace_kernel(a / λ, b / λ)``.
    ``torch.compile(fullgraph=True)``, ``torch.export`` and the exporters
    see the operator ``torch.ops.mmlaplacian.laplace_kernel``
    (:mod:`mmlaplacian.ops.export_forms` gives its standard-operator forms).

    Precision: fp32 and fp64 compute in their own dtype. fp16/bf16 inputs are
    accumulated in fp32 (on CPU they are upcast and the result cast back).
    Under autocast the op computes in fp32 and returns fp32 (fp64 stays
    fp64), like ``torch.cdist``.

    Non-finite inputs never raise. NaN in ``x[b, i]`` makes row i of
    ``K[b]`` NaN, and ``dx[b, i]`` and all of ``dy[b]`` (likewise for y).
    ±inf in one of ``x[b, i]``, ``y[b, j]`` gives K = 0 in that row (column)
    and a zero gradient there; inf − inf (the same infinity in one feature
    of both) gives NaN in that entry of K and in ``dx[b, i]``, ``dy[b, j]``.
    Only the gradients autograd needs are computed.

    Args:
        x (torch.Tensor): (B, N, d) floating-point tensor.
        y (torch.Tensor): (B, M, d) tensor of the same dtype and device.
            Non-contiguous and expanded inputs are accepted.
        impl (str): ``'auto'`` (the operator: compiled kernels for the
            device when the extension has them, else the reference),
            ``'cpp'``, ``'cuda'`` (the operator, requiring those kernels) or
            ``'pytorch'`` (the reference, without the operator). Defaults to
            ``'auto'``.

    Returns:
        torch.Tensor: K of shape (B, N, M); empty when N or M is 0.

    Raises:
        TypeError: Non-tensor, non-floating or mixed-dtype inputs.
        ValueError: Wrong ranks, mismatched B or d, mixed devices, or an
            impl that does not run on the inputs' device.
        RuntimeError: A compiled impl was asked for but is not built.

    Example:
        >>> x, y = torch.randn(2, 100, 32), torch.randn(2, 49, 32)
        >>> laplace_kernel(x, y).shape
        torch.Size([2, 100, 49])
    """
    autocast = isinstance(x, torch.Tensor) and autocast_enabled(x.device)
    _check_inputs(x, y, autocast)
    kernel = resolve_impl(_OP, impl, x.device)

    out_dtype: Optional[torch.dtype] = None
    if autocast:
        dtype = compute_dtype(x.dtype, y.dtype)
    elif x.dtype in _LOW_PRECISION and kernel != 'cuda':
        # CUDA kernels read fp16/bf16 natively; elsewhere compute in fp32.
        dtype, out_dtype = torch.float32, x.dtype
    else:
        dtype = x.dtype
    x = x.to(dtype).contiguous()
    y = y.to(dtype).contiguous()
    with autocast_disabled(x.device):
        if impl == 'pytorch':
            # torch.compile cannot trace a Function given one tensor twice
            # (the landmark matrix k(q~, q~)); a view is another tensor.
            out = LaplaceKernelReference.apply(
                x, y if y is not x else y.view_as(y))
        else:
            out = OPS.laplace_kernel(x, y)
    return out if out_dtype is None else out.to(out_dtype)


def laplace_kernel_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """:func:`laplace_kernel` computed by the pure-PyTorch reference.

    Same contract as ``laplace_kernel(x, y, impl='pytorch')``.
    """
    return laplace_kernel(x, y, impl='pytorch')
