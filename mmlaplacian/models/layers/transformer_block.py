"""Pre-norm transformer block used in every LaplacianFormer stage."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
from .chunking import DEFAULT_CHUNK_TOKENS, ChunkedForms, token_spans
from .ffn import FFN, DropPath
from .laplacian_attention import LaplacianAttention
from .softmax_attention import SoftmaxAttention

ATTENTIONS = {'laplacian': LaplacianAttention, 'softmax': SoftmaxAttention}


class LaplacianFormerBlock(ChunkedForms, nn.Module):
    """``x + DropPath(Attn(LN(x))) ; x + DropPath(FFN(LN(x)))``.

    The feed-forward half is :class:`~.ffn.FFN` (Linear-GELU-Dropout-
    Linear-Dropout, identity added after its DropPath); the attention is
    :class:`LaplacianAttention` or :class:`SoftmaxAttention`, which share one
    ``forward(x, hw_shape, identity)`` signature.

    Its chunked form (``mode``, see
    :mod:`~mmlaplacian.models.layers.chunking`) lets the attention add the
    residual itself (no extra N×C tensor) and runs the FFN half over chunks
    of ``chunk_tokens`` tokens, updating the block's own tensor in place.
    With DropPath active (training) the full form runs: it drops a whole
    sample's branch.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        mlp_ratio (float): Hidden/embed ratio of the FFN. Defaults to 4.
        attention (str): ``'laplacian'`` (linear) or ``'softmax'``.
        attn_cfg (dict, optional): Extra keyword arguments for
            :class:`LaplacianAttention` (kernel, lam, num_landmarks, ...).
        drop_path (float): Stochastic-depth rate of this block.
        drop (float): Dropout rate in the FFN and projections.
        mode (str): ``'auto'``, ``'full'`` or ``'chunked'``, for the block
            and its Laplacian attention. Defaults to ``'auto'``.
        chunk_tokens (int): Tokens per chunk. Defaults to 2048.

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
                 drop: float = 0.,
                 mode: str = 'auto',
                 chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> None:
        super().__init__()
        self.set_mode(mode, chunk_tokens)
        if attention not in ATTENTIONS:
            raise ValueError(f'attention must be one of {sorted(ATTENTIONS)}'
                             f', got {attention!r}')
        if attention == 'softmax' and attn_cfg:
            raise ValueError('attn_cfg configures the Laplacian attention; '
                             f'softmax attention takes none, got {attn_cfg}')
        self.norm1 = nn.LayerNorm(embed_dims)
        if attention == 'laplacian':
            attn_cfg = {
                'mode': mode,
                'chunk_tokens': chunk_tokens,
                **(attn_cfg or {})
            }
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
            RuntimeError: In ``'chunked'`` mode with autograd enabled.
        """
        # DropPath drops a whole sample's branch: it has no chunked form.
        drop_path_active = self.training and self.drop_path.drop_prob > 0
        if drop_path_active or not self.runs_chunked(x, x.shape[1]):
            x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
            return self.ffn(self.norm2(x), identity=x)
        x = self.attn(self.norm1(x), hw_shape, identity=x)
        # x is now this block's own tensor, and nothing records gradients.
        for start, end in token_spans(x.shape[1], self.chunk_tokens):
            part = x[:, start:end]
            x[:, start:end] = self.ffn(self.norm2(part), identity=part)
        return x
