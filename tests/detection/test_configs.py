"""Every detection config loads, builds, and follows the shared recipe."""
import glob
import math
import os.path as osp

import pytest
import torch
from detection_utils import repo_path
from mmdet.registry import MODELS
from mmdet.testing import demo_mm_inputs
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmlaplacian import LaplacianFormer

MASK_RCNN = sorted(glob.glob(repo_path('configs', 'mask_rcnn', '*.py')))
RETINANET = sorted(glob.glob(repo_path('configs', 'retinanet', '*.py')))
VARIANTS = ('tiny', 'small', 'medium', 'large', 'huge')


def config_id(path: str) -> str:
    return f'{osp.basename(osp.dirname(path))}/{osp.basename(path)}'


def load(path: str) -> Config:
    cfg = Config.fromfile(path)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    return cfg


def build_detector(cfg: Config) -> torch.nn.Module:
    """The detector of ``cfg`` without its pretrained backbone weights."""
    cfg.model.backbone.init_cfg = None
    return MODELS.build(cfg.model)


def test_every_variant_has_its_configs():
    names = {osp.basename(p) for p in MASK_RCNN + RETINANET}
    for variant in VARIANTS:
        assert f'lf_{variant}_1x.py' in names
        assert f'lf_{variant}_3x.py' in {osp.basename(p) for p in MASK_RCNN}
        assert f'lf_{variant}_1x.py' in {osp.basename(p) for p in RETINANET}
    assert len(MASK_RCNN) == 10 and len(RETINANET) == 5


@pytest.mark.parametrize('path', MASK_RCNN + RETINANET, ids=config_id)
def test_config_builds_with_recipe(path):
    cfg = load(path)
    backbone = cfg.model.backbone
    arch = osp.basename(path).split('_')[1]
    assert backbone.type == 'LaplacianFormer' and backbone.arch == arch
    assert backbone.init_cfg == dict(
        type='Pretrained', checkpoint=f'checkpoints/lf_{arch}_in1k.pth')
    assert cfg.custom_imports.imports == ['mmlaplacian']

    dims = LaplacianFormer.arch_zoo[arch]['embed_dims']
    expected_in = [dims[i] for i in backbone.out_indices]
    assert list(cfg.model.neck.in_channels) == expected_in
    if path in RETINANET:
        assert tuple(backbone.out_indices) == (1, 2, 3)
        assert cfg.model.neck.start_level == 0
        assert cfg.model.neck.add_extra_convs == 'on_input'
        assert cfg.model.neck.num_outs == 5

    optimizer = cfg.optim_wrapper.optimizer
    assert optimizer.type == 'AdamW' and math.isclose(optimizer.lr, 1e-4)
    assert math.isclose(optimizer.weight_decay, 0.05)
    paramwise = cfg.optim_wrapper.paramwise_cfg
    assert paramwise.norm_decay_mult == 0.
    for key in ('pos_embeds', 'log_lam'):
        assert paramwise.custom_keys[key].decay_mult == 0.
    warmup, steps = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.end == 1000
    assert not warmup.by_epoch
    long = osp.basename(path).endswith('_3x.py')
    assert cfg.train_cfg.max_epochs == (36 if long else 12)
    assert list(steps.milestones) == ([27, 33] if long else [8, 11])
    assert cfg.train_dataloader.batch_size == 2
    assert cfg.auto_scale_lr == dict(enable=False, base_batch_size=16)
    assert cfg.train_dataloader.dataset.data_root == 'data/coco/'
    assert cfg.val_evaluator.ann_file == (
        'data/coco/annotations/instances_val2017.json')

    model = build_detector(cfg)
    assert isinstance(model.backbone, LaplacianFormer)
    assert model.backbone.embed_dims == dims


def test_3x_configs_train_multi_scale_with_crops():
    cfg = load(repo_path('configs', 'mask_rcnn', 'lf_small_3x.py'))
    pipeline = cfg.train_dataloader.dataset.pipeline
    choice = next(t for t in pipeline if t.type == 'RandomChoice')
    kinds = [[t.type for t in branch] for branch in choice.transforms]
    assert kinds == [['RandomChoiceResize'],
                     ['RandomChoiceResize', 'RandomCrop',
                      'RandomChoiceResize']]


def test_coco_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv('COCO_ROOT', str(tmp_path))
    cfg = Config.fromfile(repo_path('configs', 'retinanet', 'lf_tiny_1x.py'))
    assert cfg.test_dataloader.dataset.data_root == f'{tmp_path}/'
    assert cfg.test_evaluator.ann_file == (
        f'{tmp_path}/annotations/instances_val2017.json')


def finite(losses: dict) -> bool:
    values = [v for k, v in losses.items() if 'loss' in k]
    flat = [t for v in values for t in (v if isinstance(v, list) else [v])]
    return all(torch.isfinite(t).all() for t in flat)


@pytest.mark.parametrize('path, with_mask', [
    (repo_path('configs', 'mask_rcnn', 'lf_tiny_1x.py'), True),
    (repo_path('configs', 'retinanet', 'lf_tiny_1x.py'), False),
], ids=['mask_rcnn', 'retinanet'])
def test_tiny_detector_modes(path, with_mask):
    torch.manual_seed(0)
    cfg = load(path)
    model = build_detector(cfg)
    model.init_weights()
    packed = demo_mm_inputs(
        2, [(3, 128, 160), (3, 96, 128)],
        num_items=[3, 2],
        num_classes=80,
        with_mask=with_mask)

    model.train()
    data = model.data_preprocessor(packed, True)
    losses = model(**data, mode='loss')
    assert finite(losses)
    assert ('loss_mask' in losses) == with_mask
    loss, _ = model.parse_losses(losses)
    loss.backward()
    # Every backbone parameter takes part: no output is computed in vain.
    no_grad = [n for n, p in model.backbone.named_parameters()
               if p.grad is None]
    assert no_grad == []

    model.eval()
    data = model.data_preprocessor(packed, False)
    with torch.no_grad():
        results = model(**data, mode='predict')
        feats = model(**data, mode='tensor')
    assert len(results) == 2
    for result, sample in zip(results, packed['data_samples']):
        pred = result.pred_instances
        assert pred.bboxes.shape[1] == 4
        assert len(pred.scores) == len(pred.labels) == len(pred.bboxes)
        if with_mask:
            height, width = sample.ori_shape
            assert tuple(pred.masks.shape[1:]) == (height, width)
    assert isinstance(feats, tuple) and len(feats) > 0
    tensors = [t for level in feats for t in
               (level if isinstance(level, (list, tuple)) else [level])]
    assert all(torch.isfinite(t).all() for t in tensors)
