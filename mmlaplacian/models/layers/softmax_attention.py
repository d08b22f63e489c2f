"""Softmax multi-head self-attention for the last stage."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class SoftmaxAttention(nn.Module):
    """Multi-head softmax attention through ``F.scaled_dot_product_attention``.

    Used in stage 4, where the grid is small; the fused SDPA kernels keep
    memory linear in the tokens. Not mmcv's ``MultiheadAttention``: that
    wraps ``nn.MultiheadAttention`` (sequence-first layout, an N×N weight
    matrix in eager mode, ``in_proj_*`` keys), where SDPA is fused and the
    one ``qkv`` projection keeps SOFT-style checkpoints loadable.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        qkv_bias (bool): Bias in the qkv projection. Defaults to True.
        attn_drop (float): Attention-probability dropout (training only).
        proj_drop (float): Dropout after the output projection.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.) -> None:
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f'SoftmaxAttention: embed_dims ({embed_dims}) must be divisible '
                             f'by num_heads ({num_heads})')
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        """Attend over ``x (B, N, C)``, the signature of
        :class:`LaplacianAttention`; ``hw_shape`` is unused (softmax
        attention needs no grid)."""
        batch, num_tokens, channels = x.shape
        qkv = self.qkv(x).reshape(batch, num_tokens, 3, self.num_heads, -1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0.)
        out = out.transpose(1, 2).reshape(batch, num_tokens, channels)
        return self.proj_drop(self.proj(out))
