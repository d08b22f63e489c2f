"""tools/train.py and tools/test.py run a segmentation config unchanged.

The segmentor over-fits the 4 validation scenes (64 iterations of batch 4,
from random initialisation) and is evaluated on them by tools/test.py, so
its mIoU must clear a floor. Measured on the 2-core CPU machine with the
same data and schedule, seeds 0 / 1 / 2: mIoU 54.0 / 61.1 / 59.0 (mAcc
55.2 / 62.7 / 60.8); after 16 iterations it labels every pixel background
(mIoU 17.9, mAcc 20.0: the background's IoU over five classes), after 32
28.7-32.1. The floor sits well below the lowest of these and well above
what background alone scores.
"""
import glob
import math
import os.path as osp
import re

import mmengine
import pytest
from detection_utils import read_scalars, read_test_metrics, run_tool
from seg_utils import SEG_CONFIG

pytestmark = pytest.mark.slow

ITERS = 64
MIOU_FLOOR = 35.


@pytest.fixture(scope='module')
def trained(tmp_path_factory, seg_env) -> dict:
    work_dir = str(tmp_path_factory.mktemp('sem_fpn_run'))
    run_tool([
        'tools/train.py', SEG_CONFIG, '--work-dir', work_dir,
        '--cfg-options', 'train_dataloader.dataset.data_prefix.img_path='
        'img_dir/val', 'train_dataloader.dataset.data_prefix.seg_map_path='
        'ann_dir/val', f'train_cfg.max_iters={ITERS}',
        f'train_cfg.val_interval={ITERS}',
        f'default_hooks.checkpoint.interval={ITERS}'
    ], env=seg_env)
    with open(osp.join(work_dir, 'last_checkpoint'), encoding='utf-8') as f:
        checkpoint = f.read().strip()
    return dict(work_dir=work_dir, checkpoint=checkpoint)


def test_training_loss_falls(trained):
    train = [r for r in read_scalars(trained['work_dir']) if 'loss' in r]
    assert [r['iter'] for r in train] == list(range(1, ITERS + 1))
    losses = [r['loss'] for r in train]
    assert all(math.isfinite(v) for v in losses)
    # Logged losses are running means over 10 iterations.
    assert losses[-1] < 0.9 * losses[0], losses
    assert osp.basename(trained['checkpoint']) == f'iter_{ITERS}.pth'


def test_test_tool_reports_an_miou_above_the_floor(trained, seg_env,
                                                  tmp_path):
    predictions = str(tmp_path / 'predictions.pkl')
    out = run_tool([
        'tools/test.py', SEG_CONFIG, trained['checkpoint'], '--work-dir',
        str(tmp_path), '--out', predictions, '--show-dir', 'painted'
    ], env=seg_env).stdout
    # IoUMetric's per-class table, then the means.
    assert 'per class results' in out
    for name in ('background', 'circle', 'square', 'triangle', 'star'):
        assert re.search(rf'\|\s+{name}\s+\|', out), name
    assert 'Iter(test) [2/2]' in out  # 4 images in batches of 2
    metrics = read_test_metrics(str(tmp_path))
    for key in ('mIoU', 'mAcc', 'aAcc'):
        assert f'{key}: ' in out
    assert metrics['mIoU'] >= MIOU_FLOOR, metrics

    # The same weights were validated at the end of training.
    validation = [r for r in read_scalars(trained['work_dir'])
                  if 'mIoU' in r][-1]
    for key in ('mIoU', 'mAcc', 'aAcc'):
        assert metrics[key] == pytest.approx(validation[key], abs=0.01)

    # --show-dir: ground truth beside prediction; --out: the raw results.
    painted = glob.glob(osp.join(str(tmp_path), 'painted', '**', '*.png'),
                        recursive=True)
    assert painted, 'no painted predictions'
    results = mmengine.load(predictions)
    assert len(results) == 4
    assert results[0]['pred_sem_seg']['data'].shape[-2:] == (64, 64)
