"""Every Semantic FPN and UperNet config builds a segmentor whose parts fit
together, and the ADE20K data settings read mmseg's layout."""
import glob
import os
import os.path as osp
import re

import numpy as np
import pytest
import torch
from detection_utils import repo_path
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image

from mmlaplacian import LaplacianFormer
from mmlaplacian.datasets import LabelMapError

VARIANTS = ('tiny', 'small', 'medium', 'large', 'huge')
CONFIGS = [f'configs/sem_fpn/lf_{v}_fpn_40k_ade20k.py' for v in VARIANTS] + [
    f'configs/upernet/lf_{v}_upernet_160k_ade20k.py' for v in VARIANTS
]


def test_every_config_is_listed():
    found = sorted(
        osp.relpath(p, repo_path())
        for p in glob.glob(repo_path('configs', 'sem_fpn', '*.py')) +
        glob.glob(repo_path('configs', 'upernet', '*.py')))
    assert found == sorted(CONFIGS)


@pytest.mark.parametrize('config', CONFIGS)
def test_config_fits_its_backbone(config):
    cfg = Config.fromfile(repo_path(config))
    variant = osp.basename(config).split('_')[1]
    assert cfg.custom_imports.imports == ['mmlaplacian']
    assert cfg.model.backbone.arch == variant
    assert cfg.model.backbone.init_cfg.checkpoint == \
        f'checkpoints/lf_{variant}_in1k.pth'
    # What the heads read must be what this variant's stages give.
    dims = LaplacianFormer.arch_zoo[variant]['embed_dims']
    if 'sem_fpn' in config:
        assert list(cfg.model.neck.in_channels) == dims
    else:
        assert list(cfg.model.decode_head.in_channels) == dims
        assert cfg.model.auxiliary_head.in_channels == dims[2]
    # The header names the recipe and the batch it assumes, and the batch
    # per GPU matches it.
    with open(repo_path(config), encoding='utf-8') as f:
        header = f.read().split('\n_base_ =')[0].replace('\n# ', ' ')
    recipe, total = ('PVT', 32) if 'sem_fpn' in config else ('Swin', 16)
    assert re.search(f"{recipe}'s [A-Za-z ]*recipe", header), header
    assert f'{total} images per iteration' in header, header
    assert 8 * cfg.train_dataloader.batch_size == total
    assert cfg.auto_scale_lr.base_batch_size == total


@pytest.mark.parametrize('config', [c for c in CONFIGS if 'tiny' in c])
def test_tiny_segmentor_builds_and_runs(config):
    from mmseg.registry import MODELS
    cfg = Config.fromfile(repo_path(config))
    init_default_scope('mmseg')
    cfg.model.backbone.init_cfg = None
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    assert isinstance(model.backbone, LaplacianFormer)
    model.eval()
    with torch.no_grad():
        # Backbone, neck and heads wired together: 1/4-resolution logits
        # over ADE20K's 150 classes.
        logits = model(torch.randn(1, 3, 64, 96), mode='tensor')
    assert logits.shape == (1, 150, 16, 24)
    assert torch.isfinite(logits).all()


def write_ade_like(root: str, label_value: int = 5) -> None:
    """Two images and label maps in ADE20K's folder layout."""
    rng = np.random.default_rng(0)
    for split in ('training', 'validation'):
        for name in ('ADE_a', 'ADE_b'):
            img_dir = osp.join(root, 'images', split)
            ann_dir = osp.join(root, 'annotations', split)
            os.makedirs(img_dir, exist_ok=True)
            os.makedirs(ann_dir, exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (40, 60, 3),
                                         dtype=np.uint8)).save(
                                             osp.join(img_dir, name + '.jpg'))
            labels = rng.integers(0, 151, (40, 60)).astype(np.uint8)
            labels[0, 0] = label_value
            Image.fromarray(labels).save(osp.join(ann_dir, name + '.png'))


@pytest.mark.parametrize('split', ['train', 'test'])
def test_ade_root_and_label_check(split, tmp_path, monkeypatch):
    from mmseg.registry import DATASETS
    root = str(tmp_path / 'ADEChallengeData2016')
    write_ade_like(root)
    monkeypatch.setenv('ADE_ROOT', root)
    cfg = Config.fromfile(
        repo_path('configs', 'sem_fpn', 'lf_tiny_fpn_40k_ade20k.py'))
    init_default_scope('mmseg')
    dataset = DATASETS.build(cfg[f'{split}_dataloader'].dataset)
    assert len(dataset) == 2
    sample = dataset[0]
    # reduce_zero_label: ADE's 0 ("other") is ignored, 1..150 -> 0..149.
    labels = sample['data_samples'].gt_sem_seg.data
    assert int(labels.max()) == 255 and int(labels[labels != 255].max()) < 150

    # A value beyond ADE's 150 classes stops the run and names the file.
    write_ade_like(root, label_value=200)
    with pytest.raises(LabelMapError, match=r'ADE_a\.png.*199'):
        dataset[0]
