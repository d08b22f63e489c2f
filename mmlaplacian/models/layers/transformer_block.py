"""Pre-norm transformer block used in every LaplacianFormer stage."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN

from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention

ATTENTIONS = {'laplacian': LaplacianAttention, 'softmax': SoftmaxAttention}


class LaplacianFormerBlock(nn.Module):
    """``x + DropPath(Attn(LN(x))) ; x + DropPath(FFN(LN(x)))``.

    The feed-forward half is mmcv's :class:`FFN` (Linear-GELU-Dropout-
    Linear-Dropout, identity added after its DropPath); the attention is
    :class:`LaplacianAttention` or :class:`SoftmaxAttention`, which share one
    ``forward(x, hw_shape, identity)`` signature.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        mlp_ratio (float): Hidden/embed ratio of the FFN. Defaults to 4.
        attention (str): ``'laplacian'`` (linear) or ``'softmax'``.
        attn_cfg (dict, optional): Extra keyword arguments for
            :class:`LaplacianAttention` (kernel, lam, num_landmarks, ...).
        drop_path (float): Stochastic-depth rate of this block.
        drop (float): Dropout rate in the FFN and projections.
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
        if attention not in ATTENTIONS:
            raise ValueError(f'attention must be one of {sorted(ATTENTIONS)}'
                             f', got {attention!r}')
        if attention == 'softmax' and attn_cfg:
            raise ValueError('attn_cfg configures the Laplacian attention; '
                             f'softmax attention takes none, got {attn_cfg}')
        self.norm1 = nn.LayerNorm(embed_dims)
        self.attn = ATTENTIONS[attention](
            embed_dims, num_heads, proj_drop=drop, **(attn_cfg or {}))
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.ffn = FFN(
            embed_dims,
            int(embed_dims * mlp_ratio),
            act_cfg=dict(type='GELU'),
            ffn_drop=drop,
            dropout_layer=dict(type='DropPath', drop_prob=drop_path))

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
        return self.ffn(self.norm2(x), identity=x)
