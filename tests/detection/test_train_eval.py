"""Train with tools/train.py, evaluate with tools/test.py (COCO metrics)."""
import glob
import math
import os.path as osp

import mmengine
import pytest
from detection_utils import latest_run_dir, read_scalars, read_test_metrics

pytestmark = pytest.mark.slow

COCO_AP_LINE = 'Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all'
ITERS = 6 * 4  # epochs x (8 images / batch 2)


def test_training_loss_falls(trained_mask_rcnn):
    train = [r for r in read_scalars(trained_mask_rcnn['work_dir'])
             if 'loss' in r]
    assert len(train) == ITERS
    assert [r['iter'] for r in train] == list(range(1, ITERS + 1))
    losses = [r['loss'] for r in train]
    assert all(math.isfinite(v) for v in losses)
    # Logged losses are running means over 10 iterations: compare the
    # first iteration with the mean of the last ten.
    assert losses[-1] < 0.8 * losses[0], losses
    assert all('loss_mask' in r and 'loss_rpn_cls' in r for r in train)
    for epoch in range(1, 7):
        checkpoint = osp.join(trained_mask_rcnn['work_dir'],
                              f'epoch_{epoch}.pth')
        assert osp.isfile(checkpoint) == (epoch >= 5)  # max_keep_ckpts=2


def test_test_tool_reports_coco_ap(trained_mask_rcnn, mask_rcnn_test_run):
    out = mask_rcnn_test_run['stdout']
    # pycocotools prints one summary for boxes and one for masks.
    assert out.count(COCO_AP_LINE) == 2
    assert 'Evaluating bbox' in out
    assert 'Evaluating segm' in out
    # 4 images in batches of 2 (test_distributed.py splits them instead).
    assert 'Epoch(test) [2/2]' in out

    metrics = read_test_metrics(mask_rcnn_test_run['work_dir'])
    for task in ('bbox', 'segm'):
        for suffix in ('mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m',
                       'mAP_l'):
            value = metrics[f'coco/{task}_{suffix}']
            assert value == -1 or 0 <= value <= 1, (task, suffix, value)

    # The same weights were validated at the end of training: same numbers.
    validation = [r for r in read_scalars(trained_mask_rcnn['work_dir'])
                  if 'coco/bbox_mAP' in r][-1]
    for key in ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP'):
        assert metrics[key] == pytest.approx(validation[key], abs=1e-4)

    painted = glob.glob(osp.join(latest_run_dir(
        mask_rcnn_test_run['work_dir']), 'painted', '*.jpg'))
    assert len(painted) == 4

    predictions = mmengine.load(mask_rcnn_test_run['predictions'])
    assert len(predictions) == 4
    for prediction in predictions:
        instances = prediction['pred_instances']
        assert instances['bboxes'].shape[1] == 4
        assert len(instances['masks']) == len(instances['scores'])
