"""Fixtures of the segmentation tests: synthetic label-map data."""
import os.path as osp
import sys

import pytest

# pytest runs with --import-mode=importlib, which puts no test folder on
# sys.path: the tool helpers are the detection tests' (detection_utils).
HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, osp.join(HERE, '..', 'detection'))
sys.path.insert(0, HERE)
from detection_utils import REPO_ROOT, tool_env  # noqa: E402

sys.path.insert(0, REPO_ROOT)  # the generators live in tools/
from tools.dataset_converters.synthetic_seg import \
    make_synthetic_seg  # noqa: E402

# Small enough for about a second per iteration on two CPU cores.
SYNTHETIC_TRAIN, SYNTHETIC_VAL, SYNTHETIC_SIZE = 8, 4, 64


@pytest.fixture(scope='session')
def synthetic_seg(tmp_path_factory) -> str:
    """Synthetic label maps: 8 train and 4 val images of 64 pixels."""
    root = str(tmp_path_factory.mktemp('synthetic_seg'))
    make_synthetic_seg(
        root,
        num_train=SYNTHETIC_TRAIN,
        num_val=SYNTHETIC_VAL,
        image_size=SYNTHETIC_SIZE,
        seed=0)
    return root


@pytest.fixture(scope='session')
def seg_env(synthetic_seg):
    """Tool environment whose configs read the synthetic label maps."""
    return tool_env(SYNTHETIC_SEG=synthetic_seg)
