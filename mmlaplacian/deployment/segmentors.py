"""Export-time forward pass of an mmseg encoder-decoder segmentor.

mmseg's ``predict`` takes data samples and returns them; a graph takes and
returns tensors. :class:`SegmentorForExport` runs the same trained modules
(backbone, neck, decode head) on one image tensor and returns the class
logits at the input's size, as mmseg's ``predict_by_feat`` resizes them
(whole-image inference, ``test_cfg.mode='whole'``). The contract:

* input ``image``: ``(1, 3, H, W)`` float, pixel values as the config's
  pipeline loads them (mmcv: BGR, 0-255); the graph flips the channels and
  normalises as the data preprocessor does.
* output ``logits``: ``(1, num_classes, H, W)``; ``argmax(1)`` is the
  label map (for a one-channel binary head, ``sigmoid > threshold``).

H and W should be what the pipeline gives (no test-time padding is
applied: the data preprocessor pads only in training for these configs).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .detectors import _Normalize
from .unsupported import ExportUnsupportedError


class SegmentorForExport(nn.Module):
    """An mmseg ``EncoderDecoder`` as ``image -> logits``.

    Args:
        segmentor (nn.Module): A built mmseg ``EncoderDecoder`` (e.g. from
            ``mmseg.apis.init_model``), in eval mode.

    Raises:
        ExportUnsupportedError: For another segmentor type, or a test mode
            other than whole-image inference.
    """
    output_names = ('logits', )

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        kind = type(segmentor).__name__
        head = getattr(segmentor, 'decode_head', None)
        if (not isinstance(head, nn.Module) or isinstance(head, nn.ModuleList)
                or not hasattr(segmentor, 'extract_feat')):
            raise ExportUnsupportedError(
                f'{kind}: the export path supports mmseg encoder-decoder '
                'segmentors with one decode head (EncoderDecoder)')
        mode = (segmentor.test_cfg or {}).get('mode', 'whole')
        if mode != 'whole':
            raise ExportUnsupportedError(
                f"{kind}: test_cfg.mode={mode!r}; the export path runs "
                "whole-image inference (test_cfg.mode='whole')")
        self.normalize = _Normalize(segmentor.data_preprocessor)
        self.segmentor = segmentor
        self.align_corners = bool(segmentor.decode_head.align_corners)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        feats = self.segmentor.extract_feat(self.normalize(image))
        logits = self.segmentor.decode_head(feats)
        return F.interpolate(logits, size=image.shape[2:], mode='bilinear',
                             align_corners=self.align_corners)
