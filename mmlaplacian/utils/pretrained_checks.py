"""What to say when the ImageNet checkpoint a config starts from is absent.

Every detection and segmentation config initialises its backbone from
``checkpoints/lf_<variant>_in1k.pth`` (``model.backbone.init_cfg``), and no
such checkpoint is published yet: mmengine's bare ``checkpoint file ... does
not exist`` leaves the user without a way on. Only the standard library is
used here.
"""
from __future__ import annotations

import os.path as osp
import re
from typing import Optional

_VARIANT = re.compile(r'lf_(?P<variant>[a-z]+)_in1k')


class PretrainedNotFoundError(FileNotFoundError):
    """The backbone's ``Pretrained`` checkpoint is missing; the message
    gives the three ways on."""


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
