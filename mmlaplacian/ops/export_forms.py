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

- ``'reduce'``: ``|x - y|`` and a sum, which onnxruntime vectorises;
- ``'matmul'``: ``|x - y|`` and a product with a column of ones, for
  XNNPACK, which has no sum: a sum there falls back to ExecuTorch's
  portable kernel, a single-threaded loop that took a quarter of the Tiny
  backbone's time, while the product runs in XNNPACK's GEMM;
- ``'max-matmul'``: ``|a - b| = 2 max(a, b) - a - b``, so the block's
  distances are ``2 sum_c max(x_c, y_c) - sum_c x_c - sum_c y_c``: one
  element-wise operator over the ``(..., Nb, M, d)`` block (``maximum``)
  instead of two (subtract, abs), then the same product. The sums of x
  and y cost a pass over ``(..., N, d)`` and ``(..., M, d)`` only. Both are
  first centred on the landmarks' mean, which leaves every distance as it
  is and keeps the three terms near the size of the distance, so float32
  loses no more to their cancellation than to the other forms' rounding.

The constant columns must reach the lowering as constants (ExecuTorch's
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
from typing import Callable, Dict, List

import torch

from .reference import newton_schulz_forward_reference

LAPLACE_FORMS = ('auto', 'row-blocks', 'per-feature')
FEATURE_SUMS = ('reduce', 'matmul', 'max-matmul')
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
        feature_sum (str): One of :data:`FEATURE_SUMS` (module docstring).

    Returns:
        Tensor: ``(..., N, M)``.
    """
    step = block_rows(x, y, max_elements)
    if feature_sum == 'reduce':
        # Features first, (..., d, Nb, M): the reduction then adds d
        # contiguous (Nb, M) planes, which onnxruntime vectorises.
        y_t = y.transpose(-1, -2).unsqueeze(-2)  # (..., d, 1, M)
        x_t = x.transpose(-1, -2).unsqueeze(-1)  # (..., d, N, 1)
        dists = [(part - y_t).abs().sum(-3)
                 for part in x_t.split(step, dim=-2)]
    else:
        dists = _row_block_distances_by_products(
            x, y, step, max_identity=feature_sum == 'max-matmul')
    # One split for all blocks, one exp over the (..., N, M) result.
    dist = dists[0] if len(dists) == 1 else torch.cat(dists, dim=-2)
    return torch.exp(-dist)


def _column(x: torch.Tensor, value: float) -> torch.Tensor:
    """A ``(d, 1)`` column of ``value`` for the features of ``x``."""
    return torch.full((x.shape[-1], 1), value, dtype=x.dtype,
                      device=x.device)


def _row_block_distances_by_products(x: torch.Tensor, y: torch.Tensor,
                                     step: int,
                                     max_identity: bool) -> List[torch.Tensor]:
    """``sum_c |x_c - y_c|`` per block of ``step`` rows, ``(..., Nb, M)``
    each, the features added by a product with a constant column: the
    ``'matmul'`` and ``'max-matmul'`` forms (module docstring)."""
    if max_identity:
        center = y.mean(dim=-2, keepdim=True)
        x, y = x - center, y - center
    # Views rather than (un)squeezes: XNNPACK takes views as reshapes,
    # (un)squeezes would run as portable copies between its subgraphs.
    y_rows = y.view(*y.shape[:-2], 1, *y.shape[-2:])  # (..., 1, M, d)
    column = _column(x, 2. if max_identity else 1.)
    dists = []
    for part in x.split(step, dim=-2):
        rows = part.view(*part.shape[:-1], 1, part.shape[-1])
        features = (torch.maximum(rows, y_rows) if max_identity else
                    (rows - y_rows).abs())  # (..., Nb, M, d)
        dist = features @ column  # (..., Nb, M, 1)
        dists.append(dist.view(dist.shape[:-1]))
    if not max_identity:
        return dists
    # 2 sum_c max(x_c, y_c) less the sums of the rows' and landmarks'
    # features, block by block, so that the blocks' cat still joins
    # distances.
    ones = _column(x, 1.)
    x_sums = (x @ ones).split(step, dim=-2)  # (..., Nb, 1) each
    y_sums = (y @ ones).view(*y.shape[:-2], 1, y.shape[-2])  # (..., 1, M)
    return [dist - x_sum - y_sums for dist, x_sum in zip(dists, x_sums)]


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
        feature_sum (str): How ``'row-blocks'`` adds the features, one
            of :data:`FEATURE_SUMS` (module docstring).

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
