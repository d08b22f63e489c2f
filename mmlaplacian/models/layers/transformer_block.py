"""Pre-norm transformer block used in every LaplacianFormer stage."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn

from .drop_path import DropPath
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention
from .token_chunks import DEFAULT_CHUNK_TOKENS, token_spans, use_chunks


class Mlp(nn.Module):
    """Two-layer feed-forward network with GELU.

    Args:
        embed_dims (int): Input and output channels.
        hidden_dims (int): Hidden channels.
        drop (float): Dropout after each linear layer.
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 drop: float = 0.) -> None:
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class LaplacianFormerBlock(nn.Module):
    """``x + DropPath(Attn(LN(x))) ; x + DropPath(MLP(LN(x)))``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        mlp_ratio (float): Hidden/embed ratio of the MLP. Defaults to 4.
        attention (str): ``'laplacian'`` (linear) or ``'softmax'``.
        attn_cfg (dict, optional): Extra keyword arguments for
            :class:`LaplacianAttention` (kernel, lam, num_landmarks, ...).
        drop_path (float): Stochastic-depth rate of this block.
        drop (float): Dropout rate in the MLP and projections.
        inference_chunk_tokens (int): On the CPU without autograd, the MLP
            half (and the Laplacian attention, unless ``attn_cfg`` says
            otherwise) runs over chunks of this many tokens so its
            intermediates stay in cache; 0 disables. Defaults to 2048.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 mlp_ratio: float = 4.,
                 attention: str = 'laplacian',
                 attn_cfg: Optional[dict] = None,
                 drop_path: float = 0.,
                 drop: float = 0.,
                 inference_chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> None:
        super().__init__()
        self.inference_chunk_tokens = inference_chunk_tokens
        self.norm1 = nn.LayerNorm(embed_dims)
        if attention == 'laplacian':
            attn_cfg = dict(
                dict(inference_chunk_tokens=inference_chunk_tokens),
                **(attn_cfg or {}))
            self.attn = LaplacianAttention(
                embed_dims, num_heads, proj_drop=drop, **attn_cfg)
        elif attention == 'softmax':
            self.attn = SoftmaxAttention(embed_dims, num_heads, proj_drop=drop)
        else:
            raise ValueError("attention must be 'laplacian' or 'softmax', "
                             f'got {attention!r}')
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.mlp = Mlp(embed_dims, int(embed_dims * mlp_ratio), drop)

    def forward(self, x: torch.Tensor, hw_shape: Tuple[int,
                                                        int]) -> torch.Tensor:
        # DropPath drops a whole sample's branch: not chunkable when active.
        drop_path_active = self.drop_path.training and self.drop_path.drop_prob
        if drop_path_active or not use_chunks(
                x, self.inference_chunk_tokens):
            x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
            return x + self.drop_path(self.mlp(self.norm2(x)))
        # The attention adds the residual chunk by chunk (no extra N×C
        # tensor); SoftmaxAttention's SDPA is one call, so it adds it after.
        if isinstance(self.attn, LaplacianAttention):
            x = self.attn(self.norm1(x), hw_shape, identity=x)
        else:
            x = x + self.attn(self.norm1(x), hw_shape)
        # No autograd, and x is this block's own tensor: update it in place.
        for start, end in token_spans(x.shape[1],
                                      self.inference_chunk_tokens):
            part = x[:, start:end]
            part += self.mlp(self.norm2(part))
        return x
