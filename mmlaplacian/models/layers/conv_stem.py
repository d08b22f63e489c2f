"""Convolutional stem and stage transitions."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBNReLU(nn.Sequential):
    """3x3 conv (no bias) + BatchNorm + ReLU.

    When the BatchNorm uses its running statistics (eval mode, or frozen by
    ``norm_eval``), it is folded into the conv for the call: one pass over
    the (large, early) feature map instead of three. Training mode (and
    tracing) runs the three modules in turn.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        stride (int): Conv stride.
    """

    def __init__(self, in_channels: int, out_channels: int,
                 stride: int) -> None:
        super().__init__(
            nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv, norm = self[0], self[1]
        # Traces (FLOP counters, exporters) see the plain modules: BN is
        # counted as usual and exporters fold it themselves.
        if (norm.training or norm.running_var is None
                or torch.jit.is_tracing()):
            return super().forward(x)
        scale = norm.weight * torch.rsqrt(norm.running_var + norm.eps)
        bias = norm.bias - norm.running_mean * scale
        weight = conv.weight * scale.to(conv.weight.dtype)[:, None, None,
                                                           None]
        out = F.conv2d(x, weight, bias.to(conv.weight.dtype), conv.stride,
                       conv.padding)
        return F.relu(out, inplace=True)


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
            ConvBNReLU(in_channels, mid_channels, 2),
            ConvBNReLU(mid_channels, mid_channels, 1),
            ConvBNReLU(mid_channels, out_channels, 2))
