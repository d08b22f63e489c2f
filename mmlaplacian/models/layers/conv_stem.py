"""Convolutional stem and stage transitions."""
import torch.nn as nn


def conv_bn_relu(in_channels: int, out_channels: int,
                 stride: int) -> nn.Sequential:
    """3x3 conv (no bias) + BatchNorm + ReLU."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False),
        nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True))


class ConvStem(nn.Sequential):
    """Stride-4 stem: conv s2 (→32), conv (32→32), conv s2 (32→C1).

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
