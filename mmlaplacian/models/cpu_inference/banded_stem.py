"""The conv stem run in bands of output rows (CPU inference)."""
from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F

from ..layers.conv_stem import ConvStem
from .folded_conv import folded_conv_bn
from .token_chunks import cpu_inference_active

# Output rows per band: the 32-channel intermediate bands of a 1600x2688
# image stay near 6 MB each, well inside a CPU's L3.
STEM_BAND_ROWS = 16


class BandedConvStem(ConvStem):
    """:class:`ConvStem` that, in CPU inference with BatchNorm folded, runs
    in bands of ``band_rows`` output rows, each band through all three convs:
    the two full-resolution intermediate maps (137 MB each at 1600×2688)
    never exist, and each band's work stays in cache. The bands read
    overlapping input rows, so the result is the one-pass stem's.

    Attributes:
        band_rows (int): Output rows per band.
    """
    band_rows: int = STEM_BAND_ROWS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heights = self._map_sizes(x.shape[2])
        if cpu_inference_active(x) and 0 < self.band_rows < heights[-1]:
            layers = [folded_conv_bn(layer) for layer in self]
            if all(folded is not None for folded in layers):
                return self._banded(x, heights, layers)
        return super().forward(x)

    def _map_sizes(self, size: int) -> List[int]:
        """Sizes along one axis: the input's, then after each conv."""
        sizes = [size]
        for layer in self:
            sizes.append((sizes[-1] - 1) // layer.conv.stride[0] + 1)
        return sizes

    def _banded(self, x: torch.Tensor, heights: List[int],
                layers: List[Tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        strides = [layer.conv.stride[0] for layer in self]
        out = torch.empty(
            x.shape[0], layers[-1][0].shape[0], heights[-1],
            self._map_sizes(x.shape[3])[-1],
            dtype=x.dtype, memory_format=torch.channels_last)
        for top in range(0, heights[-1], self.band_rows):
            bottom = min(top + self.band_rows, heights[-1])
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
