"""Convolutional stem: three conv-BN-ReLU layers to stride 4."""
from __future__ import annotations

import torch
import torch.nn as nn

from .conv_bn import ConvBNReLU


class ConvStem(nn.Sequential):
    """Stride-4 stem: conv s2 (→32), conv (32→32), conv s2 (32→C1).

    Each conv is followed by BatchNorm and ReLU (:class:`ConvBNReLU`). The
    output is channels-last, the ``(B, H, W, C)`` layout of the tokens, so
    stage 1 reads its tokens as a view.

    Args:
        in_channels (int): Image channels.
        out_channels (int): C1, the first stage's channels.
        mid_channels (int): Width of the first two convs. Defaults to 32.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 mid_channels: int = 32) -> None:
        super().__init__(
            ConvBNReLU(in_channels, mid_channels, 2),
            ConvBNReLU(mid_channels, mid_channels, 1),
            ConvBNReLU(mid_channels, out_channels, 2))

    @property
    def in_channels(self) -> int:
        return self[0].conv.in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` images (any memory layout) to the stride-4
        map ``(B, C1, ⌈H/4⌉, ⌈W/4⌉)``, channels-last."""
        return super().forward(x.contiguous(memory_format=torch.channels_last))
