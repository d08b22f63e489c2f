"""Standard-operator forms of the fused ops, for exporters.

An exported program (``torch.export``) holds the operators
``mmlaplacian::laplace_kernel`` and ``mmlaplacian::newton_schulz_inverse``.
Runtimes without our kernels (stock onnxruntime, ExecuTorch) need them as
standard operators: :func:`export_decompositions` gives the table that
``ExportedProgram.run_decompositions`` takes to rewrite them.

The Laplacian kernel has two graph forms:

``'per-feature'`` is the PyTorch reference: ``|x_c - y_c|`` accumulated one
feature at a time over the whole ``(B, N, M)`` matrix (``3d`` full-size
passes, about ``5d`` nodes per kernel matrix). It works with symbolic sizes.

``'row-blocks'`` splits the N rows of K (the tokens of x) into a fixed
number of blocks, known when the graph is built, and computes each block's
``|x_i - y_j|`` over all features at once, ``(B, d, Nb, M)``, reduced over
``d``. A block is sized to a fixed element budget, so the largest temporary
is bounded whatever N is and the graph has a handful of nodes per block
instead of ``5d`` per kernel. It needs static sizes (the block count is
unrolled).

``'auto'`` takes ``'row-blocks'`` where the sizes are static and
``'per-feature'`` where they are symbolic. Newton–Schulz has one form: its
fixed number of batched matrix products.

``feature_sum`` says how ``'row-blocks'`` adds the ``d`` features:
``'reduce'`` with a sum, which onnxruntime vectorises; ``'matmul'`` as a
product with a column of ones, for XNNPACK, which has no sum: a sum there
falls back to ExecuTorch's portable kernel, a single-threaded loop that took
a quarter of the Tiny backbone's time, while the product runs in XNNPACK's
GEMM. The ones must reach the lowering as a constant (ExecuTorch's
``constant_prop_pass``).

The forms are deliberately not registered in torch's global table of
decompositions (``torch._decomp.decomposition_table``): Inductor refuses to
fall back to an operator that has one there when the ``CI`` environment
variable is set, as it is on most CI services. Exporters pass
:func:`export_decompositions` to ``ExportedProgram.run_decompositions``
instead.
"""
from __future__ import annotations

import math
from typing import Callable, Dict

import torch

from .reference import newton_schulz_forward_reference

LAPLACE_FORMS = ('auto', 'row-blocks', 'per-feature')
FEATURE_SUMS = ('reduce', 'matmul')
# Elements of one block's (B, d, Nb, M) difference tensor: 1M fp32 = 4 MiB,
# within a server L3 and small next to the (N, M) output at detection sizes.
BLOCK_ELEMENTS = 2**20


def block_rows(x: torch.Tensor,
               y: torch.Tensor,
               max_elements: int = BLOCK_ELEMENTS) -> int:
    """Rows of K (tokens of ``x``) per block so that ``(..., d, Nb, M)``
    holds at most ``max_elements`` elements (at least one row)."""
    per_row = math.prod(x.shape[:-2]) * y.shape[-2] * x.shape[-1]
    return max(1, max_elements // max(1, per_row))


def laplace_kernel_row_blocks(x: torch.Tensor,
                              y: torch.Tensor,
                              max_elements: int = BLOCK_ELEMENTS,
                              feature_sum: str = 'reduce') -> torch.Tensor:
    """``K[..., i, j] = exp(-sum_c |x[..., i, c] - y[..., j, c]|)`` over
    blocks of rows (tokens of ``x``).

    Args:
        x (Tensor): ``(..., N, d)``, static sizes.
        y (Tensor): ``(..., M, d)``, the same leading dims.
        max_elements (int): Budget of one block's ``(..., d, Nb, M)``
            difference tensor.
        feature_sum (str): ``'reduce'`` or ``'matmul'`` (module docstring).

    Returns:
        Tensor: ``(..., N, M)``.
    """
    step = block_rows(x, y, max_elements)
    if feature_sum == 'matmul':
        # Features last, (..., Nb, M, d), times a (d, 1) column of ones.
        # Views rather than (un)squeezes: XNNPACK takes views as reshapes,
        # (un)squeezes would run as portable copies between its subgraphs.
        ones = torch.ones(x.shape[-1], 1, dtype=x.dtype, device=x.device)
        y_rows = y.view(*y.shape[:-2], 1, *y.shape[-2:])  # (..., 1, M, d)
        dists = []
        for part in x.split(step, dim=-2):
            rows = part.view(*part.shape[:-1], 1, part.shape[-1])
            dist = (rows - y_rows).abs() @ ones  # (..., Nb, M, 1)
            dists.append(dist.view(dist.shape[:-1]))
    else:
        # Features first, (..., d, Nb, M): the reduction then adds d
        # contiguous (Nb, M) planes, which onnxruntime vectorises.
        y_t = y.transpose(-1, -2).unsqueeze(-2)  # (..., d, 1, M)
        x_t = x.transpose(-1, -2).unsqueeze(-1)  # (..., d, N, 1)
        dists = [(part - y_t).abs().sum(-3)
                 for part in x_t.split(step, dim=-2)]
    # One split for all blocks, one exp over the (..., N, M) result.
    dist = dists[0] if len(dists) == 1 else torch.cat(dists, dim=-2)
    return torch.exp(-dist)


def laplace_kernel_per_feature(x: torch.Tensor,
                               y: torch.Tensor) -> torch.Tensor:
    """The reference's arithmetic (``|x_c - y_c|`` summed one feature at a
    time, in the same order) without in-place ops, which decompositions
    must not contain. Works with symbolic sizes.

    Args:
        x (Tensor): ``(B, N, d)``.
        y (Tensor): ``(B, M, d)``.

    Returns:
        Tensor: ``(B, N, M)``.
    """
    dist = (x[:, :, 0, None] - y[:, None, :, 0]).abs()
    for c in range(1, x.shape[2]):
        dist = dist + (x[:, :, c, None] - y[:, None, :, c]).abs()
    return torch.exp(-dist)


def _is_static(*tensors: torch.Tensor) -> bool:
    return all(isinstance(s, int) for t in tensors for s in t.shape)


def laplace_kernel_form(form: str = 'auto',
                        max_elements: int = BLOCK_ELEMENTS,
                        feature_sum: str = 'reduce') -> Callable:
    """The Laplacian kernel ``(x, y) -> K`` in graph form ``form``.

    Raises:
        ValueError: ``form`` is not in :data:`LAPLACE_FORMS`,
            ``feature_sum`` not in :data:`FEATURE_SUMS`, or
            ``max_elements`` is not a positive integer.
    """
    if form not in LAPLACE_FORMS:
        raise ValueError(f'Laplacian kernel graph form must be one of '
                         f'{LAPLACE_FORMS}, got {form!r}')
    if feature_sum not in FEATURE_SUMS:
        raise ValueError(f'Laplacian kernel feature sum must be one of '
                         f'{FEATURE_SUMS}, got {feature_sum!r}')
    if isinstance(max_elements, bool) or not isinstance(
            max_elements, int) or max_elements < 1:
        raise ValueError(f'the Laplacian kernel\'s block budget '
                         f'(max_elements / block_elements) must be a '
                         f'positive integer, got {max_elements!r}')

    def laplace_kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        blocked = form == 'row-blocks' or (form == 'auto' and
                                           _is_static(x, y))
        if not blocked:
            return laplace_kernel_per_feature(x, y)
        if not _is_static(x, y):
            raise ValueError(
                "the 'row-blocks' Laplacian kernel needs static sizes (its "
                "block count is fixed in the graph); use 'per-feature' or "
                "'auto' with dynamic shapes")
        return laplace_kernel_row_blocks(x, y, max_elements, feature_sum)

    return laplace_kernel


def export_decompositions(laplace: str = 'auto',
                          max_elements: int = BLOCK_ELEMENTS,
                          feature_sum: str = 'reduce') -> Dict:
    """Decomposition table that rewrites our operators into standard ones.

    Args:
        laplace (str): Graph form of the Laplacian kernel (module docstring).
        max_elements (int): Element budget of one block of ``'row-blocks'``.
        feature_sum (str): How ``'row-blocks'`` adds the features:
            ``'reduce'`` or ``'matmul'`` (module docstring).

    Returns:
        dict: ``{operator overload: function}`` for
        ``ExportedProgram.run_decompositions``; merge it into
        ``torch.export.default_decompositions()`` to decompose everything.

    Example:
        >>> ep = torch.export.export(model, (image, ))  # doctest: +SKIP
        >>> ep = ep.run_decompositions(export_decompositions())  # doctest: +SKIP
    """
    return {
        torch.ops.mmlaplacian.laplace_kernel.default:
        laplace_kernel_form(laplace, max_elements, feature_sum),
        torch.ops.mmlaplacian.newton_schulz_inverse.default:
        newton_schulz_forward_reference,
    }
