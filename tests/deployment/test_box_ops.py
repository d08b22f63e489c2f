"""The export path's postprocessing pieces against mmdet/mmcv eager code,
and the NMS custom op against ONNX NonMaxSuppression in onnxruntime."""
import numpy as np
import pytest
import torch

from mmlaplacian.deployment.box_ops import (batched_nms_keep, decode_deltas,
                                            roi_align_levels, select_top)
from mmlaplacian.deployment.onnx_ops import nms_keep_mask


def random_boxes(num: int, size: float = 200., seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    top_left = torch.rand(num, 2, generator=generator) * size
    wh = torch.rand(num, 2, generator=generator) * size / 3 + 1
    return torch.cat([top_left, top_left + wh], 1), generator


def test_decode_matches_mmdet_coder():
    from mmdet.models.task_modules.coders import DeltaXYWHBBoxCoder
    coder = DeltaXYWHBBoxCoder(target_means=(0., 0., 0., 0.),
                               target_stds=(0.1, 0.1, 0.2, 0.2))
    priors, generator = random_boxes(50)
    deltas = torch.randn(50, 4 * 3, generator=generator) * 2
    expected = coder.decode(priors.repeat_interleave(3, 0),
                            deltas.reshape(-1, 4),
                            max_shape=(120, 160)).reshape(50, -1)
    got = decode_deltas(priors, deltas, coder.means, coder.stds, (120, 160))
    assert torch.allclose(got, expected, atol=1e-4)
    # Clipping happened: the check is not vacuous.
    assert (got[:, 0::2] == 160).any() and (got[:, 1::2] == 120).any()


def test_batched_nms_keep_matches_mmcv():
    from mmcv.ops import batched_nms
    boxes, generator = random_boxes(300, size=100.)
    scores = torch.rand(300, generator=generator)
    groups = torch.randint(0, 4, (300, ), generator=generator)
    valid = scores > 0.2
    _, keep_idx = batched_nms(boxes[valid], scores[valid], groups[valid],
                              dict(type='nms', iou_threshold=0.5))
    expected = torch.nonzero(valid).squeeze(1)[keep_idx]
    keep = batched_nms_keep(boxes, scores, groups, valid, 0.5)
    assert set(torch.nonzero(keep).squeeze(1).tolist()) == set(
        expected.tolist())
    assert 0 < int(keep.sum()) < int(valid.sum())  # something suppressed
    # select_top returns the kept boxes in mmcv's (score) order.
    top_scores, index = select_top(scores, keep, 10)
    assert index.tolist() == expected[:10].tolist()
    assert torch.equal(top_scores, scores[expected[:10]])


def detection_rows(boxes, scores, labels):
    """``(n, 6)`` rows ``score, label, box``, in a fixed order."""
    rows = torch.cat([scores[:, None], labels[:, None].float(), boxes], 1)
    for column in reversed(range(rows.shape[1])):
        rows = rows[torch.sort(rows[:, column], stable=True)[1]]
    return rows


def test_batched_nms_keep_matches_mmcv_with_ties_and_duplicates():
    """The host-side NMS of the ExecuTorch detectors (and the ONNX graph's
    NMS op eagerly) keeps the detections of mmcv's batched_nms where the
    order is delicate: scores on a coarse grid (many exact ties), exact
    duplicate boxes with equal scores in the same class and in others,
    heavy overlap, five classes.

    Which of two identical boxes survives is arbitrary, so the kept
    detections are compared, not their indices. Left out: two *different*
    boxes of a class with exactly equal scores and IoU above the threshold,
    where the survivor depends on the sort's tie order (mmcv: torch's
    unstable sort; torchvision: a stable one); the sample has none."""
    from mmcv.ops import batched_nms
    from torchvision.ops import box_iou
    boxes, generator = random_boxes(400, size=60.)
    scores = (torch.rand(400, generator=generator) * 10).floor() / 10
    groups = torch.randint(0, 5, (400, ), generator=generator)
    boxes[300:] = boxes[200:300]
    scores[300:] = scores[200:300]
    groups[300:350] = groups[200:250]  # duplicates within a class ...
    groups[350:] = (groups[250:300] + 1) % 5  # ... and across classes
    valid = scores > 0.05
    conflicts = ((scores[:, None] == scores) & (groups[:, None] == groups)
                 & (box_iou(boxes, boxes) > 0.5)
                 & (boxes[:, None] != boxes).any(-1))[valid][:, valid]
    assert not conflicts.any()
    dets, keep_idx = batched_nms(boxes[valid], scores[valid], groups[valid],
                                 dict(type='nms', iou_threshold=0.5))
    expected = torch.nonzero(valid).squeeze(1)[keep_idx]
    keep = batched_nms_keep(boxes, scores, groups, valid, 0.5)
    assert torch.equal(
        detection_rows(boxes[keep], scores[keep], groups[keep]),
        detection_rows(boxes[expected], scores[expected], groups[expected]))
    # Within a class a duplicate is suppressed by its twin; across classes
    # both stay.
    assert not (keep[200:250] & keep[300:350]).any()
    assert (keep[250:300] & keep[350:]).any()
    assert 0 < int(keep.sum()) < int(valid.sum())
    top_scores, _ = select_top(scores, keep, len(expected))
    assert torch.equal(top_scores, dets[:, -1])


def test_roi_align_levels_matches_mmdet_extractor():
    from mmdet.models.roi_heads.roi_extractors import SingleRoIExtractor
    extractor = SingleRoIExtractor(roi_layer=dict(type='RoIAlign',
                                                  output_size=7,
                                                  sampling_ratio=0),
                                   out_channels=8,
                                   featmap_strides=[4, 8, 16, 32])
    generator = torch.Generator().manual_seed(0)
    feats = [
        torch.randn(1, 8, 256 // s, 256 // s, generator=generator)
        for s in (4, 8, 16, 32)
    ]
    boxes, _ = random_boxes(40, size=256.)
    # Sizes from 2 to ~630 pixels, so every level gets RoIs.
    boxes[:, 2:] = boxes[:, :2] + torch.logspace(0.3, 2.8, 40)[:, None]
    rois = torch.cat([torch.zeros(40, 1), boxes], 1)
    expected = extractor(feats, rois)
    levels = extractor.map_roi_levels(rois, 4)
    assert len(levels.unique()) == 4
    got = roi_align_levels(feats, rois, levels, (7, 7),
                           [1 / 4, 1 / 8, 1 / 16, 1 / 32], 0, True)
    assert torch.allclose(got, expected, atol=1e-5)


def test_nms_keep_mask_in_onnxruntime(tmp_path):
    pytest.importorskip('onnxruntime')
    from mmlaplacian.deployment import export_onnx, ort_run, ort_session

    class NMS(torch.nn.Module):

        def forward(self, image):
            boxes = image[0, 0, :, :4] * 50
            boxes = torch.cat([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], 1)
            # Scores below -0.5 mark boxes to ignore.
            scores = image[0, 1, :, 0] - 0.7
            return nms_keep_mask(boxes, scores, 0.4)

    image = torch.rand(1, 2, 64, 4, generator=torch.Generator().manual_seed(1))
    path = str(tmp_path / 'nms.onnx')
    result = export_onnx(NMS(), image, path, output_names=['keep'])
    assert result.operators.get('NonMaxSuppression') == 1
    (keep, ) = ort_run(ort_session(path), image)
    expected = NMS()(image).numpy()
    np.testing.assert_array_equal(keep, expected)
    considered = (image[0, 1, :, 0] - 0.7 >= -0.5).numpy()
    assert 0 < expected.sum() < considered.sum() < 64
    assert not expected[~considered].any()


@pytest.mark.parametrize('num', [1, 40])
def test_paste_masks_matches_mmdet_mask_head(num):
    from mmdet.models.roi_heads.mask_heads import FCNMaskHead
    from mmengine.config import ConfigDict
    from mmengine.registry import DefaultScope

    from mmlaplacian.deployment import paste_masks
    # The head builds its loss from the registry: without mmdet's scope, an
    # earlier test's (mmpretrain) gives a CrossEntropyLoss without use_mask.
    with DefaultScope.overwrite_default_scope('mmdet'):
        head = FCNMaskHead(num_classes=1, class_agnostic=True)
    generator = torch.Generator().manual_seed(1)
    height, width = 180, 250
    # Boxes inside, across the border and degenerate (zero width).
    top_left = torch.rand(num, 2, generator=generator) * torch.tensor(
        [width, height]) - 20
    wh = torch.rand(num, 2, generator=generator) * 120
    wh[0, 0] = 0
    boxes = torch.cat([top_left, top_left + wh], 1)
    probs = torch.rand(num, 28, 28, generator=generator)
    expected = head._predict_by_feat_single(
        torch.logit(probs)[:, None], boxes, torch.zeros(num, dtype=torch.long),
        dict(ori_shape=(height, width), scale_factor=(1., 1.)),
        ConfigDict(mask_thr_binary=0.5))
    got = paste_masks(probs.numpy(), boxes.numpy(), (height, width))
    assert got.shape == (num, height, width) and got.dtype == bool
    assert np.array_equal(got, expected.numpy())
    assert got.any() and not got.all()


def test_paste_masks_of_no_box_and_boxes_outside_the_image():
    from mmlaplacian.deployment import paste_masks
    assert paste_masks(np.zeros((0, 28, 28), np.float32), np.zeros((0, 4)),
                       (30, 40)).shape == (0, 30, 40)
    outside = np.array([[50, 5, 60, 20], [5, -30, 20, -2]], np.float32)
    got = paste_masks(np.ones((2, 28, 28), np.float32), outside, (30, 40))
    assert got.shape == (2, 30, 40) and not got.any()
