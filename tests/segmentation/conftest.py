"""Fixtures of the segmentation tests: synthetic label-map data."""

import pytest

# The tool helpers are the detection tests' (detection_utils, on the import
# path through pyproject's pytest ``pythonpath``).
from detection_utils import tool_env

from mmlaplacian.synthetic_data.label_maps import make_synthetic_seg

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
