"""Convolutional stem: three conv-BN-ReLU layers, full or in bands of rows."""
from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .chunking import ChunkedForms
from .conv_bn import ConvBNReLU, fold_batchnorm

# Output rows per band: the 32-channel intermediate bands of a 1600x2688
# image stay near 6 MB each, well inside a CPU's L3.
STEM_BAND_ROWS = 16


class ConvStem(ChunkedForms, nn.Sequential):
    """Stride-4 stem: conv s2 (→32), conv (32→32), conv s2 (32→C1).

    Each conv is followed by BatchNorm and ReLU (:class:`ConvBNReLU`). The
    output is channels-last, the ``(B, H, W, C)`` layout of the tokens, so
    stage 1 reads its tokens as a view.

    Its chunked form (``mode``, see
    :mod:`~mmlaplacian.models.layers.chunking`) runs in bands of
    ``band_rows`` output rows, each band through all three convs with
    BatchNorm folded in: the two full-resolution intermediate maps never
    exist, and each band's work stays in cache. The bands read overlapping
    input rows, so the result is the full form's. With BatchNorm in training
    mode the full form runs.

    Args:
        in_channels (int): Image channels.
        out_channels (int): C1, the first stage's channels.
        mid_channels (int): Width of the first two convs. Defaults to 32.
        mode (str): ``'auto'``, ``'full'`` or ``'chunked'``. Defaults to
            ``'auto'``.

    Attributes:
        band_rows (int): Output rows per band of the chunked form.
    """
    band_rows: int = STEM_BAND_ROWS

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 mid_channels: int = 32,
                 mode: str = 'auto') -> None:
        super().__init__(
            ConvBNReLU(in_channels, mid_channels, 2, mode),
            ConvBNReLU(mid_channels, mid_channels, 1, mode),
            ConvBNReLU(mid_channels, out_channels, 2, mode))
        self.set_mode(mode)

    @property
    def in_channels(self) -> int:
        return self[0].conv.in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` images (any memory layout) to the stride-4
        map ``(B, C1, ⌈H/4⌉, ⌈W/4⌉)``, channels-last.

        Raises:
            RuntimeError: In ``'chunked'`` mode with autograd enabled.
        """
        heights = self._map_sizes(x.shape[2])
        if self.runs_chunked(x, heights[-1], self.band_rows):
            layers = [fold_batchnorm(layer) for layer in self]
            if all(folded is not None for folded in layers):
                return self._banded(x, heights, layers)
        return super().forward(x.contiguous(memory_format=torch.channels_last))

    def _map_sizes(self, size: int) -> List[int]:
        """Sizes along one axis: the input's, then after each conv."""
        sizes = [size]
        for layer in self:
            sizes.append((sizes[-1] - 1) // layer.conv.stride[0] + 1)
        return sizes

    def _banded(self, x: torch.Tensor, heights: List[int],
                layers: List[Tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        """The chunked form, with the folded ``(weight, bias)`` per layer."""
        strides = [layer.conv.stride[0] for layer in self]
        out = torch.empty(
            x.shape[0], layers[-1][0].shape[0], heights[-1],
            self._map_sizes(x.shape[3])[-1],
            dtype=x.dtype, memory_format=torch.channels_last)
        step = self.band_rows if self.band_rows > 0 else heights[-1]
        for top in range(0, heights[-1], step):
            bottom = min(top + step, heights[-1])
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
