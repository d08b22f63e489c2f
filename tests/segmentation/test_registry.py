"""mmseg finds the backbone, the dataset and the check by their plain
names, and importing mmlaplacian keeps mmseg importable."""
import subprocess
import sys

import pytest
import torch
from mmengine.registry import init_default_scope

import mmlaplacian
from mmlaplacian.datasets import CheckLabelMap


@pytest.mark.parametrize('first', ['mmlaplacian', 'mmseg.models'])
def test_mmseg_models_import_in_either_order(first):
    # Importing mmlaplacian registers into mmseg's registries without
    # importing mmseg's models or datasets.
    check_light = ("heavy = [m for m in ('mmseg.models', 'mmseg.datasets') "
                   'if m in sys.modules]\n'
                   "assert not heavy, f'mmlaplacian imported {heavy}'\n"
                   if first == 'mmlaplacian' else '')
    second = 'mmseg.models' if first == 'mmlaplacian' else 'mmlaplacian'
    code = (f'import sys, {first}\n{check_light}import {second}\n'
            'from mmseg.registry import MODELS\n'
            "assert MODELS.get('LaplacianFormer') is not None\n")
    proc = subprocess.run([sys.executable, '-c', code],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_plain_type_builds_in_mmseg_scope():
    from mmseg.registry import DATASETS, MODELS, TRANSFORMS
    init_default_scope('mmseg')
    backbone = MODELS.build(
        dict(type='LaplacianFormer', arch='tiny', out_indices=(0, 1, 2, 3)))
    assert isinstance(backbone, mmlaplacian.LaplacianFormer)
    backbone.eval()
    with torch.no_grad():
        outs = backbone(torch.randn(1, 3, 64, 96))
    # Strides 4, 8, 16, 32 with the Tiny widths: what a neck's in_channels
    # must say.
    assert [tuple(o.shape) for o in outs] == [(1, 64, 16, 24),
                                              (1, 128, 8, 12),
                                              (1, 320, 4, 6), (1, 512, 2, 3)]
    check = TRANSFORMS.build(dict(type='CheckLabelMap', num_classes=3))
    assert isinstance(check, CheckLabelMap)
    assert DATASETS.get('LabelMapDataset') is not None
