"""The model to export: a detector built by mmdet's own ``init_detector``,
or a segmentor by mmseg's ``init_model``; the export tools' options that
choose it."""
from __future__ import annotations

import argparse
import copy
import logging
from typing import Optional, Sequence

import torch.nn as nn


def load_detector(cfg, checkpoint: Optional[str] = None) -> nn.Module:
    """``mmdet.apis.init_detector`` on the CPU, in eval mode.

    The backbone's ``init_cfg`` is dropped (a missing ImageNet checkpoint
    must not stop an export). Without ``checkpoint`` the weights come from
    ``init_weights`` under a fixed seed, so every process that loads the
    config gets the same random model.

    Args:
        cfg (Config): The detector config, options already merged.
        checkpoint (str, optional): Weights to load.

    Returns:
        nn.Module: The detector, with ``cfg`` as ``model.cfg``.
    """
    import torch
    from mmdet.apis import init_detector
    from mmengine.logging import MMLogger

    import mmlaplacian  # noqa: F401  (registers LaplacianFormer)

    cfg = copy.deepcopy(cfg)
    cfg.model.get('backbone', {}).pop('init_cfg', None)
    torch.manual_seed(0)
    # palette='random': no dataset is built just to read its palette.
    model = init_detector(cfg, checkpoint, palette='random', device='cpu')
    if checkpoint is None:
        # init_weights logs every parameter at INFO: keep the output short.
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(logging.WARNING)
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model.eval()


def backbone_for_export(arch: str,
                        checkpoint: Optional[str] = None) -> nn.Module:
    """A LaplacianFormer ``arch`` (no stochastic depth, in eval mode) as
    :class:`~mmlaplacian.deployment.BackboneForExport`, with the weights of
    ``checkpoint`` (in any layout ``load_pretrained`` reads) or random
    ones."""
    from mmlaplacian.models import LaplacianFormer

    from .export import BackboneForExport
    backbone = LaplacianFormer(arch, drop_path_rate=0.)
    if checkpoint:
        backbone.load_pretrained(checkpoint)
    return BackboneForExport(backbone.eval())


def is_segmentor_config(cfg) -> bool:
    """Whether ``cfg`` is an mmseg config (its default scope)."""
    return cfg.get('default_scope') == 'mmseg'


def load_model(cfg, checkpoint: Optional[str] = None) -> nn.Module:
    """The config's detector (:func:`load_detector`) or segmentor (mmseg's
    ``init_model``) on the CPU, in eval mode; without ``checkpoint``, random
    weights under a fixed seed, the same in every process."""
    if not is_segmentor_config(cfg):
        return load_detector(cfg, checkpoint)
    import torch
    from mmseg.apis import init_model

    import mmlaplacian  # noqa: F401  (registers LaplacianFormer)
    torch.manual_seed(0)
    return init_model(cfg, checkpoint, device='cpu').eval()


def add_model_arguments(parser: argparse.ArgumentParser,
                        shape: Sequence[int]) -> None:
    """The options of an export tool that choose the model and its input:
    ``--arch`` (a backbone), ``--config`` (a segmentor or detector
    instead), ``--checkpoint`` and ``--shape`` (default ``shape``)."""
    parser.add_argument('--arch', default='tiny', help='LaplacianFormer '
                        'variant of a backbone export (default tiny)')
    parser.add_argument('--config', help='an mmseg segmentor or mmdet '
                        'detector config (exports that model instead)')
    parser.add_argument('--checkpoint', help='weights (default: random): '
                        'the backbone\'s, in any layout it loads; with '
                        '--config, a checkpoint of that model (tools/'
                        'train.py)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        default=tuple(shape),
                        help='input size (static; default '
                        f'{shape[0]} {shape[1]})')
