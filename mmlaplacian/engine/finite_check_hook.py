"""Stop a run at the first non-finite loss, and say where.

Without it a NaN loss trains on silently: the weights turn to NaN, the
logger prints ``loss: nan`` for the rest of the schedule, checkpoints of NaN
weights are saved and the evaluation ends in a zero AP with no hint of the
iteration, the loss term or the image at fault.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch
from mmengine.hooks import Hook, RuntimeInfoHook

from mmlaplacian.registry import HOOKS, register

DataBatch = Optional[Dict[str, Any]]


@register(HOOKS, 'HOOKS')
class FiniteCheckHook(Hook):
    """Raise at the first non-finite training loss, naming the iteration,
    the loss terms and the images of the batch.

    The check costs no device-to-host copy: mmengine's ``RuntimeInfoHook``
    (a higher priority) has already copied every logged loss term to the
    host, into the message hub's ``train/<name>`` scalars, and this hook
    reads those floats. Only when one is not finite does it look at the
    batch: a floating-point input image that holds NaN or inf is named as
    the cause (integer images, as decoded from files, always are finite);
    otherwise the error names the loss terms at fault. Validation and test
    batches have no loss to read, so their images are not scanned: that
    would cost a pass over every input for the rare corrupt one.

    It runs before the logger and the checkpoint hook, so the step whose
    loss was not finite is neither logged as normal nor saved. It also
    refuses a data loader without batches before its loop starts, and a
    batch without images before its iteration.

    Raises:
        FloatingPointError: From ``after_train_iter``: a loss term is NaN or
            inf and the inputs are finite.
        ValueError: From ``after_train_iter``: a loss term is not finite and
            an input image holds NaN or inf; from the ``before_*`` methods:
            an empty loader or batch, or no ``RuntimeInfoHook`` to read the
            losses from.
    """

    priority = 'ABOVE_NORMAL'

    def before_train(self, runner) -> None:
        if not any(isinstance(h, RuntimeInfoHook) for h in runner.hooks):
            raise ValueError(
                'FiniteCheckHook reads the losses that RuntimeInfoHook logs; '
                'the config disables it (default_hooks.runtime_info=None)')
        self._check_loader('train', runner.train_loop.dataloader)

    def before_val_epoch(self, runner) -> None:
        self._check_loader('val', runner.val_loop.dataloader)

    def before_test_epoch(self, runner) -> None:
        self._check_loader('test', runner.test_loop.dataloader)

    def before_train_iter(self, runner, batch_idx: int,
                          data_batch: DataBatch = None) -> None:
        _check_not_empty(_where(runner, 'train', runner.iter + 1),
                         data_batch)

    def before_val_iter(self, runner, batch_idx: int,
                        data_batch: DataBatch = None) -> None:
        _check_not_empty(_where(runner, 'val', batch_idx + 1), data_batch)

    def before_test_iter(self, runner, batch_idx: int,
                         data_batch: DataBatch = None) -> None:
        _check_not_empty(_where(runner, 'test', batch_idx + 1), data_batch)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch: DataBatch = None,
                         outputs: Optional[dict] = None) -> None:
        logged = {
            name: runner.message_hub.get_scalar(f'train/{name}').current()
            for name in outputs or {} if name.startswith('loss')
        }
        bad = {n: v for n, v in logged.items() if not math.isfinite(v)}
        if not bad:
            return
        names = _image_names(data_batch)
        where = _where(runner, 'train', runner.iter + 1)
        images = _non_finite_images(data_batch)
        if images:
            raise ValueError(
                f'{where}: input image(s) {images} of the batch contain NaN '
                f'or inf; images of the batch: {names}')
        terms = [n for n in bad if n != 'loss'] or list(bad)
        values = ', '.join(f'{n}={bad[n]}' for n in terms)
        raise FloatingPointError(
            f'non-finite loss at iteration {runner.iter + 1} (epoch '
            f'{runner.epoch + 1}): {values}; images of the batch: {names}. '
            'Training stopped before this step was logged or saved. Lower '
            'the learning rate, clip the gradients (optim_wrapper.clip_grad='
            'dict(max_norm=...)) or check these images and their '
            'annotations.')

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


def _where(runner, mode: str, iteration: int) -> str:
    where = f'{mode} iteration {iteration}'
    if mode == 'train':
        where += f' (epoch {runner.epoch + 1})'
    return where


def _check_not_empty(where: str, data_batch: DataBatch) -> None:
    if data_batch is None:
        return
    inputs = data_batch.get('inputs')
    if inputs is None or len(inputs) == 0:
        raise ValueError(
            f'{where}: the data loader gave an empty batch (no images). '
            'Check the dataset (an annotation file without images, or '
            'filter_cfg dropping every image) and the sampler.')


def _non_finite_images(data_batch: DataBatch) -> List[int]:
    """Indices of the batch's floating-point input images with NaN or inf
    (the loader's tensors, before the data preprocessor)."""
    inputs = (data_batch or {}).get('inputs')
    if inputs is None:
        return []
    images = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    return [
        i for i, image in enumerate(images)
        if isinstance(image, torch.Tensor) and image.is_floating_point()
        and not torch.isfinite(image).all()
    ]


def _image_names(data_batch: DataBatch) -> List[str]:
    """The ``img_path`` of each sample, where the data samples carry one."""
    samples: Sequence = (data_batch or {}).get('data_samples') or []
    names = []
    for sample in samples:
        meta = getattr(sample, 'metainfo', None) or {}
        names.append(str(meta.get('img_path', '?')))
    return names
