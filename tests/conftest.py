"""Shared fixtures: repository paths and the optional real-COCO subset."""
import os
import os.path as osp

import pytest

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


@pytest.fixture(scope='session')
def repo_root() -> str:
    return REPO_ROOT


def find_coco_mini():
    """``$COCO_MINI`` or ``<repo>/../shared/data/coco_mini``, else None."""
    for path in (os.environ.get('COCO_MINI'),
                 osp.join(REPO_ROOT, '..', 'shared', 'data', 'coco_mini')):
        if path and osp.isfile(
                osp.join(path, 'annotations', 'instances_val2017.json')):
            return osp.abspath(path)
    return None


@pytest.fixture(scope='session')
def coco_mini() -> str:
    path = find_coco_mini()
    if path is None:
        pytest.skip('real COCO subset not found: set $COCO_MINI or place it '
                    'at ../shared/data/coco_mini')
    return path
