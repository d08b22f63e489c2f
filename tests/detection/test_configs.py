"""Every detection config builds a working detector, and the recipe does what
it says on the built model (not a read-back of the config's literals)."""
import glob
import os.path as osp

import pytest
import torch
from detection_utils import repo_path
from mmdet.registry import MODELS
from mmdet.testing import demo_mm_inputs
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import PARAM_SCHEDULERS, init_default_scope

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
def test_config_builds_a_consistent_detector(path):
    cfg = load(path)
    arch = osp.basename(path).split('_')[1]
    # The file name, the backbone and its ImageNet checkpoint agree.
    assert cfg.model.backbone.arch == arch
    assert f'lf_{arch}_' in osp.basename(
        cfg.model.backbone.init_cfg.checkpoint)
    model = build_detector(cfg)
    assert isinstance(model.backbone, LaplacianFormer)

    # The neck takes what the backbone really returns, level by level.
    model.eval()
    with torch.no_grad():
        feats = model.backbone(torch.rand(1, 3, 64, 96))
    laterals = [m.conv.in_channels for m in model.neck.lateral_convs]
    start = model.neck.start_level
    assert laterals == [f.shape[1] for f in feats][start:]
    assert len(feats) == len(model.neck.in_channels)
    if path in RETINANET:
        # RetinaNet reads strides 8-32 (no unused stride-4 output, whose
        # parameters would get no gradient) and builds P6-P7 from them.
        assert [96 // f.shape[-1] for f in feats] == [8, 16, 32]
        assert model.neck.num_outs == 5
    else:
        assert [96 // f.shape[-1] for f in feats] == [4, 8, 16, 32]

    # The learning rate is for 8 GPUs x 2 images: --auto-scale-lr scales
    # from that total (and is off unless asked for).
    assert cfg.auto_scale_lr.base_batch_size == (
        8 * cfg.train_dataloader.batch_size)
    assert cfg.auto_scale_lr.enable is False

    # The evaluator scores the annotation file the test images come from.
    for split in ('val', 'test'):
        data = cfg[f'{split}_dataloader'].dataset
        assert cfg[f'{split}_evaluator'].ann_file == (
            data.data_root + data.ann_file)


def decay_of(optim_wrapper) -> dict:
    """``{parameter: weight decay}`` of the built optimizer."""
    decay = {}
    for group in optim_wrapper.optimizer.param_groups:
        for param in group['params']:
            decay[param] = group['weight_decay']
    return decay


@pytest.mark.parametrize('path', [
    repo_path('configs', 'mask_rcnn', 'lf_tiny_1x.py'),
    repo_path('configs', 'retinanet', 'lf_small_1x.py'),
], ids=config_id)
def test_no_weight_decay_on_norms_embeddings_and_bandwidths(path):
    cfg = load(path)
    cfg.model.backbone.attn_cfg = dict(learnable_lam=True)
    model = build_detector(cfg)
    decay = decay_of(build_optim_wrapper(model, cfg.optim_wrapper))
    base = cfg.optim_wrapper.optimizer.weight_decay
    assert base > 0
    norms = {
        id(p) for m in model.modules()
        if isinstance(m, (torch.nn.modules.batchnorm._NormBase,
                          torch.nn.LayerNorm, torch.nn.GroupNorm))
        for p in m.parameters(recurse=False)
    }
    exempt = {'position embedding': 0, 'bandwidth': 0, 'norm': 0}
    for name, param in model.named_parameters():
        if name.startswith('backbone.') and 'pos_embed' in name:
            kind = 'position embedding'
        elif name.endswith('log_lam'):
            kind = 'bandwidth'
        elif id(param) in norms:
            kind = 'norm'
        else:
            assert decay[param] == base, name
            continue
        assert decay[param] == 0, name
        exempt[kind] += 1
    # Each kind exists in the built model: a renamed parameter would
    # otherwise escape the check above.
    stages = len(model.backbone.embed_dims)
    assert exempt['position embedding'] == stages, exempt
    assert exempt['bandwidth'] >= stages - 1, exempt
    assert exempt['norm'] > 10, exempt


def learning_rates(cfg: Config, epoch_length: int) -> list:
    """The learning rate of every iteration of the config's schedule.

    Iteration-based schedulers step every iteration, epoch-based ones at the
    end of every epoch, as mmengine's ParamSchedulerHook steps them.
    """
    model = torch.nn.Linear(2, 2)
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    schedulers = [
        PARAM_SCHEDULERS.build(
            dict(s, optimizer=wrapper)) for s in cfg.param_scheduler
    ]
    rates = []
    for _ in range(cfg.train_cfg.max_epochs):
        for _ in range(epoch_length):
            rates.append(wrapper.get_lr()['lr'][0])
            for scheduler in schedulers:
                if not scheduler.by_epoch:
                    scheduler.step()
        for scheduler in schedulers:
            if scheduler.by_epoch:
                scheduler.step()
    return rates


@pytest.mark.parametrize('name, decay_epochs', [('lf_tiny_1x.py', (8, 11)),
                                                ('lf_tiny_3x.py', (27, 33))])
def test_schedule_warms_up_then_steps_down(name, decay_epochs):
    cfg = load(repo_path('configs', 'mask_rcnn', name))
    epoch_length = 400  # the 1000-iteration warm-up spans 2.5 epochs
    rates = learning_rates(cfg, epoch_length)
    base = cfg.optim_wrapper.optimizer.lr
    warmup = rates[:1000]
    assert warmup[0] < 0.01 * base
    assert all(a < b for a, b in zip(warmup, warmup[1:]))
    assert rates[1000] == pytest.approx(base)
    # Two tenfold steps, at the start of the recipe's epochs; flat between.
    changes = [i for i in range(1001, len(rates))
               if rates[i] != pytest.approx(rates[i - 1])]
    assert [i / epoch_length for i in changes] == list(decay_epochs)
    assert rates[-1] == pytest.approx(base / 100)
    assert decay_epochs[-1] < cfg.train_cfg.max_epochs


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
