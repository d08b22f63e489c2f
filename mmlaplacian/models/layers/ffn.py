"""The blocks' feed-forward half and stochastic depth (DropPath)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn


class DropPath(nn.Module):
    """Stochastic depth: zero a whole sample's branch with probability p.

    In training, ``x ↦ x / (1 − p) · b`` with ``b ~ Bernoulli(1 − p)`` per
    sample, drawn as ``floor(1 − p + U[0, 1))`` (mmcv's and timm's
    ``drop_path``, so seeded runs draw the same masks); the identity in eval
    mode or when ``p = 0``.

    Args:
        drop_prob (float): p. Defaults to 0.1.
    """

    def __init__(self, drop_prob: float = 0.1) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, ...)`` → the same shape."""
        if self.drop_prob == 0. or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        shape = (x.shape[0], ) + (1, ) * (x.ndim - 1)
        mask = (keep_prob +
                torch.rand(shape, dtype=x.dtype, device=x.device)).floor()
        return x.div(keep_prob) * mask

    def extra_repr(self) -> str:
        return f'drop_prob={self.drop_prob}'


class FFN(nn.Module):
    """``identity + DropPath(Dropout(W2 · Dropout(GELU(W1 · x))))``.

    Parameter names (``layers.0.0.*`` for W1, ``layers.1.*`` for W2) are
    those of mmcv's ``FFN`` with ``num_fcs=2``, so checkpoints load as they
    are.

    Args:
        embed_dims (int): Channels C.
        feedforward_channels (int): Hidden channels.
        ffn_drop (float): Dropout after the activation and after W2.
            Defaults to 0.
        drop_path (float): DropPath rate of the branch. Defaults to 0.

    Example:
        >>> ffn = FFN(64, 256)
        >>> ffn(torch.rand(2, 10, 64)).shape
        torch.Size([2, 10, 64])
    """

    def __init__(self,
                 embed_dims: int,
                 feedforward_channels: int,
                 ffn_drop: float = 0.,
                 drop_path: float = 0.) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Sequential(
                nn.Linear(embed_dims, feedforward_channels), nn.GELU(),
                nn.Dropout(ffn_drop)),
            nn.Linear(feedforward_channels, embed_dims), nn.Dropout(ffn_drop))
        self.dropout_layer = DropPath(drop_path)

    def forward(self,
                x: torch.Tensor,
                identity: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(..., C)`` → ``(..., C)``; ``identity`` defaults to ``x``."""
        return (x if identity is None else identity) + self.dropout_layer(
            self.layers(x))
