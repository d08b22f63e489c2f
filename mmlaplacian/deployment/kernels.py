"""The Laplacian kernel as standard ONNX operators, in two graph forms.

``'per-feature'`` is the PyTorch reference: ``|x_c - y_c|`` accumulated one
feature at a time over the whole ``(..., N, M)`` matrix (``3d`` full-size
passes, about ``5d`` nodes per kernel matrix). It works with symbolic sizes.

``'chunked'`` splits the N tokens into a fixed number of chunks, known when
the graph is built, and computes each chunk's ``|x_i - y_j|`` over all
features at once, ``(..., d, Nc, M)``, reduced over ``d`` by ``ReduceSum``.
The chunk is sized to a fixed element budget, so the largest temporary is
bounded whatever N is, stays near the cache, and the graph has a handful of
nodes per chunk instead of ``5d`` per kernel. It needs static sizes: the
chunk count is unrolled, there is no data-dependent control flow.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch

LAPLACE_GRAPHS = ('chunked', 'per-feature')
# Elements of one chunk's (..., d, Nc, M) difference tensor: 1M fp32 = 4 MiB,
# within a server L3 and small next to the (N, M) output at detection sizes.
# 4x smaller budgets made 4x more nodes and ran slower in onnxruntime, and
# 4x larger ones ran slower too (docs/deployment.md).
CHUNK_ELEMENTS = 2**20


def chunk_tokens(x: torch.Tensor,
                 y: torch.Tensor,
                 max_elements: int = CHUNK_ELEMENTS) -> int:
    """Tokens of ``x`` per chunk so that ``(..., d, Nc, M)`` holds at most
    ``max_elements`` elements (at least one token)."""
    per_token = math.prod(x.shape[:-2]) * y.shape[-2] * x.shape[-1]
    return max(1, max_elements // max(1, per_token))


def laplace_kernel_chunked(x: torch.Tensor,
                           y: torch.Tensor,
                           max_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """``K[..., i, j] = exp(-sum_c |x[..., i, c] - y[..., j, c]|)`` over
    chunks of the tokens of ``x``.

    Args:
        x (Tensor): ``(..., N, d)``, static sizes.
        y (Tensor): ``(..., M, d)``, the same leading dims.
        max_elements (int): Budget of one chunk's ``(..., d, Nc, M)``
            difference tensor.

    Returns:
        Tensor: ``(..., N, M)``.
    """
    step = chunk_tokens(x, y, max_elements)
    # Features first, (..., d, Nc, M): ReduceSum then adds d contiguous
    # (Nc, M) planes, which onnxruntime vectorises; reducing a last axis of
    # d = 32 was 9% slower in our measurement.
    y_t = y.transpose(-1, -2).unsqueeze(-2)  # (..., d, 1, M)
    x_t = x.transpose(-1, -2).unsqueeze(-1)  # (..., d, N, 1)
    # One split node for all chunks, one Exp over the (..., N, M) result.
    dists = [(part - y_t).abs().sum(-3) for part in x_t.split(step, dim=-2)]
    dist = dists[0] if len(dists) == 1 else torch.cat(dists, dim=-2)
    return torch.exp(-dist)


def _export_kernel_matrix(original, max_elements: int):
    """``kernel_matrix`` whose Laplacian kernel is :func:
    `laplace_kernel_chunked` when the sizes are static (plain ints); other
    kernels and symbolic sizes take ``original``."""

    def kernel_matrix(a: torch.Tensor,
                      b: torch.Tensor,
                      kernel: str = 'laplacian',
                      impl: str = 'auto') -> torch.Tensor:
        static = all(isinstance(s, int) for s in (*a.shape, *b.shape))
        if kernel != 'laplacian' or not static:
            return original(a, b, kernel, impl)
        # The fused op's dtype rule: half precision computes in fp32.
        dtype = torch.promote_types(a.dtype, torch.float32)
        out = laplace_kernel_chunked(a.to(dtype), b.to(dtype), max_elements)
        return out.to(a.dtype)

    return kernel_matrix


@contextmanager
def laplace_graph(form: str = 'chunked',
                  max_elements: int = CHUNK_ELEMENTS) -> Iterator[None]:
    """Build LaplacianAttention's kernel matrices in graph form ``form``
    (see the module docstring) for the duration.

    ``'chunked'`` replaces the ``kernel_matrix`` that LaplacianAttention
    calls; eager code outside the context is untouched. ``'per-feature'``
    changes nothing (the references of :func:`export.reference_ops`).

    Raises:
        ValueError: ``form`` is not in :data:`LAPLACE_GRAPHS`.
    """
    if form not in LAPLACE_GRAPHS:
        raise ValueError(f'Laplacian kernel graph must be one of '
                         f'{LAPLACE_GRAPHS}, got {form!r}')
    if form == 'per-feature':
        yield
        return
    from mmlaplacian.models.layers import laplacian_attention
    original = laplacian_attention.kernel_matrix
    laplacian_attention.kernel_matrix = _export_kernel_matrix(
        original, max_elements)
    try:
        yield
    finally:
        laplacian_attention.kernel_matrix = original
