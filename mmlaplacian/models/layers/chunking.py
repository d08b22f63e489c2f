"""Chunks of tokens, and column moments merged across them.

The chunked form of :class:`~.laplacian_attention.LaplacianAttention` (and
of the block around it) runs over consecutive chunks of tokens; only small
per-chunk summaries (sums, moments, ``Kᵀ V``) cross chunks.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Tuple

import torch


def token_spans(num_tokens: int, chunk: int) -> Iterator[Tuple[int, int]]:
    """``(start, end)`` of consecutive chunks covering ``range(num_tokens)``.

    Args:
        num_tokens (int): Tokens to cover.
        chunk (int): Tokens per chunk, at least 1.
    """
    for start in range(0, num_tokens, chunk):
        yield start, min(start + chunk, num_tokens)


class ColumnMoments(NamedTuple):
    """Count, mean and sum of squared deviations along dim -2.

    Merged across chunks with Chan et al.'s pairwise update
    ``μ = μa + δ·nb/n``, ``M2 = M2a + M2b + δ²·na·nb/n`` (``δ = μb − μa``),
    which keeps the accuracy of a two-pass variance (no ``E[x²] − E[x]²``
    cancellation).
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
