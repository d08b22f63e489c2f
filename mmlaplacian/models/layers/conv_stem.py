"""Convolutional stem and stage transitions."""
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# Output rows per stem band in CPU inference: the 32-channel intermediate
# bands of a 1600x2688 image stay near 6 MB each, well inside a CPU's L3.
STEM_BAND_ROWS = 16


class ConvBNReLU(nn.Sequential):
    """3x3 conv (no bias, padding 1) + BatchNorm + ReLU.

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

    @property
    def stride(self) -> int:
        return self[0].stride[0]

    def folded(self) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """``(weight, bias)`` of the conv with BN folded in, or None when
        BN normalises with batch statistics (or a trace should see BN: FLOP
        counters count it as usual and exporters fold it themselves)."""
        conv, norm = self[0], self[1]
        if (norm.training or norm.running_var is None
                or torch.jit.is_tracing()):
            return None
        scale = norm.weight * torch.rsqrt(norm.running_var + norm.eps)
        bias = norm.bias - norm.running_mean * scale
        weight = conv.weight * scale.to(conv.weight.dtype)[:, None, None,
                                                           None]
        return weight, bias.to(conv.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        folded = self.folded()
        if folded is None:
            return super().forward(x)
        out = F.conv2d(x, *folded, self.stride, 1)
        return F.relu(out, inplace=True)


def _conv_rows(band: torch.Tensor, band_top: int, in_height: int,
               weight: torch.Tensor, bias: torch.Tensor, stride: int,
               top: int, bottom: int) -> torch.Tensor:
    """Output rows ``[top, bottom)`` of a 3x3, padding-1 conv + ReLU.

    ``band`` holds input rows ``[band_top, band_top + band.shape[2])`` of a
    map ``in_height`` rows high, at least the rows those outputs read; the
    zero padding is added only at the map's own top and bottom edges.
    """
    first, end = top * stride - 1, (bottom - 1) * stride + 2
    rows = band[:, :, max(first, 0) - band_top:min(end, in_height) - band_top]
    rows = F.pad(rows, (0, 0, max(0, -first), max(0, end - in_height)))
    rows = rows.contiguous(memory_format=torch.channels_last)
    return F.relu(F.conv2d(rows, weight, bias, stride, (0, 1)), inplace=True)


class ConvStem(nn.Sequential):
    """Stride-4 stem: conv s2 (→32), conv (32→32), conv s2 (32→C1).

    On the CPU without autograd (and with BN folded), the stem runs in bands
    of ``inference_band_rows`` output rows, each band through all three
    convs: the two full-resolution intermediate maps (137 MB each at
    1600×2688) never exist, and each band's work stays in cache. The bands
    read overlapping input rows, so the result is the same as the one-pass
    stem's.

    Args:
        in_channels (int): Image channels.
        out_channels (int): C1, the first stage's channels.
        mid_channels (int): Width of the first two convs. Defaults to 32.
        inference_band_rows (int): Output rows per band in CPU inference;
            0 runs the convs one after the other. Defaults to
            :data:`STEM_BAND_ROWS`.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 mid_channels: int = 32,
                 inference_band_rows: int = STEM_BAND_ROWS) -> None:
        super().__init__(
            ConvBNReLU(in_channels, mid_channels, 2),
            ConvBNReLU(mid_channels, mid_channels, 1),
            ConvBNReLU(mid_channels, out_channels, 2))
        self.inference_band_rows = inference_band_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` images (any memory layout) to the stride-4
        map, channels-last: the stage-1 tokens are a view of it."""
        heights = self._map_sizes(x.shape[2])
        layers = None
        if (not torch.is_grad_enabled() and x.device.type == 'cpu'
                and 0 < self.inference_band_rows < heights[-1]):
            layers = [layer.folded() for layer in self]
        if layers is None or any(folded is None for folded in layers):
            return super().forward(
                x.contiguous(memory_format=torch.channels_last))
        return self._banded(x, heights, layers)  # converts each band's rows

    def _map_sizes(self, size: int) -> List[int]:
        """Sizes along one axis: the input's, then after each conv."""
        sizes = [size]
        for layer in self:
            sizes.append((sizes[-1] - 1) // layer.stride + 1)
        return sizes

    def _banded(self, x: torch.Tensor, heights: List[int],
                layers: List[Tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        strides = [layer.stride for layer in self]
        out = torch.empty(
            x.shape[0], layers[-1][0].shape[0], heights[-1],
            self._map_sizes(x.shape[3])[-1],
            dtype=x.dtype, memory_format=torch.channels_last)
        for top in range(0, heights[-1], self.inference_band_rows):
            bottom = min(top + self.inference_band_rows, heights[-1])
            # Rows each map must provide, from the output back to the input.
            spans = [(top, bottom)]
            for level in range(len(strides) - 1, 0, -1):
                first, end = spans[0]
                stride = strides[level]
                spans.insert(0, (max(first * stride - 1, 0),
                                 min((end - 1) * stride + 2, heights[level])))
            band, band_top = x, 0
            for level, (weight, bias) in enumerate(layers):
                first, end = spans[level]
                band = _conv_rows(band, band_top, heights[level], weight,
                                  bias, strides[level], first, end)
                band_top = first
            out[:, :, top:bottom] = band
        return out
