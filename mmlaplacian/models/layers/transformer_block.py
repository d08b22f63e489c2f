"""Pre-norm transformer block used in every LaplacianFormer stage."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn

from .chunking import token_spans
from .ffn import FFN, DropPath
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention

ATTENTIONS = {'laplacian': LaplacianAttention, 'softmax': SoftmaxAttention}


class LaplacianFormerBlock(nn.Module):
    """``x + DropPath(Attn(LN(x))) ; x + DropPath(FFN(LN(x)))``.

    The feed-forward half is :class:`~.ffn.FFN` (Linear-GELU-Dropout-
    Linear-Dropout, identity added after its DropPath); the attention is
    :class:`LaplacianAttention` or :class:`SoftmaxAttention`, which share one
    ``forward(x, hw_shape)`` signature.

    Whenever its Laplacian attention takes the chunked form (its ``mode``),
    the block is chunked too: the attention adds the residual itself (no
    extra N×C tensor), and the FFN half runs over the attention's chunks of
    tokens, in place, so its N×(ratio·C) hidden activations exist one chunk
    at a time. With DropPath active (training) the block runs whole: it
    drops a whole sample's branch.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        mlp_ratio (float): Hidden/embed ratio of the FFN. Defaults to 4.
        attention (str): ``'laplacian'`` (linear) or ``'softmax'``.
        attn_cfg (dict, optional): Extra keyword arguments for
            :class:`LaplacianAttention` (kernel, lam, num_landmarks, ...).
        drop_path (float): Stochastic-depth rate of this block.
        drop (float): Dropout rate in the FFN and projections.

    Raises:
        ValueError: For an unknown attention, or ``attn_cfg`` with softmax
            attention.
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
            ffn_drop=drop,
            drop_path=drop_path)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``(B, N, C)`` tokens of an ``H × W`` grid → ``(B, N, C)``.

        Raises:
            RuntimeError: When the attention's mode is ``'chunked'`` and
                autograd is enabled.
        """
        if not self._runs_chunked(x):
            x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
            return self.ffn(self.norm2(x), identity=x)
        x = self.attn(self.norm1(x), hw_shape, identity=x)
        # x is now this block's own tensor, and nothing records gradients.
        for start, end in token_spans(x.shape[1], self.attn.chunk_tokens):
            part = x[:, start:end]
            x[:, start:end] = self.ffn(self.norm2(part), identity=part)
        return x

    def _runs_chunked(self, x: torch.Tensor) -> bool:
        """Whether the attention runs chunked and no DropPath is active."""
        drop_path_active = self.training and self.drop_path.drop_prob > 0
        return (isinstance(self.attn, LaplacianAttention)
                and not drop_path_active and self.attn.runs_chunked(x))
