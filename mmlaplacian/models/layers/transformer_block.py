"""Pre-norm transformer block used in every LaplacianFormer stage."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn

from .drop_path import DropPath
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention


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
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 mlp_ratio: float = 4.,
                 attention: str = 'laplacian',
                 attn_cfg: Optional[dict] = None,
                 drop_path: float = 0.,
                 drop: float = 0.) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dims)
        if attention == 'laplacian':
            self.attn = LaplacianAttention(
                embed_dims, num_heads, proj_drop=drop, **(attn_cfg or {}))
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
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
        return x + self.drop_path(self.mlp(self.norm2(x)))
