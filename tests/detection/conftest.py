"""Fixtures of the detection tests: synthetic data and a trained model."""
import os.path as osp
import sys

import pytest

# pytest runs with --import-mode=importlib, which puts no test folder on
# sys.path: make the helpers beside this file importable by name.
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))

from detection_utils import MASK_RCNN_CONFIG, run_tool, tool_env  # noqa: E402

from mmlaplacian.datasets import make_synthetic_coco  # noqa: E402

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
def trained_mask_rcnn(tmp_path_factory, synthetic_env) -> dict:
    """Mask R-CNN trained by ``tools/train.py`` on the synthetic data.

    Returns:
        dict: ``work_dir`` and ``checkpoint``.
    """
    work_dir = str(tmp_path_factory.mktemp('mask_rcnn_run'))
    run_tool(['tools/train.py', MASK_RCNN_CONFIG, '--work-dir', work_dir],
             env=synthetic_env)
    with open(osp.join(work_dir, 'last_checkpoint'), encoding='utf-8') as f:
        checkpoint = f.read().strip()
    return dict(work_dir=work_dir, checkpoint=checkpoint)


@pytest.fixture(scope='session')
def mask_rcnn_test_run(tmp_path_factory, trained_mask_rcnn,
                       synthetic_env) -> dict:
    """One ``tools/test.py`` run (single process) on the trained Mask R-CNN.

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
        str(work_dir), '--out', predictions, '--show-dir', 'painted'
    ], env=synthetic_env)
    return dict(
        work_dir=str(work_dir), stdout=proc.stdout, predictions=predictions)
