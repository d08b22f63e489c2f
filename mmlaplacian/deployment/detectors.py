"""Export-time forward passes of mmdet detectors, ending in postprocessing.

mmdet's eager postprocessing filters with boolean indexing, loops over the
RoIs of each pyramid level and calls mmcv's compiled NMS and RoI Align,
none of which a graph exporter can record. The modules here run the same
trained submodules (backbone, neck, heads) and redo the postprocessing with
:mod:`.box_ops`, which lowers to standard ONNX operators (``TopK``,
``NonMaxSuppression``, ``RoiAlign``, ``Gather``...).

Each detector is written as stages: the dense part (:class:`DenseStage`:
normalisation, backbone, neck, dense head), the RoI heads of a two-stage
detector, and the box arithmetic between them. ``detect`` runs the stages
in order and takes the networks as callables, so one flow serves both
deployments: ``forward`` passes the modules and becomes one ONNX graph;
:class:`~mmlaplacian.deployment.executorch_runner.ExecuTorchDetector`
passes ExecuTorch programs and runs the box arithmetic, NMS and RoI Align
on the host. The ONNX contract:

* input ``image``: ``(1, 3, H, W)`` float, pixel values as the config's
  pipeline loads them (mmcv: BGR, 0-255), H and W multiples of the data
  preprocessor's ``pad_size_divisor``; the graph normalises it.
* outputs, each padded to ``max_per_img`` rows sorted by score:
  ``boxes (D, 4)`` in input pixels, ``scores (D,)``, ``labels (D,)`` int64,
  ``num_dets ()`` int64 (the valid leading rows) and, for Mask R-CNN,
  ``masks (D, M, M)``: the mask head's probabilities for each box's label.
  Pasting them into the image (``paste_masks``) is left to the caller, as
  in mmdeploy: a full-image mask per box would dominate the graph's memory.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .box_ops import (INVALID_SCORE, batched_nms_keep, decode_deltas,
                      roi_align_levels, select_top, top_k)
from .unsupported import ExportUnsupportedError, check_exportable

DETECTION_OUTPUTS = ('boxes', 'scores', 'labels', 'num_dets')
MASK_OUTPUTS = DETECTION_OUTPUTS + ('masks', )

# A network stage as ``detect`` calls it: tensors in, a tensor or a tuple of
# tensors out, as the module returns them (the module itself, or an
# ExecuTorch method in its place).
Stage = Callable[..., object]


def _cfg_get(cfg, key: str, default=None):
    return cfg.get(key, default) if cfg is not None else default


def _check_nms(cfg, where: str) -> float:
    nms = _cfg_get(cfg, 'nms')
    if nms is None or nms.get('type', 'nms') != 'nms':
        raise ExportUnsupportedError(
            f'{where}.nms = {nms!r}: only plain NMS (type="nms") exports '
            f'to ONNX NonMaxSuppression')
    return float(nms['iou_threshold'])


def _check_delta_coder(coder, where: str) -> None:
    name = type(coder).__name__
    if name != 'DeltaXYWHBBoxCoder':
        raise ExportUnsupportedError(
            f'{where} ({name}): the export path decodes DeltaXYWHBBoxCoder '
            f'boxes only')
    if getattr(coder, 'add_ctr_clamp',
               False) or not getattr(coder, 'clip_border', True):
        raise ExportUnsupportedError(
            f'{where} ({name}): add_ctr_clamp=True or clip_border=False is '
            f'not supported by the export path')


def _decode(coder, priors, deltas, image_hw):
    # mmdet's heads call decode() with its default wh_ratio_clip.
    return decode_deltas(priors, deltas, coder.means, coder.stds, image_hw)


def _valid_sizes(boxes: torch.Tensor, cfg) -> Optional[torch.Tensor]:
    """``min_bbox_size``: boxes wider and taller than it, or None."""
    min_size = _cfg_get(cfg, 'min_bbox_size', -1)
    if min_size < 0:
        return None
    sizes = boxes[:, 2:] - boxes[:, :2]
    return (sizes > min_size).all(dim=1)


def _level_priors(head, maps: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    return head.prior_generator.grid_priors([m.shape[-2:] for m in maps],
                                            dtype=maps[0].dtype,
                                            device=maps[0].device)


class _Normalize(nn.Module):
    """The data preprocessor's channel flip and normalisation (mmdet's and
    mmseg's, which names its flag without the underscore).

    The flip is a 1×1 convolution by a permutation matrix, which XNNPACK
    runs, where ``flip`` would be left to ExecuTorch's portable kernels
    (about 50 ms of a segmentor's program at 800×1344). Its weights are 0
    and 1, so it is exact, as is the normalisation after it, in mmdet's own
    arithmetic.
    """

    def __init__(self, data_preprocessor: nn.Module) -> None:
        super().__init__()
        self.flip = bool(
            getattr(data_preprocessor, '_channel_conversion', False)
            or getattr(data_preprocessor, 'channel_conversion', False))
        self.enabled = bool(
            getattr(data_preprocessor, '_enable_normalize', False))
        if self.enabled:
            self.register_buffer('mean', data_preprocessor.mean.clone())
            self.register_buffer('std', data_preprocessor.std.clone())
        # Output channel c is input channel 2 - c.
        self.register_buffer('reverse', torch.eye(3).flip(0).view(3, 3, 1, 1),
                             persistent=False)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if self.flip:
            image = F.conv2d(image, self.reverse.to(image.dtype))
        if self.enabled:
            image = (image - self.mean) / self.std
        return image

    def pixel_of(self, value: float) -> torch.Tensor:
        """The ``(3,)`` input pixel, in the loaded channel order, that
        normalises to ``value`` in every channel (mmdet pads a batch with
        ``pad_value`` after normalising)."""
        if not self.enabled:
            return torch.full((3, ), value)
        pixel = self.mean.reshape(3) + value * self.std.reshape(3)
        return pixel.flip(0) if self.flip else pixel


class DenseStage(nn.Module):
    """A detector's dense part: the data preprocessor's normalisation, the
    backbone, the neck and a dense head (RetinaNet's head, or the RPN).

    Args:
        detector (nn.Module): A built mmdet detector in eval mode.
        head (nn.Module): Its dense head, called on the neck's maps.
        num_features (int): How many of the neck's maps to return too,
            from the finest: those a two-stage detector's RoI heads pool
            from (0 for a single-stage detector).

    The forward takes ``image (1, 3, H, W)`` (pixels as the pipeline loads
    them) and returns one flat tuple: the first ``num_features`` maps of
    the neck, then the head's classification map of each level, then its
    box-regression map of each level.
    """

    def __init__(self, detector: nn.Module, head: nn.Module,
                 num_features: int) -> None:
        super().__init__()
        self.normalize = _Normalize(detector.data_preprocessor)
        self.backbone = detector.backbone
        self.neck = detector.neck if detector.with_neck else None
        self.head = head
        self.num_features = num_features
        self.num_levels = head.prior_generator.num_levels

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        feats = self.backbone(self.normalize(image))
        if self.neck is not None:
            feats = self.neck(feats)
        cls_scores, bbox_preds = self.head(feats)
        # Only the maps the host needs leave the program: the coarser ones
        # (FPN's extra levels) serve the head alone.
        features = tuple(feats[:self.num_features])
        return features + tuple(cls_scores) + tuple(bbox_preds)

    def split(
        self, outputs: Sequence[torch.Tensor]
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor], List[torch.Tensor]]:
        """``(features, cls_scores, bbox_preds)`` from the flat outputs."""
        outputs = list(outputs)
        levels = self.num_levels
        return (outputs[:-2 * levels], outputs[-2 * levels:-levels],
                outputs[-levels:])


def _rpn_proposals(rpn_head, cfg, cls_scores, bbox_preds, image_hw):
    """RPNHead.predict_by_feat for one image: ``(proposals (K, 4), valid
    (K,))`` with K fixed by the input size."""
    priors = _level_priors(rpn_head, cls_scores)
    nms_pre = _cfg_get(cfg, 'nms_pre', -1)
    level_scores, level_deltas, level_priors, level_ids = [], [], [], []
    for level, (cls_score, bbox_pred,
                prior) in enumerate(zip(cls_scores, bbox_preds, priors)):
        if rpn_head.use_sigmoid_cls:
            scores = cls_score[0].permute(1, 2, 0).reshape(-1).sigmoid()
        else:  # two channels, foreground first (mmdet >= 2.0)
            scores = cls_score[0].permute(1, 2, 0).reshape(-1,
                                                           2).softmax(-1)[:, 0]
        deltas = bbox_pred[0].permute(1, 2, 0).reshape(-1, 4)
        scores, index = top_k(scores, nms_pre)
        level_scores.append(scores)
        level_deltas.append(deltas[index])
        level_priors.append(prior[index])
        level_ids.append(torch.full_like(index, level))
    scores = torch.cat(level_scores)
    boxes = _decode(rpn_head.bbox_coder, torch.cat(level_priors),
                    torch.cat(level_deltas), image_hw)
    valid = _valid_sizes(boxes, cfg)
    if valid is None:
        valid = torch.ones_like(scores, dtype=torch.bool)
    keep = batched_nms_keep(boxes, scores, torch.cat(level_ids), valid,
                            _check_nms(cfg, 'rpn test_cfg'))
    top_scores, index = select_top(scores, keep, cfg.max_per_img)
    return boxes[index], top_scores > INVALID_SCORE


class ExportableTwoStageDetector(nn.Module):
    """Faster/Mask R-CNN (mmdet ``TwoStageDetector`` with a
    ``StandardRoIHead``) from image to postprocessed detections.

    Stages: :attr:`dense` (image to the FPN maps the RoI extractors use
    and the RPN maps), then on the
    host side proposals, RoI Align, :attr:`bbox_head` on the ``K`` pooled
    proposals (``K`` = the RPN's ``max_per_img`` when the image has that
    many anchors), box decoding and NMS, and for Mask R-CNN RoI Align and
    :attr:`mask_head` on the ``D`` detections (``D`` = the R-CNN's
    ``max_per_img``).

    Args:
        detector (nn.Module): A built mmdet detector in eval mode.
    """

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        check_exportable(detector)
        roi_head = detector.roi_head
        if type(roi_head).__name__ != 'StandardRoIHead':
            raise ExportUnsupportedError(
                f'roi_head ({type(roi_head).__name__}): the export path '
                f'supports StandardRoIHead only')
        if roi_head.with_shared_head:
            raise ExportUnsupportedError(
                'roi_head.shared_head: shared RoI heads are not supported')
        if type(detector.rpn_head).__name__ != 'RPNHead':
            raise ExportUnsupportedError(
                f'rpn_head ({type(detector.rpn_head).__name__}): the export '
                f'path supports RPNHead only')
        bbox_head = roi_head.bbox_head
        if bbox_head.custom_cls_channels:
            raise ExportUnsupportedError(
                f'roi_head.bbox_head ({type(bbox_head).__name__}): custom '
                f'classification activations are not supported')
        _check_delta_coder(detector.rpn_head.bbox_coder, 'rpn_head.bbox_coder')
        _check_delta_coder(bbox_head.bbox_coder, 'roi_head.bbox_head.'
                           'bbox_coder')
        self.bbox_roi_extractor = roi_head.bbox_roi_extractor
        self.bbox_head = bbox_head
        self.with_mask = roi_head.with_mask
        self.mask_roi_extractor = roi_head.mask_roi_extractor \
            if self.with_mask else None
        self.mask_head = roi_head.mask_head if self.with_mask else None
        extractors = [self.bbox_roi_extractor, self.mask_roi_extractor]
        self.dense = DenseStage(detector,
                                detector.rpn_head,
                                num_features=max(e.num_inputs
                                                 for e in extractors if e))
        self.rpn_cfg = detector.test_cfg.rpn
        self.rcnn_cfg = detector.test_cfg.rcnn
        self.rcnn_iou = _check_nms(self.rcnn_cfg, 'rcnn test_cfg')
        _check_nms(self.rpn_cfg, 'rpn test_cfg')
        self.output_names = MASK_OUTPUTS if self.with_mask else \
            DETECTION_OUTPUTS

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return self.detect(image, image.shape[-2:], self.dense,
                           self.bbox_head, self.mask_head)

    def detect(self,
               image: torch.Tensor,
               image_hw: Sequence[int],
               dense: Stage,
               bbox_head: Stage,
               mask_head: Optional[Stage] = None) -> Tuple[torch.Tensor, ...]:
        """The detector's stages in order, the networks given as callables.

        Args:
            image (Tensor): ``(1, 3, H, W)``, pixels as the pipeline loads
                them.
            image_hw (sequence[int]): Height and width boxes are clipped to:
                the input's, or the unpadded image's within a padded input
                (mmdet's ``img_shape``).
            dense (callable): ``image`` to :class:`DenseStage`'s outputs.
            bbox_head (callable): Pooled RoI features ``(K, C, h, w)`` to
                ``(cls_score, bbox_pred)``.
            mask_head (callable, optional): Pooled features of the
                detections to mask logits; Mask R-CNN only.

        Returns:
            tuple[Tensor]: The outputs named by :attr:`output_names`.
        """
        feats, rpn_scores, rpn_deltas = self.dense.split(dense(image))
        proposals, proposal_valid = _rpn_proposals(self.dense.head,
                                                   self.rpn_cfg, rpn_scores,
                                                   rpn_deltas, image_hw)
        cls_score, bbox_pred = bbox_head(
            self.pool(self.bbox_roi_extractor, feats, proposals))
        boxes, scores, labels = self.detections(proposals, proposal_valid,
                                                cls_score, bbox_pred,
                                                image_hw)
        outputs = (boxes, scores.clamp_min(0), labels,
                   (scores > INVALID_SCORE).sum())
        if not self.with_mask:
            return outputs
        mask_pred = mask_head(self.pool(self.mask_roi_extractor, feats,
                                        boxes))
        return outputs + (self.mask_probabilities(mask_pred, labels), )

    @staticmethod
    def pool(extractor: nn.Module, feats: Sequence[torch.Tensor],
             boxes: torch.Tensor) -> torch.Tensor:
        """RoI Align of ``boxes (K, 4)`` (one image) on the levels mmdet's
        ``SingleRoIExtractor`` assigns them: ``(K, C, h, w)``."""
        rois = torch.cat([torch.zeros_like(boxes[:, :1]), boxes], 1)
        feats = feats[:extractor.num_inputs]
        layers = extractor.roi_layers
        first = layers[0]
        if any(
                getattr(layer, 'pool_mode', 'avg') != 'avg'
                for layer in layers):
            raise ExportUnsupportedError(
                f'{type(extractor).__name__}: only average RoI Align '
                f'exports (ONNX RoiAlign mode="avg")')
        levels = extractor.map_roi_levels(rois, len(feats))
        return roi_align_levels(feats, rois, levels, tuple(first.output_size),
                                [layer.spatial_scale for layer in layers],
                                int(first.sampling_ratio), bool(first.aligned))

    def detections(
        self, proposals: torch.Tensor, proposal_valid: torch.Tensor,
        cls_score: torch.Tensor, bbox_pred: torch.Tensor,
        image_hw: Sequence[int]
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The bbox head's ``predict_by_feat``: per-class boxes, score
        threshold, NMS per class, the ``max_per_img`` best.

        Returns:
            tuple[Tensor]: ``boxes (D, 4)``, ``scores (D,)`` (sorted;
            ``INVALID_SCORE`` past the detections), ``labels (D,)``.
        """
        scores = cls_score.softmax(-1)[:, :-1]
        num_rois, num_classes = scores.shape
        if self.bbox_head.reg_class_agnostic:
            bbox_pred = bbox_pred.repeat(1, num_classes)
        boxes = _decode(self.bbox_head.bbox_coder, proposals, bbox_pred,
                        image_hw).reshape(-1, 4)
        scores = scores.reshape(-1)
        labels = torch.arange(num_classes,
                              device=scores.device).repeat(num_rois)
        valid = (scores > self.rcnn_cfg.score_thr) & \
            proposal_valid.repeat_interleave(num_classes)
        keep = batched_nms_keep(boxes, scores, labels, valid, self.rcnn_iou)
        det_scores, index = select_top(scores, keep, self.rcnn_cfg.max_per_img)
        return boxes[index], det_scores, labels[index]

    def mask_probabilities(self, mask_pred: torch.Tensor,
                           labels: torch.Tensor) -> torch.Tensor:
        """``(D, M, M)`` probabilities of each detection's own class."""
        if not self.mask_head.class_agnostic:
            mask_pred = mask_pred.gather(
                1, labels[:, None, None,
                          None].expand(-1, 1, *mask_pred.shape[-2:]))
        return mask_pred[:, 0].sigmoid()


class ExportableRetinaNet(nn.Module):
    """RetinaNet (mmdet ``SingleStageDetector`` with an anchor head using
    sigmoid scores) from image to postprocessed detections.

    Stages: :attr:`dense` (image to the head's maps), then box decoding and
    NMS (:meth:`detect`).

    Args:
        detector (nn.Module): A built mmdet detector in eval mode.
    """

    output_names = DETECTION_OUTPUTS

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        check_exportable(detector)
        head = detector.bbox_head
        if not getattr(head, 'use_sigmoid_cls', False) or not hasattr(
                head, 'prior_generator') or hasattr(head, 'centerness'):
            raise ExportUnsupportedError(
                f'bbox_head ({type(head).__name__}): the export path supports '
                f'anchor heads with sigmoid scores (RetinaHead) only')
        _check_delta_coder(head.bbox_coder, 'bbox_head.bbox_coder')
        self.dense = DenseStage(detector, head, num_features=0)
        self.cfg = head.test_cfg
        self.iou = _check_nms(self.cfg, 'bbox_head test_cfg')

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return self.detect(image, image.shape[-2:], self.dense)

    def detect(self, image: torch.Tensor, image_hw: Sequence[int],
               dense: Stage) -> Tuple[torch.Tensor, ...]:
        """The dense part, then the head's ``predict_by_feat``: per-level
        top-k over (anchor, class) pairs above the score threshold, box
        decoding, NMS per class, the ``max_per_img`` best.

        Args:
            image (Tensor): ``(1, 3, H, W)``, pixels as the pipeline loads
                them.
            image_hw (sequence[int]): Height and width boxes are clipped to
                (see :meth:`ExportableTwoStageDetector.detect`).
            dense (callable): ``image`` to :class:`DenseStage`'s outputs.

        Returns:
            tuple[Tensor]: The outputs named by :attr:`output_names`.
        """
        _, cls_scores, bbox_preds = self.dense.split(dense(image))
        head = self.dense.head
        priors = _level_priors(head, cls_scores)
        num_classes = head.cls_out_channels
        score_thr = _cfg_get(self.cfg, 'score_thr', 0.)
        nms_pre = _cfg_get(self.cfg, 'nms_pre', -1)
        level_scores: List[torch.Tensor] = []
        level_labels, level_deltas, level_priors = [], [], []
        for cls_score, bbox_pred, prior in zip(cls_scores, bbox_preds, priors):
            scores = cls_score[0].permute(1, 2, 0).reshape(-1).sigmoid()
            deltas = bbox_pred[0].permute(1, 2, 0).reshape(-1, 4)
            # filter_scores_and_topk: the best (anchor, class) pairs above
            # the threshold.
            scores = torch.where(scores > score_thr, scores,
                                 torch.full_like(scores, INVALID_SCORE))
            scores, index = top_k(scores, nms_pre)
            anchor = torch.div(index, num_classes, rounding_mode='floor')
            level_scores.append(scores)
            level_labels.append(index % num_classes)
            level_deltas.append(deltas[anchor])
            level_priors.append(prior[anchor])
        scores = torch.cat(level_scores)
        labels = torch.cat(level_labels)
        boxes = _decode(head.bbox_coder, torch.cat(level_priors),
                        torch.cat(level_deltas), image_hw)
        valid = scores > INVALID_SCORE
        sizes_valid = _valid_sizes(boxes, self.cfg)
        if sizes_valid is not None:
            valid = valid & sizes_valid
        keep = batched_nms_keep(boxes, scores, labels, valid, self.iou)
        det_scores, index = select_top(scores, keep, self.cfg.max_per_img)
        return (boxes[index], det_scores.clamp_min(0), labels[index],
                (det_scores > INVALID_SCORE).sum())


def build_exportable_detector(detector: nn.Module) -> nn.Module:
    """The export-time module for a built mmdet detector.

    Raises:
        ExportUnsupportedError: The detector type, a head or a module has
            no export path; the message names it.
    """
    kind = type(detector).__name__
    if hasattr(detector, 'roi_head') and hasattr(detector, 'rpn_head'):
        return ExportableTwoStageDetector(detector)
    if hasattr(detector, 'bbox_head') and not hasattr(detector, 'roi_head'):
        return ExportableRetinaNet(detector)
    raise ExportUnsupportedError(
        f'{kind}: the export path supports two-stage detectors with a '
        f'StandardRoIHead (Faster/Mask R-CNN) and RetinaNet-style '
        f'single-stage detectors')


def output_names(module: nn.Module) -> Sequence[str]:
    """Names of the exported graph's outputs."""
    return getattr(module, 'output_names', ())


__all__ = [
    'DenseStage', 'ExportableTwoStageDetector', 'ExportableRetinaNet',
    'build_exportable_detector', 'output_names'
]
