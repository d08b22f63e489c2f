"""Laplacian attention computed over chunks of tokens (CPU inference)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..layers.laplacian_attention import LaplacianAttention
from .token_chunks import (DEFAULT_CHUNK_TOKENS, ColumnMoments, token_spans,
                           use_chunks)


class ChunkedLaplacianAttention(LaplacianAttention):
    """:class:`LaplacianAttention` in two passes over chunks of tokens.

    Pass 1 gathers ``Kkᵀ V``, the sum of V and the column moments of ``Kq``
    chunk by chunk; pass 2 recomputes each chunk's similarities and writes
    its output and residual. The N×m matrices never exist and each pass
    works in cache, which keeps the time linear at detection resolution.
    Outputs equal the plain path's to float rounding; with autograd, on
    other devices or while tracing it *is* the plain path.

    Attributes:
        chunk_tokens (int): Tokens per chunk.
    """
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS

    def forward(self,
                x: torch.Tensor,
                hw_shape: Tuple[int, int],
                identity: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not use_chunks(x, self.chunk_tokens):
            return super().forward(x, hw_shape, identity)
        self._check_grid(x, hw_shape)
        num_tokens = x.shape[1]
        q, k, v = self._project(x)
        q_land, k_land = self._landmarks(q, k, hw_shape)
        inverse = self._landmark_inverse(q_land, k_land)
        spans = list(token_spans(num_tokens, self.chunk_tokens))

        kv, v_sum, moments = 0, 0, None
        for start, end in spans:
            sim_q = self._similarity(q[:, start:end], k_land)
            sim_k = sim_q if self.share_qk else self._similarity(
                k[:, start:end], q_land)
            v_part = self._split_heads(v[:, start:end]).to(sim_k.dtype)
            kv = kv + sim_k.transpose(-1, -2) @ v_part
            v_sum = v_sum + v_part.sum(dim=-2, keepdim=True)
            if self.feature_map == 'whiten':
                moments = ColumnMoments.of(sim_q).merge(moments)
        context = inverse.to(kv.dtype) @ (kv / num_tokens)
        mean, var = (None, None) if moments is None else (moments.mean,
                                                          moments.var)
        weights, bias = self._readout(context, v_sum / num_tokens, mean, var)

        local = None if self.dwconv is None else self._local_context(
            v, hw_shape)
        out = x.new_empty(x.shape)
        for start, end in spans:
            part = self._output(
                self._similarity(q[:, start:end], k_land), weights, bias,
                x.dtype)
            if local is not None:
                part += local[:, start:end]
            part = self.proj_drop(self.proj(part))
            if identity is not None:
                part += identity[:, start:end]
            out[:, start:end] = part
        return out
