"""Fixtures of the detection tests: synthetic data and a trained model."""
import json
import os.path as osp

import pytest

# detection_utils is on the import path through pyproject's pytest
# ``pythonpath``.
from detection_utils import (MASK_RCNN_CONFIG, OVERFIT_EPOCHS, OVERFIT_IMAGES,
                             run_tool, tool_env, write_coco_subset)

from mmlaplacian.synthetic_data.instances import make_synthetic_coco

# Small enough for seconds per epoch on two CPU cores.
SYNTHETIC_TRAIN, SYNTHETIC_VAL, SYNTHETIC_SIZE = 8, 4, 128


@pytest.fixture(scope='session')
def synthetic_coco(tmp_path_factory) -> str:
    """A synthetic COCO dataset: 8 train and 4 val images of 128 pixels."""
    root = str(tmp_path_factory.mktemp('synthetic_coco'))
    make_synthetic_coco(
        root,
        num_train=SYNTHETIC_TRAIN,
        num_val=SYNTHETIC_VAL,
        image_size=SYNTHETIC_SIZE,
        seed=0)
    return root


@pytest.fixture(scope='session')
def synthetic_env(synthetic_coco):
    """Tool environment whose configs read the synthetic dataset."""
    return tool_env(SYNTHETIC_COCO=synthetic_coco)


@pytest.fixture(scope='session')
def overfit_options(tmp_path_factory, synthetic_coco) -> dict:
    """``--cfg-options`` that train on the first 4 training images.

    Returns:
        dict: ``train`` (training on them for 20 epochs, validated at the
        end) and ``evaluate`` (the validation and test sets made of the same
        images).
    """
    source = osp.join(synthetic_coco, 'annotations', 'instances_train.json')
    with open(source, encoding='utf-8') as f:
        image_ids = [im['id'] for im in json.load(f)['images']]
    ann_file = write_coco_subset(
        source, str(tmp_path_factory.mktemp('overfit') / 'overfit.json'),
        image_ids[:OVERFIT_IMAGES])
    evaluate = []
    for split in ('val', 'test'):
        evaluate += [
            f'{split}_dataloader.dataset.ann_file={ann_file}',
            f'{split}_dataloader.dataset.data_prefix.img=train/',
            f'{split}_evaluator.ann_file={ann_file}'
        ]
    train = [
        f'train_dataloader.dataset.ann_file={ann_file}',
        f'train_cfg.max_epochs={OVERFIT_EPOCHS}',
        f'train_cfg.val_interval={OVERFIT_EPOCHS}',
        'default_hooks.checkpoint.interval=10'
    ] + evaluate
    return dict(train=train, evaluate=evaluate)


@pytest.fixture(scope='session')
def trained_mask_rcnn(tmp_path_factory, synthetic_env,
                      overfit_options) -> dict:
    """Mask R-CNN over-fitted by ``tools/train.py`` on 4 synthetic images.

    20 epochs of 2 iterations, validated at the end on the same images.

    Returns:
        dict: ``work_dir``, ``checkpoint`` and ``evaluate`` (the
        ``--cfg-options`` that evaluate on the images it learnt).
    """
    work_dir = str(tmp_path_factory.mktemp('mask_rcnn_run'))
    run_tool(['tools/train.py', MASK_RCNN_CONFIG, '--work-dir', work_dir,
              '--cfg-options', *overfit_options['train']],
             env=synthetic_env)
    with open(osp.join(work_dir, 'last_checkpoint'), encoding='utf-8') as f:
        checkpoint = f.read().strip()
    return dict(work_dir=work_dir, checkpoint=checkpoint,
                evaluate=overfit_options['evaluate'])


@pytest.fixture(scope='session')
def mask_rcnn_test_run(tmp_path_factory, trained_mask_rcnn,
                       synthetic_env) -> dict:
    """One ``tools/test.py`` run (single process) on the trained Mask R-CNN,
    on the images it learnt.

    Shared by the checks of its output and by the two-process evaluation,
    which must reproduce its metrics. It also dumps the predictions
    (``--out``) and paints them (``--show-dir painted``).

    Returns:
        dict: ``work_dir``, ``stdout`` (with stderr) and ``predictions`` (the
        ``--out`` file).
    """
    work_dir = tmp_path_factory.mktemp('mask_rcnn_test')
    predictions = str(work_dir / 'predictions.pkl')
    proc = run_tool([
        'tools/test.py', MASK_RCNN_CONFIG, trained_mask_rcnn['checkpoint'],
        '--work-dir',
        str(work_dir), '--out', predictions, '--show-dir', 'painted',
        '--cfg-options', *trained_mask_rcnn['evaluate']
    ], env=synthetic_env)
    return dict(
        work_dir=str(work_dir), stdout=proc.stdout, predictions=predictions)
