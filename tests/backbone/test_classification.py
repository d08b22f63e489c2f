"""ImageNet configs: build, train through mmpretrain's Runner, reload."""
import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mmlaplacian.models import LaplacianFormer

pytest.importorskip('mmpretrain')
from mmengine.config import Config  # noqa: E402
from mmengine.registry import init_default_scope  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CFG_DIR = ROOT / 'configs/imagenet'
ARCHS = ['tiny', 'small', 'medium', 'large', 'huge']
NUM_CLASSES = 3


@pytest.fixture(scope='module')
def imagenet_folder(tmp_path_factory) -> Path:
    """ImageNet layout: {train,val}/<wnid>/*.JPEG, 3 classes of 64x64."""
    root = tmp_path_factory.mktemp('imagenet')
    rng = np.random.default_rng(0)
    for split, count in (('train', 4), ('val', 2)):
        for label in range(NUM_CLASSES):
            folder = root / split / f'n0000000{label}'
            folder.mkdir(parents=True)
            for index in range(count):
                pixels = rng.integers(0, 60, (64, 64, 3)) + 80 * label
                Image.fromarray(pixels.astype(np.uint8)).save(
                    folder / f'{split}_{label}_{index}.JPEG')
    return root


def _build_classifier(cfg: Config):
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    return MODELS.build(
        dict(cfg.model, data_preprocessor=cfg.data_preprocessor))


@pytest.mark.parametrize('arch', ARCHS)
def test_configs_resolve(arch):
    cfg = Config.fromfile(str(CFG_DIR / f'lf_{arch}_in1k.py'))
    assert cfg.model.backbone.arch == arch
    assert cfg.model.backbone.out_indices == (3, )
    assert cfg.optim_wrapper.optimizer.lr == 1e-3
    assert cfg.auto_scale_lr == dict(base_batch_size=1024, enable=False)
    assert cfg.train_dataloader.batch_size == 128
    assert cfg.train_cfg.max_epochs == 300
    assert [h.type for h in cfg.custom_hooks] == ['EMAHook']


def test_imagenet_dataset_reads_a_plain_class_folder_layout(tmp_path):
    """The configs' ImageNet dataset needs no annotation files."""
    from mmpretrain.registry import DATASETS
    image = Image.fromarray(np.zeros((8, 8, 3), np.uint8))
    for label in range(1000):
        folder = tmp_path / 'val' / f'n{label:08d}'
        folder.mkdir(parents=True)
        image.save(folder / 'a.JPEG')
    cfg = Config.fromfile(str(CFG_DIR / 'lf_tiny_in1k.py'))
    init_default_scope('mmpretrain')
    dataset = DATASETS.build(
        dict(cfg.val_dataloader.dataset, data_root=str(tmp_path)))
    assert len(dataset) == 1000
    assert dataset.get_data_info(999)['gt_label'] == 999
    assert dataset.get_data_info(999)['img_path'].endswith(
        'val/n00000999/a.JPEG')


def test_full_tiny_config_model_pipeline_and_step(imagenet_folder):
    from mmengine.dataset import Compose
    from mmengine.optim import build_optim_wrapper
    cfg = Config.fromfile(str(CFG_DIR / 'lf_tiny_in1k.py'))
    model = _build_classifier(cfg)
    assert isinstance(model.backbone, LaplacianFormer)
    numel = sum(p.numel() for p in model.parameters())
    backbone = sum(p.numel() for p in model.backbone.parameters())
    assert numel == backbone + 512 * 1000 + 1000  # the linear head

    pipeline = Compose(cfg.train_dataloader.dataset.pipeline)
    images = sorted((imagenet_folder / 'train').rglob('*.JPEG'))[:2]
    batch = [pipeline(dict(img_path=str(p), gt_label=i))
             for i, p in enumerate(images)]
    assert batch[0]['inputs'].shape == (3, 224, 224)

    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    decay = {id(p): g['weight_decay']
             for g in optim_wrapper.optimizer.param_groups
             for p in g['params']}
    assert decay[id(model.backbone.stages[0].pos_embed)] == 0
    assert decay[id(model.backbone.stages[0].blocks[0].norm1.weight)] == 0
    assert decay[id(model.backbone.stages[0].blocks[0].attn.q.bias)] == 0
    assert decay[id(model.backbone.stages[0].blocks[0].attn.q.weight)] == 0.05

    data = dict(
        inputs=[b['inputs'] for b in batch],
        data_samples=[b['data_samples'] for b in batch])
    model.train()
    before = model.head.fc.weight.detach().clone()
    losses = model.train_step(data, optim_wrapper)
    assert torch.isfinite(losses['loss'])
    assert not torch.equal(before, model.head.fc.weight)


def _small_config(root: Path, work_dir: Path) -> Config:
    """lf_tiny_in1k with 64x64 crops, 3 classes, batch 2, one epoch."""
    cfg = Config.fromfile(str(CFG_DIR / 'lf_tiny_in1k.py'))
    cfg.work_dir = str(work_dir)
    cfg.data_preprocessor.num_classes = NUM_CLASSES
    cfg.model.head.num_classes = NUM_CLASSES
    train_pipeline = copy.deepcopy(cfg.train_dataloader.dataset.pipeline)
    for step in train_pipeline:
        if step.type == 'RandomResizedCrop':
            step.scale = 64
    test_pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='ResizeEdge', scale=72, edge='short'),
        dict(type='CenterCrop', crop_size=64),
        dict(type='PackInputs'),
    ]
    for name, split, pipeline in (('train', 'train', train_pipeline),
                                  ('val', 'val', test_pipeline),
                                  ('test', 'val', test_pipeline)):
        cfg[f'{name}_dataloader'] = dict(
            batch_size=2,
            num_workers=0,
            persistent_workers=False,
            sampler=dict(type='DefaultSampler', shuffle=name == 'train'),
            dataset=dict(
                type='CustomDataset',
                data_root=str(root),
                data_prefix=split,
                pipeline=pipeline))
    cfg.val_evaluator = cfg.test_evaluator = dict(type='Accuracy', topk=(1, ))
    cfg.train_cfg = dict(by_epoch=True, max_epochs=1, val_interval=1)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=2)
    return cfg


@pytest.fixture(scope='module')
def trained_checkpoint(imagenet_folder, tmp_path_factory) -> Path:
    from mmengine.runner import Runner
    work_dir = tmp_path_factory.mktemp('work_dir')
    runner = Runner.from_cfg(_small_config(imagenet_folder, work_dir))
    runner.train()
    checkpoint = work_dir / 'epoch_1.pth'
    assert checkpoint.is_file()
    return checkpoint


def test_checkpoint_holds_ema_weights(trained_checkpoint):
    checkpoint = torch.load(trained_checkpoint, weights_only=False)
    assert checkpoint['meta']['epoch'] == 1
    ema, raw = checkpoint['state_dict'], checkpoint['ema_state_dict']
    key = 'backbone.stages.0.blocks.0.attn.q.weight'
    # EMAHook swaps the averaged weights into `state_dict` when saving.
    assert not torch.equal(ema[key], raw['module.' + key])


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet'])
def test_checkpoint_loads_into_detection_backbone(trained_checkpoint, scope):
    import importlib
    pytest.importorskip(scope)
    init_default_scope(scope)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    backbone = registry.build(
        dict(
            type='LaplacianFormer',
            arch='tiny',
            out_indices=(0, 1, 2, 3),
            init_cfg=dict(
                type='Pretrained', checkpoint=str(trained_checkpoint))))
    backbone.init_weights()
    saved = torch.load(trained_checkpoint, weights_only=False)['state_dict']
    saved = {k[len('backbone.'):]: v for k, v in saved.items()
             if k.startswith('backbone.')}
    state = backbone.state_dict()
    assert set(state) - set(saved) == {
        f'stages.{i}.norm.{p}' for i in range(3) for p in ('weight', 'bias')}
    for key, value in saved.items():
        assert torch.equal(state[key], value), key


def test_checkpoint_loads_into_timm(trained_checkpoint, tmp_path):
    """``timm.create_model(..., pretrained=True)`` with
    ``pretrained_cfg_overlay=dict(file=...)`` takes the checkpoint the
    ImageNet config wrote: the timm model gives the classifier's logits."""
    timm = pytest.importorskip('timm')
    import mmlaplacian.adapters.timm_models  # noqa: F401  (registers them)
    from mmengine.runner import load_checkpoint
    classifier = _build_classifier(_small_config(tmp_path, tmp_path))
    load_checkpoint(classifier, str(trained_checkpoint), map_location='cpu')
    net = timm.create_model(
        'laplacianformer_tiny', num_classes=NUM_CLASSES, pretrained=True,
        pretrained_cfg_overlay=dict(file=str(trained_checkpoint))).eval()
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = classifier.eval()(x, mode='tensor')
        torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-6)
