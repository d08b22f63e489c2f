"""Box arithmetic of mmdet's postprocessing, written for export.

Each function matches its mmdet counterpart on the same inputs but keeps
every shape a function of the input size: filters become masks (invalid
entries get a negative score) instead of boolean indexing, and counts
become ``torch.sym_min`` of sizes, so one graph serves every input size.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch

from .onnx_ops import nms_keep_mask

# Score of entries that were filtered out (valid scores are in [0, 1]).
INVALID_SCORE = -1.0


def top_k(scores: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``min(k, N)`` highest scores of a 1-D tensor and their indices,
    sorted descending; ``k <= 0`` keeps all."""
    count = scores.shape[0]
    if k > 0:
        count = torch.sym_min(count, k)
    return scores.topk(count)


def decode_deltas(priors: torch.Tensor,
                  deltas: torch.Tensor,
                  means: Sequence[float],
                  stds: Sequence[float],
                  image_hw: Tuple[int, int],
                  wh_ratio_clip: float = 16 / 1000) -> torch.Tensor:
    """mmdet's ``delta2bbox`` (``DeltaXYWHBBoxCoder.decode``), clipped.

    Args:
        priors (Tensor): ``(N, 4)`` anchors or proposals.
        deltas (Tensor): ``(N, 4 * C)``, one box per class when C > 1.
        means, stds (sequence[float]): The coder's normalisation.
        image_hw (tuple): Image height and width to clip to.
        wh_ratio_clip (float): The coder's limit on the size change.

    Returns:
        Tensor: ``(N, 4 * C)`` boxes ``x1, y1, x2, y2``.
    """
    num_boxes = deltas.shape[0]
    deltas = deltas.reshape(num_boxes, -1, 4)
    deltas = deltas * deltas.new_tensor(stds) + deltas.new_tensor(means)
    centers = ((priors[:, :2] + priors[:, 2:]) * 0.5)[:, None]
    sizes = (priors[:, 2:] - priors[:, :2])[:, None]
    max_ratio = abs(math.log(wh_ratio_clip))
    new_centers = centers + sizes * deltas[..., :2]
    new_sizes = sizes * deltas[..., 2:].clamp(-max_ratio, max_ratio).exp()
    top_left = new_centers - new_sizes * 0.5
    bottom_right = new_centers + new_sizes * 0.5
    height, width = image_hw
    # Tensors built from the sizes: under dynamic export they stay symbolic.
    limits = torch.stack([
        torch.scalar_tensor(size, dtype=priors.dtype, device=priors.device)
        for size in (width, height)
    ])
    top_left = torch.minimum(top_left.clamp_min(0), limits)
    bottom_right = torch.minimum(bottom_right.clamp_min(0), limits)
    return torch.cat([top_left, bottom_right], dim=-1).reshape(num_boxes, -1)


def batched_nms_keep(boxes: torch.Tensor, scores: torch.Tensor,
                     group_ids: torch.Tensor, valid: torch.Tensor,
                     iou_threshold: float) -> torch.Tensor:
    """mmcv's ``batched_nms`` over the valid boxes, as a keep mask.

    Boxes of different groups (classes, pyramid levels) never suppress each
    other: as in mmcv, each group is shifted by ``id * (max coordinate + 1)``
    where the maximum runs over the valid boxes.

    Args:
        boxes (Tensor): ``(N, 4)``.
        scores (Tensor): ``(N,)`` in [0, 1].
        group_ids (Tensor): ``(N,)`` integer group of each box.
        valid (Tensor): ``(N,)`` bool; invalid boxes are ignored.
        iou_threshold (float): IoU above which a box is suppressed.

    Returns:
        Tensor: ``(N,)`` bool, True for the kept boxes (always valid).
    """
    max_coordinate = torch.where(valid[:, None], boxes,
                                 torch.zeros_like(boxes)).max()
    offsets = group_ids.to(boxes.dtype) * (max_coordinate + 1)
    shifted = boxes + offsets[:, None]
    masked_scores = torch.where(valid, scores,
                                torch.full_like(scores, INVALID_SCORE))
    return nms_keep_mask(shifted, masked_scores, float(iou_threshold))


def select_top(scores: torch.Tensor, keep: torch.Tensor,
               max_num: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``max_num`` best kept entries, sorted; the slots beyond the kept
    count hold ``INVALID_SCORE``."""
    masked = torch.where(keep, scores, torch.full_like(scores, INVALID_SCORE))
    return top_k(masked, max_num)


def roi_align_levels(features: Sequence[torch.Tensor], rois: torch.Tensor,
                     levels: torch.Tensor, output_size: Tuple[int, int],
                     spatial_scales: Sequence[float], sampling_ratio: int,
                     aligned: bool) -> torch.Tensor:
    """RoI Align of each RoI on its own pyramid level (mmdet's
    ``SingleRoIExtractor``), with fixed shapes.

    Every level pools every RoI, but the RoIs of other levels are replaced
    by an empty box there, so their (discarded) adaptive sampling costs one
    sample per bin instead of thousands.

    Args:
        features (sequence[Tensor]): ``(1, C, H_l, W_l)`` per level.
        rois (Tensor): ``(K, 5)`` as ``batch index, x1, y1, x2, y2``.
        levels (Tensor): ``(K,)`` level of each RoI.
        output_size (tuple[int, int]): Pooled height and width.
        spatial_scales (sequence[float]): ``1 / stride`` of each level.
        sampling_ratio (int): Samples per bin; 0 is adaptive.
        aligned (bool): Half-pixel alignment (mmcv's ``aligned=True``).

    Returns:
        Tensor: ``(K, C, *output_size)``.
    """
    out = None
    import torchvision  # only detectors need it: not at package import
    for index, (feature, scale) in enumerate(zip(features, spatial_scales)):
        on_level = (levels == index)[:, None]
        level_rois = torch.where(on_level, rois, torch.zeros_like(rois))
        pooled = torchvision.ops.roi_align(feature,
                                           level_rois,
                                           output_size,
                                           spatial_scale=scale,
                                           sampling_ratio=sampling_ratio,
                                           aligned=aligned)
        on_level = on_level[:, :, None, None]
        out = pooled * on_level if out is None else torch.where(
            on_level, pooled, out)
    return out
