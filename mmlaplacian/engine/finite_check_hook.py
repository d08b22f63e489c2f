"""Stop a run at the first non-finite input image or loss, and say where.

Without it a NaN loss trains on silently: the weights turn to NaN, the
logger prints ``loss: nan`` for the rest of the schedule, checkpoints of NaN
weights are saved and the evaluation ends in a zero AP with no hint of the
iteration or the loss term at fault.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch
from mmengine.hooks import Hook

from mmlaplacian.registry import HOOKS, register

DataBatch = Optional[Dict[str, Any]]


@register(HOOKS, 'HOOKS')
class FiniteCheckHook(Hook):
    """Raise at the first empty batch, non-finite input or non-finite loss.

    A data loader without batches is refused before its loop starts. Before
    every training, validation and test iteration the batch must hold
    at least one image, and floating-point images must be finite (integer
    images, as decoded from files, always are). After every training
    iteration each logged loss term must be finite. The error names the
    iteration (1-based, as the log prints it), the epoch, the loss terms at
    fault and the image files of the batch.

    It runs before the logger and the checkpoint hook, so the step whose
    loss was not finite is neither logged as normal nor saved.

    Args:
        check_inputs (bool): Check the input images. Defaults to True.
    """

    priority = 'ABOVE_NORMAL'

    def __init__(self, check_inputs: bool = True) -> None:
        self.check_inputs = check_inputs

    def before_train(self, runner) -> None:
        self._check_loader('train', runner.train_loop.dataloader)

    def before_val_epoch(self, runner) -> None:
        self._check_loader('val', runner.val_loop.dataloader)

    def before_test_epoch(self, runner) -> None:
        self._check_loader('test', runner.test_loop.dataloader)

    def before_train_iter(self, runner, batch_idx: int,
                          data_batch: DataBatch = None) -> None:
        self._check_batch(runner, 'train', runner.iter + 1, data_batch)

    def before_val_iter(self, runner, batch_idx: int,
                        data_batch: DataBatch = None) -> None:
        self._check_batch(runner, 'val', batch_idx + 1, data_batch)

    def before_test_iter(self, runner, batch_idx: int,
                         data_batch: DataBatch = None) -> None:
        self._check_batch(runner, 'test', batch_idx + 1, data_batch)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch: DataBatch = None,
                         outputs: Optional[dict] = None) -> None:
        if not outputs:
            return
        bad = {
            name: value
            for name, value in outputs.items()
            if name.startswith('loss') and not _is_finite(value)
        }
        if not bad:
            return
        terms = [n for n in bad if n != 'loss'] or list(bad)
        values = ', '.join(f'{n}={_as_float(bad[n])}' for n in terms)
        raise FloatingPointError(
            f'non-finite loss at iteration {runner.iter + 1} (epoch '
            f'{runner.epoch + 1}): {values}; images of the batch: '
            f'{_image_names(data_batch)}. Training stopped before this '
            'step was logged or saved. Lower the learning rate, clip the '
            'gradients (optim_wrapper.clip_grad=dict(max_norm=...)) or '
            'check these images and their annotations.')

    @staticmethod
    def _check_loader(mode: str, loader) -> None:
        # Without batches the loops run "epochs" of nothing: training ends
        # at once with untrained weights, evaluation scores zero images.
        if len(loader) == 0:
            # A batch sampler (mmdet's AspectRatioBatchSampler) holds them.
            sampler = getattr(loader, 'batch_sampler', None)
            source = loader if sampler is None else sampler
            batch = getattr(source, 'batch_size', None)
            drop_last = getattr(source, 'drop_last', None)
            raise ValueError(
                f'the {mode} data loader gives no batches: '
                f'{len(loader.dataset)} samples, batch size {batch}, '
                f'drop_last={drop_last}. Use more images, a smaller batch '
                'or drop_last=False.')

    def _check_batch(self, runner, mode: str, iteration: int,
                     data_batch: DataBatch) -> None:
        if data_batch is None:
            return
        inputs = data_batch.get('inputs')
        where = f'{mode} iteration {iteration}'
        if mode == 'train':
            where += f' (epoch {runner.epoch + 1})'
        if inputs is None or len(inputs) == 0:
            raise ValueError(
                f'{where}: the data loader gave an empty batch (no images). '
                'Check the dataset (an annotation file without images, or '
                'filter_cfg dropping every image) and the sampler.')
        if not self.check_inputs:
            return
        images = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        bad = [
            i for i, image in enumerate(images)
            if isinstance(image, torch.Tensor) and image.is_floating_point()
            and not torch.isfinite(image).all()
        ]
        if bad:
            names = _image_names(data_batch)
            raise ValueError(
                f'{where}: input image(s) {bad} of the batch contain NaN or '
                f'inf; images of the batch: {names}')


def _is_finite(value) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return all(_is_finite(v) for v in value)
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    return True


def _as_float(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _image_names(data_batch: DataBatch) -> List[str]:
    """The ``img_path`` of each sample, where the data samples carry one."""
    samples: Sequence = (data_batch or {}).get('data_samples') or []
    names = []
    for sample in samples:
        meta = getattr(sample, 'metainfo', None) or {}
        names.append(str(meta.get('img_path', '?')))
    return names
