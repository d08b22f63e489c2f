"""Fixtures of the fault tests: the synthetic dataset and tool runs.

The helpers of the detection tests (``detection_utils``) are shared."""

import pytest

from detection_utils import tool_env
from mmlaplacian.synthetic_data.instances import make_synthetic_coco


@pytest.fixture(scope='session')
def synthetic_env(tmp_path_factory):
    """Tool environment whose test configs read a synthetic dataset of 8
    training and 4 validation images of 128 pixels."""
    root = str(tmp_path_factory.mktemp('synthetic_coco'))
    make_synthetic_coco(
        root, num_train=8, num_val=4, image_size=128, seed=0)
    return tool_env(SYNTHETIC_COCO=root)
