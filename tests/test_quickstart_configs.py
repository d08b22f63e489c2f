"""Every config in configs/quickstart/ as shipped: its pipeline (flips and
turns included), its LaplacianFormer-Tiny and its heads, trained by
``tools/train.py`` for a short schedule on a few images of its synthetic
dataset, then evaluated by ``tools/test.py``, the way ``make demo`` and
``make demo-seg`` run them. Only what a user changes for a short run is
overridden: the dataset folder (the configs read it from the
environment), the schedule and the logging interval.
"""
import math
import os
import os.path as osp

import pytest
from detection_utils import (read_scalars, read_test_metrics, repo_path,
                             run_tool, tool_env)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

QUICKSTART_DIR = repo_path('configs', 'quickstart')
COCO_AP_LINE = 'Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all'
# Per config: the dataset tool and its options (the quick start's image size
# and shapes, fewer images), the variable the config reads the dataset
# folder from, the schedule, the checkpoint it ends with, the metrics
# tools/test.py reports and what it prints of them (a line and how often).
RECIPES = {
    'mask_rcnn_lf_tiny_synthetic.py': dict(
        data=['tools/dataset_converters/make_synthetic_coco.py', '--train',
              '8', '--val', '4', '--size', '192', '--seed', '0'],
        data_variable='SYNTHETIC_COCO',
        # 8 images in batches of 4: two iterations.
        schedule=['train_cfg.max_epochs=1'],
        iterations=2,
        checkpoint='epoch_1.pth',
        metrics=['coco/bbox_mAP', 'coco/segm_mAP'],
        printed=(COCO_AP_LINE, 2)),  # boxes and masks
    'sem_fpn_lf_tiny_synthetic_seg.py': dict(
        data=['tools/dataset_converters/make_synthetic_seg.py', '--train',
              '16', '--val', '4', '--size', '96', '--radius', '0.15', '0.3',
              '--seed', '0'],
        data_variable='SYNTHETIC_SEG',
        schedule=['train_cfg.max_iters=2', 'train_cfg.val_interval=2',
                  'default_hooks.checkpoint.interval=2'],
        iterations=2,
        checkpoint='iter_2.pth',
        metrics=['mIoU', 'mAcc', 'aAcc'],
        printed=('per class results', 1)),
}


def test_every_quickstart_config_has_a_recipe():
    assert sorted(f for f in os.listdir(QUICKSTART_DIR)
                  if f.endswith('.py')) == sorted(RECIPES)


@pytest.mark.parametrize('name', sorted(RECIPES))
def test_quickstart_config_trains_and_evaluates_as_shipped(
        name, load_script, tmp_path):
    recipe = RECIPES[name]
    config = osp.join(QUICKSTART_DIR, name)
    data = str(tmp_path / 'data')
    tool, *options = recipe['data']
    load_script(tool).main(['--out', data, *options])
    env = tool_env(**{recipe['data_variable']: data})

    work_dir = str(tmp_path / 'work')
    run_tool(['tools/train.py', config, '--work-dir', work_dir,
              '--cfg-options', *recipe['schedule'],
              'default_hooks.logger.interval=1'], env=env)
    train = [r for r in read_scalars(work_dir) if 'loss' in r]
    assert [r['iter'] for r in train] == list(
        range(1, recipe['iterations'] + 1))
    for record in train:
        losses = [v for k, v in record.items() if k.startswith('loss')]
        assert losses and all(math.isfinite(v) for v in losses), record
    with open(osp.join(work_dir, 'last_checkpoint'), encoding='utf-8') as f:
        checkpoint = f.read().strip()
    assert osp.basename(checkpoint) == recipe['checkpoint']

    out = run_tool(['tools/test.py', config, checkpoint, '--work-dir',
                    work_dir], env=env).stdout
    metrics = read_test_metrics(work_dir)
    for key in recipe['metrics']:
        assert math.isfinite(metrics[key]), (key, metrics)
    line, count = recipe['printed']
    assert out.count(line) == count, out[-4000:]
