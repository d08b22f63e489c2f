"""Comparison of exported outputs with PyTorch: feature maps, and
postprocessed detections against mmdet's own ``inference_detector``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import numpy as np
import torch
import torch.nn as nn

from mmlaplacian.deployment import Detections
from mmlaplacian.deployment.export import FEATURE_RTOL

# Feature maps (fp32) pass when max |ORT - PyTorch| / max(1, max |PyTorch|)
# is at most FEATURE_RTOL.
# Detections: matched boxes may differ by this many pixels, scores by this
# much; a matched mask's pixels may disagree at this fraction of its area.
BOX_ATOL = 0.05
SCORE_ATOL = 1e-3
MASK_DISAGREEMENT = 0.02
# Detections matched across runtimes: the same label and IoU >= this.
MATCH_IOU = 0.9
# Share of the PyTorch detections that must have a match. Near-ties in a
# top-k or an IoU at the NMS threshold may flip under float rounding.
MIN_MATCHED = 0.95


@dataclass
class FeatureComparison:
    """Per-output max abs differences and the pass/fail verdict."""
    max_abs: List[float]
    max_ref: List[float]
    relative: float
    ok: bool

    def lines(self, names: Sequence[str]) -> List[str]:
        out = []
        for name, diff, ref in zip(names, self.max_abs, self.max_ref):
            out.append(f'{name}: max |ORT - PyTorch| = {diff:.3g} '
                       f'(max |PyTorch| = {ref:.3g})')
        out.append(f'relative {self.relative:.3g} (tolerance {FEATURE_RTOL})'
                   f' -> {"OK" if self.ok else "FAIL"}')
        return out


def compare_features(ort_outputs: Sequence[np.ndarray],
                     torch_outputs: Sequence[torch.Tensor],
                     rtol: float = FEATURE_RTOL) -> FeatureComparison:
    """Max abs difference of each feature map, relative to the largest
    reference magnitude (at least 1)."""
    if len(ort_outputs) != len(torch_outputs):
        raise ValueError(f'{len(ort_outputs)} ONNX outputs against '
                         f'{len(torch_outputs)} PyTorch outputs')
    diffs, refs = [], []
    for got, ref in zip(ort_outputs, torch_outputs):
        ref = ref.detach().cpu().float().numpy()
        if got.shape != ref.shape:
            raise ValueError(f'output shape {got.shape} from onnxruntime, '
                             f'{ref.shape} from PyTorch')
        diffs.append(float(np.abs(got - ref).max()))
        refs.append(float(np.abs(ref).max()))
    relative = max(d / max(1.0, r) for d, r in zip(diffs, refs))
    return FeatureComparison(diffs, refs, relative, relative <= rtol)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    top_left = np.maximum(box[:2], boxes[:, :2])
    bottom_right = np.minimum(box[2:], boxes[:, 2:])
    inter = np.clip(bottom_right - top_left, 0, None).prod(1)
    area = (box[2:] - box[:2]).prod()
    areas = (boxes[:, 2:] - boxes[:, :2]).prod(1)
    return inter / np.maximum(area + areas - inter, 1e-9)


@dataclass
class DetectionComparison:
    """Agreement of two runtimes' detections on one or more images."""
    num_torch: int = 0
    num_ort: int = 0
    matched: int = 0
    max_box: float = 0.
    max_score: float = 0.
    mask_disagreement: float = 0.
    mask_ious: List[float] = field(default_factory=list)

    @property
    def matched_share(self) -> float:
        """Share of the detections matched across the runtimes; 0 when
        neither found any, as nothing was then compared."""
        most = max(self.num_torch, self.num_ort)
        return self.matched / most if most else 0.

    @property
    def ok(self) -> bool:
        return (self.matched_share >= MIN_MATCHED and self.max_box <= BOX_ATOL
                and self.max_score <= SCORE_ATOL
                and self.mask_disagreement <= MASK_DISAGREEMENT)

    def merge(self, other: 'DetectionComparison') -> 'DetectionComparison':
        return DetectionComparison(
            self.num_torch + other.num_torch, self.num_ort + other.num_ort,
            self.matched + other.matched, max(self.max_box, other.max_box),
            max(self.max_score, other.max_score),
            max(self.mask_disagreement,
                other.mask_disagreement), self.mask_ious + other.mask_ious)

    def summary(self) -> Dict[str, float]:
        out = dict(torch_dets=self.num_torch,
                   ort_dets=self.num_ort,
                   matched=self.matched,
                   matched_share=round(self.matched_share, 4),
                   max_box_diff_px=self.max_box,
                   max_score_diff=self.max_score)
        if self.mask_ious:
            out.update(max_mask_pixel_disagreement=self.mask_disagreement,
                       min_mask_iou=min(self.mask_ious),
                       mean_mask_iou=float(np.mean(self.mask_ious)))
        return out

    def lines(self) -> List[str]:
        out = [
            f'{k}: {v:.4g}' if isinstance(v, float) else f'{k}: {v}'
            for k, v in self.summary().items()
        ]
        out.append(
            f'tolerances: matched >= {MIN_MATCHED}, box <= {BOX_ATOL} px, '
            f'score <= {SCORE_ATOL}, mask pixels <= {MASK_DISAGREEMENT} '
            f'-> {"OK" if self.ok else "FAIL"}')
        return out


def compare_detections(ort: Detections,
                       ref: Detections) -> DetectionComparison:
    """Match each PyTorch detection (in score order) to the unmatched ORT
    detection of the same label with the highest IoU (>= ``MATCH_IOU``),
    and take the largest differences over the matched pairs."""
    result = DetectionComparison(num_torch=len(ref.scores),
                                 num_ort=len(ort.scores))
    used = np.zeros(len(ort.scores), dtype=bool)
    for i in np.argsort(-ref.scores, kind='stable'):
        candidates = np.flatnonzero((ort.labels == ref.labels[i]) & ~used)
        if len(candidates) == 0:
            continue
        ious = _iou(ref.boxes[i], ort.boxes[candidates])
        best = int(np.argmax(ious))
        if ious[best] < MATCH_IOU:
            continue
        j = candidates[best]
        used[j] = True
        result.matched += 1
        result.max_box = max(result.max_box,
                             float(np.abs(ort.boxes[j] - ref.boxes[i]).max()))
        result.max_score = max(result.max_score,
                               float(abs(ort.scores[j] - ref.scores[i])))
        if ref.masks is not None and ort.masks is not None:
            a, b = ref.masks[i], ort.masks[j]
            union = np.logical_or(a, b).sum()
            differ = np.logical_xor(a, b).sum()
            result.mask_ious.append(
                float(1 - differ / union) if union else 1.0)
            result.mask_disagreement = max(result.mask_disagreement,
                                           float(differ / max(1, a.sum())))
    return result


def mmdet_reference(detector: nn.Module, image: torch.Tensor) -> Detections:
    """mmdet's ``inference_detector`` on the pixels the graph sees.

    ``image`` is ``(1, 3, H, W)``, pixel values as the pipeline loads them.
    The test pipeline is replaced by one that keeps the image as it is (a
    resize to its own size sets ``scale_factor`` 1), so both runtimes see
    the same input and report boxes in its pixels.
    """
    from mmcv.transforms import Compose
    from mmdet.apis import inference_detector

    height, width = image.shape[-2:]
    pipeline = Compose([
        dict(type='mmdet.LoadImageFromNDArray'),
        dict(type='mmdet.Resize', scale=(width, height), keep_ratio=False),
        dict(type='mmdet.PackDetInputs',
             meta_keys=('img_id', 'img_shape', 'ori_shape', 'scale_factor'))
    ])
    pixels = image[0].permute(1, 2, 0).contiguous().numpy()
    result = inference_detector(detector, pixels, test_pipeline=pipeline)
    return Detections.from_instances(result.pred_instances)
