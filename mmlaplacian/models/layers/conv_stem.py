"""Convolutional stem and stage transitions."""
from __future__ import annotations

import torch
import torch.nn as nn
from mmcv.cnn import ConvModule


def conv_bn_relu(in_channels: int, out_channels: int,
                 stride: int) -> ConvModule:
    """3x3 conv (no bias, padding 1) + BatchNorm + ReLU, mmcv's brick."""
    return ConvModule(
        in_channels,
        out_channels,
        3,
        stride=stride,
        padding=1,
        norm_cfg=dict(type='BN'),
        act_cfg=dict(type='ReLU'))


class ConvStem(nn.Sequential):
    """Stride-4 stem: conv s2 (→32), conv (32→32), conv s2 (32→C1).

    Each conv is followed by BatchNorm and ReLU. The output is channels-last,
    the ``(B, H, W, C)`` layout of the tokens, so stage 1 reads its tokens as
    a view.

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
            conv_bn_relu(in_channels, mid_channels, 2),
            conv_bn_relu(mid_channels, mid_channels, 1),
            conv_bn_relu(mid_channels, out_channels, 2))

    @property
    def in_channels(self) -> int:
        return self[0].conv.in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` images (any memory layout) to the stride-4
        map, channels-last."""
        return super().forward(x.contiguous(memory_format=torch.channels_last))
