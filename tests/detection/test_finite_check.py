"""A NaN loss or a NaN input image stops training with the iteration, the
loss term and the images named (FiniteCheckHook, on in the configs)."""
import json
import os.path as osp

import cv2
import numpy as np
import pytest
import torch
from detection_utils import RETINANET_CONFIG
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

pytestmark = pytest.mark.slow


def retinanet_cfg(synthetic_coco, work_dir, monkeypatch, **changes) -> Config:
    """The test RetinaNet config: one epoch, no validation."""
    monkeypatch.setenv('SYNTHETIC_COCO', synthetic_coco)
    cfg = Config.fromfile(RETINANET_CONFIG)
    init_default_scope('mmdet')
    cfg.work_dir = str(work_dir)
    cfg.train_cfg.max_epochs = 1
    cfg.val_dataloader = cfg.val_evaluator = cfg.val_cfg = None
    # The visualizer (which writes scalars.json) is a process-wide instance
    # per name: each runner of this process needs its own.
    cfg.visualizer.name = f'visualizer_{work_dir}'
    cfg.merge_from_dict(changes)
    return cfg


def finite_check_hook(runner):
    return next(h for h in runner.hooks
                if type(h).__name__ == 'FiniteCheckHook')


def test_configs_switch_the_hook_on(synthetic_coco, tmp_path, monkeypatch):
    cfg = retinanet_cfg(synthetic_coco, tmp_path, monkeypatch)
    assert [h.type for h in cfg.custom_hooks] == ['FiniteCheckHook']


def test_nan_loss_term_stops_training(synthetic_coco, tmp_path, monkeypatch):
    # A NaN weight of the box regression loss: loss_bbox is NaN from the
    # first iteration on, loss_cls stays finite.
    cfg = retinanet_cfg(
        synthetic_coco, tmp_path, monkeypatch,
        **{'model.bbox_head.loss_bbox.loss_weight': float('nan')})
    runner = Runner.from_cfg(cfg)
    with pytest.raises(FloatingPointError) as error:
        runner.train()
    message = str(error.value)
    assert message.startswith(
        'non-finite loss at iteration 1 (epoch 1): loss_bbox=nan;'), message
    assert 'loss_cls' not in message
    assert osp.join(synthetic_coco, 'train') in message  # the images
    assert not (tmp_path / 'epoch_1.pth').exists()


def test_diverging_training_stops_at_the_first_nan(synthetic_coco, tmp_path,
                                                    monkeypatch):
    # A learning rate far too high: the first steps are finite, then the
    # weights overflow.
    cfg = retinanet_cfg(
        synthetic_coco, tmp_path, monkeypatch, **{
            'optim_wrapper.optimizer.lr': 1e30,
            'param_scheduler': None,
            'default_hooks.logger.interval': 1,
        })
    runner = Runner.from_cfg(cfg)
    with pytest.raises(FloatingPointError) as error:
        runner.train()
    message = str(error.value)
    prefix = 'non-finite loss at iteration '
    assert message.startswith(prefix), message
    iteration = int(message[len(prefix):].split()[0])
    assert 1 < iteration <= 4, message
    assert 'loss_cls=' in message or 'loss_bbox=' in message
    # Every iteration before it was logged, the failing one was not.
    with open(osp.join(tmp_path, runner.timestamp, 'vis_data',
                       'scalars.json')) as f:
        logged = [json.loads(line)['iter'] for line in f
                  if '"loss"' in line]
    assert logged == list(range(1, iteration))


def test_nan_in_input_image_names_the_file(synthetic_coco, tmp_path,
                                           monkeypatch):
    # Float images (read unchanged, as float32), one with a NaN pixel. PFM,
    # not TIFF: OpenCV 4.x writes a float TIFF's NaN as 0, 5.x keeps it.
    with open(osp.join(synthetic_coco, 'annotations',
                       'instances_train.json')) as f:
        coco = json.load(f)
    coco['images'] = coco['images'][:2]
    kept = {im['id'] for im in coco['images']}
    coco['annotations'] = [
        a for a in coco['annotations'] if a['image_id'] in kept
    ]
    for index, image in enumerate(coco['images']):
        pixels = cv2.imread(
            osp.join(synthetic_coco, 'train', image['file_name']))
        pixels = pixels.astype(np.float32)
        if index == 1:
            pixels[5, 7, 1] = np.nan
        image['file_name'] = f'float_{index}.pfm'
        path = str(tmp_path / image['file_name'])
        assert cv2.imwrite(path, pixels)
        written = cv2.imread(path, cv2.IMREAD_UNCHANGED)
        assert np.isnan(written).sum() == (index == 1)
    ann_file = tmp_path / 'float_images.json'
    ann_file.write_text(json.dumps(coco))

    cfg = retinanet_cfg(
        synthetic_coco, tmp_path / 'run', monkeypatch, **{
            'train_dataloader.dataset.ann_file': str(ann_file),
            'train_dataloader.dataset.data_prefix.img': str(tmp_path) + '/',
            'train_dataloader.dataset.pipeline.0.color_type': 'unchanged',
        })
    runner = Runner.from_cfg(cfg)
    with pytest.raises(ValueError) as error:
        runner.train()
    message = str(error.value)
    assert message.startswith('train iteration 1 (epoch 1): input image(s)')
    assert 'contain NaN or inf' in message
    assert str(tmp_path / 'float_1.pfm') in message


def test_loader_without_batches_is_refused(synthetic_coco, tmp_path,
                                           monkeypatch):
    # 8 images in batches of 16 with drop_last: no batch at all, so the
    # "training" would end at once with untrained weights.
    cfg = retinanet_cfg(
        synthetic_coco, tmp_path, monkeypatch, **{
            'train_dataloader.batch_size': 16,
            # mmdet's AspectRatioBatchSampler forms the batches.
            'train_dataloader.batch_sampler.drop_last': True,
        })
    runner = Runner.from_cfg(cfg)
    with pytest.raises(ValueError, match='the train data loader gives no '
                       'batches: 8 samples, batch size 16, drop_last=True'):
        runner.train()
    assert not (tmp_path / 'epoch_1.pth').exists()


def test_empty_batch_is_refused(synthetic_coco, tmp_path, monkeypatch):
    # The shipped samplers never form an empty batch (see the test above
    # for a loader without batches); a custom sampler or collate function
    # can. The hook of a real runner refuses one before the model sees it.
    runner = Runner.from_cfg(
        retinanet_cfg(synthetic_coco, tmp_path, monkeypatch))
    hook = finite_check_hook(runner)
    with pytest.raises(ValueError, match=r'train iteration 1 \(epoch 1\): '
                       'the data loader gave an empty batch'):
        hook.before_train_iter(runner, 0, dict(inputs=[], data_samples=[]))
    with pytest.raises(ValueError, match='test iteration 3: the data loader '
                       'gave an empty batch'):
        hook.before_test_iter(runner, 2, dict(inputs=[], data_samples=[]))


def test_the_check_reads_the_logged_losses_not_the_tensors(
        synthetic_coco, tmp_path, monkeypatch):
    """No device-to-host copy of its own: the hook judges the host floats
    that RuntimeInfoHook has logged. The loss tensors here are on the meta
    device, where reading a value raises."""
    runner = Runner.from_cfg(
        retinanet_cfg(synthetic_coco, tmp_path, monkeypatch))
    hook = finite_check_hook(runner)
    names = ('loss', 'loss_cls', 'loss_bbox')
    outputs = {name: torch.empty((), device='meta') for name in names}
    batch = dict(inputs=[torch.zeros(3, 8, 8, dtype=torch.uint8)],
                 data_samples=[])
    for name, value in zip(names, (1.5, 1.0, 0.5)):
        runner.message_hub.update_scalar(f'train/{name}', value)
    hook.after_train_iter(runner, 0, batch, outputs)

    runner.message_hub.update_scalar('train/loss', float('inf'))
    runner.message_hub.update_scalar('train/loss_bbox', float('inf'))
    with pytest.raises(FloatingPointError, match=r'^non-finite loss at '
                       r'iteration 1 \(epoch 1\): loss_bbox=inf; '):
        hook.after_train_iter(runner, 0, batch, outputs)


def test_without_the_logged_losses_the_check_refuses_to_start(
        synthetic_coco, tmp_path, monkeypatch):
    cfg = retinanet_cfg(synthetic_coco, tmp_path, monkeypatch,
                        **{'default_hooks.runtime_info': None})
    runner = Runner.from_cfg(cfg)
    with pytest.raises(ValueError, match='reads the losses that '
                       'RuntimeInfoHook logs'):
        runner.train()
