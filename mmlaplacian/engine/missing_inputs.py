"""Missing datasets and checkpoints, found before any model is built.

``tools/train.py`` and ``tools/test.py`` check on the config that the
datasets and the backbone's ImageNet checkpoint exist. The same checks run
again inside ``CheckedCocoDataset`` and the backbone's ``init_weights`` (for
mmdet's own tools); here they come first, and the tools print them as a few
lines instead of a traceback.
"""
from __future__ import annotations

import os.path as osp
import sys
from typing import Any, Callable, Iterator, Tuple

from mmengine.config import Config

from mmlaplacian.datasets.dataset_roots import (DatasetNotFoundError,
                                                check_dataset_paths)
from mmlaplacian.models.checkpoint import (PretrainedNotFoundError,
                                           check_pretrained_checkpoint)

# What the tools print without a traceback.
MISSING_INPUT_ERRORS = (DatasetNotFoundError, PretrainedNotFoundError)
_WRAPPER_KEYS = ('dataset', 'datasets')


def _join(root: str, path: Any) -> Any:
    """``path`` as mmengine's ``BaseDataset`` resolves it."""
    if not isinstance(path, str) or not path or osp.isabs(path) or not root:
        return path
    return osp.join(root, path)


def _leaf_datasets(dataset: Any, where: str) -> Iterator[Tuple[dict, str]]:
    """The datasets inside wrappers (``RepeatDataset``, ``ConcatDataset``)."""
    if not isinstance(dataset, dict):
        return
    if any(k in dataset for k in _WRAPPER_KEYS):
        inner = dataset.get('dataset', dataset.get('datasets'))
        for i, item in enumerate(inner if isinstance(inner, (list, tuple))
                                 else [inner]):
            yield from _leaf_datasets(item, f'{where}.datasets[{i}]' if
                                      'datasets' in dataset else
                                      f'{where}.dataset')
        return
    yield dataset, where


def check_dataloader(cfg: Config, name: str, task: str) -> None:
    """Raise ``DatasetNotFoundError`` if ``cfg[name]``'s dataset is absent."""
    loader = cfg.get(name)
    if not isinstance(loader, dict):
        return
    for dataset, where in _leaf_datasets(
            loader.get('dataset'), f'{name}.dataset'):
        root = dataset.get('data_root') or ''
        prefix = dataset.get('data_prefix') or {}
        folders = [_join(root, p) for p in prefix.values()
                   if isinstance(p, str) and p]
        check_dataset_paths(root or None, _join(root, dataset.get('ann_file')),
                            folders, where, task)


def check_evaluator(cfg: Config, name: str, task: str) -> None:
    """Raise ``DatasetNotFoundError`` if an ``ann_file`` of ``cfg[name]``
    (COCO evaluation reads its own copy) is absent."""
    evaluators = cfg.get(name)
    if isinstance(evaluators, dict):
        evaluators = [evaluators]
    for evaluator in evaluators or []:
        ann_file = evaluator.get('ann_file') if isinstance(evaluator,
                                                           dict) else None
        if ann_file:
            check_dataset_paths(None, ann_file, [], f'{name}.ann_file', task)


def _backbones(model: Any, where: str = 'model') -> Iterator[Tuple[dict, str]]:
    """LaplacianFormer configs anywhere in the model config."""
    if isinstance(model, dict):
        if str(model.get('type', '')).endswith('LaplacianFormer'):
            yield model, where
        for key, value in model.items():
            yield from _backbones(value, f'{where}.{key}')
    elif isinstance(model, (list, tuple)):
        for i, value in enumerate(model):
            yield from _backbones(value, f'{where}[{i}]')


def check_pretrained(cfg: Config) -> None:
    """Raise ``PretrainedNotFoundError`` if a LaplacianFormer's
    ``Pretrained`` checkpoint is absent."""
    for backbone, _ in _backbones(cfg.get('model')):
        init_cfgs = backbone.get('init_cfg')
        if not isinstance(init_cfgs, (list, tuple)):
            init_cfgs = [init_cfgs]
        for init_cfg in init_cfgs:
            if isinstance(init_cfg, dict) and init_cfg.get(
                    'type') == 'Pretrained':
                check_pretrained_checkpoint(
                    init_cfg.get('checkpoint'), backbone.get('arch'))


def task_of(cfg: Config) -> str:
    return ('segmentation' if cfg.get('default_scope') == 'mmseg' else
            'detection')


def check_train_inputs(cfg: Config) -> None:
    """The training (and, when it runs, validation) data and the
    backbone's ImageNet checkpoint exist; raises one of
    :data:`MISSING_INPUT_ERRORS` otherwise."""
    task = task_of(cfg)
    check_dataloader(cfg, 'train_dataloader', task)
    if cfg.get('val_cfg') is not None:
        check_dataloader(cfg, 'val_dataloader', task)
        check_evaluator(cfg, 'val_evaluator', task)
    check_pretrained(cfg)


def check_test_inputs(cfg: Config) -> None:
    """The test data exist (the weights come from the trained checkpoint,
    so the ImageNet one is not needed)."""
    task = task_of(cfg)
    check_dataloader(cfg, 'test_dataloader', task)
    check_evaluator(cfg, 'test_evaluator', task)


def main_without_traceback(main: Callable[[], None], prog: str) -> None:
    """Run a tool's ``main``; a missing dataset or checkpoint is printed as
    its message (no traceback) with exit status 2, as for bad arguments."""
    try:
        main()
    except MISSING_INPUT_ERRORS as error:
        print(f'{prog}: error: {error}', file=sys.stderr)
        sys.exit(2)
