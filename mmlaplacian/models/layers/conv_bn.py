"""3x3 conv → BatchNorm → ReLU: the stem's and the stage transitions' brick."""
from __future__ import annotations

import torch
import torch.nn as nn


class ConvBNReLU(nn.Module):
    """``ReLU(BN(conv3x3(x)))``.

    Parameter names (``conv.weight``, ``bn.*``) and initialisation (PyTorch's
    default, then Kaiming-normal fan-out on the conv, BN at weight 1 and
    bias 0) are those of mmcv's ``ConvModule`` with ``norm_cfg=dict(
    type='BN')``, so checkpoints load and seeded builds draw the same
    weights.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        stride (int): Conv stride. Defaults to 1.

    Example:
        >>> layer = ConvBNReLU(3, 32, stride=2)
        >>> layer(torch.rand(1, 3, 64, 48)).shape
        torch.Size([1, 32, 32, 24])
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.activate = nn.ReLU(inplace=True)
        nn.init.kaiming_normal_(
            self.conv.weight, mode='fan_out', nonlinearity='relu')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` → ``(B, C_out, ⌈H/s⌉, ⌈W/s⌉)``."""
        return self.activate(self.bn(self.conv(x)))
