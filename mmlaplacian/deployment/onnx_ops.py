"""Operators of the export path that map onto standard ONNX operators.

``nms_keep_mask`` is a torch custom op: eagerly it runs torchvision's NMS,
and in an exported graph it becomes ONNX ``NonMaxSuppression`` followed by a
scatter into a mask. Returning a mask of fixed length (instead of the kept
indices, whose count depends on the data) keeps every shape in the exported
graph a function of the input size only, so no data-dependent size reaches
the rest of the graph. RoI Align needs no custom op: ``torchvision.ops.
roi_align`` exports to ONNX ``RoiAlign`` (``half_pixel`` when aligned).
"""
from __future__ import annotations

from typing import Callable, Dict

import torch

# Boxes whose score is below this value take no part in the suppression:
# callers mark invalid boxes with a negative score (valid scores are
# probabilities, >= 0).
IGNORE_SCORE_BELOW = -0.5


@torch.library.custom_op('mmlaplacian::nms_keep_mask', mutates_args=())
def nms_keep_mask(boxes: torch.Tensor, scores: torch.Tensor,
                  iou_threshold: float) -> torch.Tensor:
    """Greedy NMS as a keep mask.

    Boxes are suppressed by a higher-scoring kept box when their IoU with it
    is greater than ``iou_threshold`` (mmcv's and ONNX's rule). Boxes with a
    negative score are ignored: they are never kept and suppress nothing.

    Args:
        boxes (Tensor): ``(N, 4)`` as ``x1, y1, x2, y2``.
        scores (Tensor): ``(N,)``.
        iou_threshold (float): IoU above which a box is suppressed.

    Returns:
        Tensor: ``(N,)`` bool, True for the kept boxes.
    """
    keep = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    candidates = torch.nonzero(scores >= IGNORE_SCORE_BELOW).squeeze(1)
    if candidates.numel() > 0:
        import torchvision  # only detectors need it
        kept = torchvision.ops.nms(boxes[candidates].float(),
                                   scores[candidates].float(), iou_threshold)
        keep[candidates[kept]] = True
    return keep


@nms_keep_mask.register_fake
def _nms_keep_mask_fake(boxes: torch.Tensor, scores: torch.Tensor,
                        iou_threshold: float) -> torch.Tensor:
    return torch.empty(scores.shape, dtype=torch.bool, device=scores.device)


def _nms_keep_mask_onnx(boxes, scores, iou_threshold: float):
    """ONNX: ``NonMaxSuppression`` (one batch, one class), then a scatter of
    the selected indices into a boolean mask of length N."""
    from onnxscript import opset18 as op
    from onnxscript.onnx_types import BOOL, FLOAT

    batched_boxes = op.Unsqueeze(boxes, op.Constant(value_ints=[0]))
    batched_scores = op.Unsqueeze(scores, op.Constant(value_ints=[0, 1]))
    num_boxes = op.Shape(scores)
    selected = op.NonMaxSuppression(
        batched_boxes, batched_scores, num_boxes,
        op.Constant(value_float=float(iou_threshold)),
        op.Constant(value_float=IGNORE_SCORE_BELOW))
    box_index = op.Reshape(
        op.Slice(selected, op.Constant(value_ints=[2]),
                 op.Constant(value_ints=[3]), op.Constant(value_ints=[1])),
        op.Constant(value_ints=[-1]))
    zeros = op.ConstantOfShape(num_boxes,
                               value=_scalar_tensor(0.0, FLOAT.dtype))
    ones = op.Expand(op.Constant(value_float=1.0), op.Shape(box_index))
    mask = op.ScatterElements(zeros, box_index, ones, axis=0)
    return op.Cast(mask, to=BOOL.dtype)


def _scalar_tensor(value: float, dtype: int):
    import onnx
    return onnx.helper.make_tensor('value', dtype, [1], [value])


def _sym_sqrt_onnx(value):
    """ONNX: ``Sqrt`` of a shape value (the landmark grid of a symbolic
    feature-map size), which the stock translation table lacks."""
    from onnxscript import opset18 as op
    return op.Sqrt(value)


def onnx_translation_table() -> Dict[Callable, Callable]:
    """``custom_translation_table`` for ``torch.onnx.export(dynamo=True)``."""
    return {
        torch.ops.mmlaplacian.nms_keep_mask.default: _nms_keep_mask_onnx,
        torch._sym_sqrt: _sym_sqrt_onnx,
    }
