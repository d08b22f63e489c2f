"""Checkpoint files: reading one from a path or URL, and what to say when the
backbone's ImageNet checkpoint is absent.

With mmengine installed its ``CheckpointLoader`` reads the file, so every
scheme an OpenMMLab user may write in ``init_cfg`` (``open-mmlab://``,
``torchvision://``, ``s3://``, ...) works as it does for mmdet's own
backbones. Without it, local files and ``http(s)://`` URLs are read by torch
alone. A checkpoint is pickled Python and is unpickled in full (training
state included): load only files from a source you trust.
"""
from __future__ import annotations

import importlib.util
import os.path as osp
import re
from typing import Any, Optional

import torch

_VARIANT = re.compile(r'lf_(?P<variant>[a-z]+)_in1k')


class PretrainedNotFoundError(FileNotFoundError):
    """The backbone's ``Pretrained`` checkpoint is missing; the message
    gives the three ways on."""


def load_local_checkpoint(filename: str, map_location: Any = None) -> Any:
    """Unpickle the local checkpoint ``filename`` (a full one included).

    Raises:
        FileNotFoundError: When the file does not exist.
        RuntimeError: When it is no readable PyTorch checkpoint.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint file "{filename}" does not exist')
    try:
        # Full checkpoints hold optimizer state, numpy scalars and
        # mmengine's message hub, which the weights-only unpickler refuses.
        return torch.load(filename, map_location=map_location,
                          weights_only=False)
    except Exception as err:  # pickle, zip and torch errors vary by version
        raise RuntimeError(
            f'"{filename}" is not a readable PyTorch checkpoint: '
            f'{type(err).__name__}: {err}') from err


def load_checkpoint_file(checkpoint: str, map_location: Any = 'cpu') -> Any:
    """Load ``checkpoint`` (a path or URL) onto ``map_location``.

    Raises:
        FileNotFoundError: For a local path that does not exist.
        RuntimeError: For a file that is no readable PyTorch checkpoint.
        ValueError: For a scheme only mmengine reads, without mmengine.
    """
    if importlib.util.find_spec('mmengine') is not None:
        from mmengine.runner.checkpoint import CheckpointLoader
        return CheckpointLoader.load_checkpoint(
            checkpoint, map_location=map_location)
    if str(checkpoint).startswith(('http://', 'https://')):
        return torch.hub.load_state_dict_from_url(
            checkpoint, map_location=map_location, weights_only=False)
    if '://' in str(checkpoint):
        raise ValueError(
            f'{checkpoint}: the scheme {str(checkpoint).split("://")[0]}:// '
            'is read by mmengine\'s CheckpointLoader, which is not installed;'
            ' use a local file or an http(s):// URL, or pip install mmengine')
    return load_local_checkpoint(checkpoint, map_location=map_location)


def missing_pretrained_message(checkpoint: str,
                               arch: Optional[str] = None) -> str:
    """A few lines: the file looked for, that none is published, and how
    to pretrain, convert or train from scratch instead."""
    found = _VARIANT.search(osp.basename(checkpoint))
    variant = arch if isinstance(arch, str) else (
        found['variant'] if found else '<variant>')
    return '\n'.join([
        f'No such file or directory: {checkpoint} (model.backbone.init_cfg: '
        'the ImageNet-1k checkpoint the backbone starts from).',
        'No ImageNet checkpoint of LaplacianFormer is published yet. Three '
        'ways on:',
        f'  1. pretrain it with mmpretrain: bash tools/dist_train.sh '
        f'configs/imagenet/lf_{variant}_in1k.py 8 --auto-scale-lr, then copy '
        f'the checkpoint named by work_dirs/lf_{variant}_in1k/last_checkpoint '
        f'to {checkpoint};',
        f'  2. convert SOFT-style (or timm-style) weights: python tools/'
        f'model_converters/laplacianformer_to_mmdet.py SRC.pth {checkpoint} '
        f'--arch {variant};',
        '  3. train from scratch: --cfg-options model.backbone.init_cfg=None. '
        'Its cost is unmeasured for LaplacianFormer; detectors and segmenters '
        'trained from scratch are known to lose several AP (mIoU) points on '
        'the same schedule and to need longer schedules.',
    ])


def check_pretrained_checkpoint(checkpoint: Optional[str],
                                arch: Optional[str] = None) -> None:
    """Raise :class:`PretrainedNotFoundError` if ``checkpoint`` is a local
    path that does not exist (URLs and ``None`` pass).

    Args:
        checkpoint (str, optional): ``init_cfg['checkpoint']``.
        arch (str, optional): The backbone's variant, for the commands;
            taken from the file name (``lf_<variant>_in1k``) when not given.
    """
    if checkpoint and '://' not in str(checkpoint) and not osp.isfile(
            checkpoint):
        raise PretrainedNotFoundError(
            missing_pretrained_message(str(checkpoint), arch))
