"""Token-chunked inference: spans and mergeable column statistics.

At detection resolution a stage-1 tensor (268,800 tokens at 1600×2688) is
far larger than the CPU's last-level cache, so every elementwise pass over
it runs at DRAM speed. Without autograd the per-token work can run over
chunks of tokens that stay in cache; only small per-chunk summaries (sums,
moments, ``Kᵀ V``) cross chunks. GPUs keep the one-pass path.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Tuple

import torch

# Tokens per chunk: a stage-1 chunk's similarities (2 heads x 49 landmarks)
# and a stage-1 MLP chunk's hidden activations stay within ~2 MB.
DEFAULT_CHUNK_TOKENS = 2048


def token_spans(num_tokens: int, chunk: int) -> Iterator[Tuple[int, int]]:
    """``(start, end)`` of consecutive chunks covering ``range(num_tokens)``.

    Args:
        num_tokens (int): Tokens to cover.
        chunk (int): Tokens per chunk; ``<= 0`` means one chunk.
    """
    if chunk <= 0:
        chunk = max(num_tokens, 1)
    for start in range(0, num_tokens, chunk):
        yield start, min(start + chunk, num_tokens)


def cpu_inference_active(tensor: torch.Tensor) -> bool:
    """Whether the CPU-inference layer may take over for ``tensor``.

    Only without autograd (chunks would not save activations), only on the
    CPU (a GPU wants few large kernels, and its caches are not the limit),
    and never while the model is traced, compiled or exported: those see the
    plain path, whose graph does not depend on the input size.
    """
    return (not torch.is_grad_enabled() and tensor.device.type == 'cpu'
            and not _tracing())


def use_chunks(tokens: torch.Tensor, chunk: int) -> bool:
    """Whether a pass over ``tokens (B, N, C)`` should run in chunks: the
    layer is active and there is more than one chunk."""
    return 0 < chunk < tokens.shape[1] and cpu_inference_active(tokens)


def _tracing() -> bool:
    compiler = getattr(torch, 'compiler', None)
    return (torch.jit.is_tracing() or torch.jit.is_scripting()
            or torch.onnx.is_in_onnx_export()
            or bool(compiler and compiler.is_compiling()))


class ColumnMoments(NamedTuple):
    """Count, mean and sum of squared deviations along dim -2.

    Merged across chunks with Chan et al.'s pairwise update, which keeps the
    accuracy of a two-pass variance (no ``E[x²] − E[x]²`` cancellation).
    """
    count: int
    mean: torch.Tensor
    m2: torch.Tensor

    @classmethod
    def of(cls, values: torch.Tensor) -> 'ColumnMoments':
        """Moments of ``values (..., n, m)`` over its ``n`` rows."""
        mean = values.mean(dim=-2, keepdim=True)
        m2 = (values - mean).square().sum(dim=-2, keepdim=True)
        return cls(values.shape[-2], mean, m2)

    def merge(self, other: Optional['ColumnMoments']) -> 'ColumnMoments':
        """Moments of the union of both row sets."""
        if other is None:
            return self
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.m2 + other.m2 + delta.square() * (
            self.count * other.count / count)
        return ColumnMoments(count, mean, m2)

    @property
    def var(self) -> torch.Tensor:
        """Population variance (divides by the row count)."""
        return self.m2 / self.count
