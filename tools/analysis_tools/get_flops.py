"""FLOPs and parameters of a classifier or detector config.

The built model is traced by mmengine's ``FlopAnalyzer`` (the counter
behind ``get_model_complexity_info``; one multiply-accumulate = one FLOP, as
in the PVT/SOFT/Swin papers), with handles for the ops it does not know:
our fused Laplacian-kernel and Newton–Schulz ops, softmax attention and the
whitening (see ``flop_handles.py`` beside this script).

Detector FLOPs are those of ``mode='tensor'`` (backbone, neck, heads; no
post-processing); the RoI heads of two-stage detectors depend on how many
proposals survive on the random input, as in mmdet's own tool.

Example:
    python tools/analysis_tools/get_flops.py configs/imagenet/lf_tiny_in1k.py
    python tools/analysis_tools/get_flops.py configs/mask_rcnn/lf_tiny_1x.py \\
        --shape 800 1333
"""
from __future__ import annotations

import argparse
import importlib
import math
import os.path as osp
import sys
from functools import partial
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.config import Config, DictAction
from mmengine.registry import init_default_scope

# The FLOP counter lives beside this script; the repository root comes next
# so that a source checkout runs without installing.
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from flop_handles import (BADDBMM, EXACT_INVERSE,  # noqa: E402
                          LAPLACE_KERNEL, NEWTON_SCHULZ, SOFTMAX_ATTENTION,
                          WHITENING_VARIANCE)
from markdown_table import markdown_table  # noqa: E402
from model_flops import ModelFlops, count_model_flops  # noqa: E402

from mmlaplacian.engine import read_config  # noqa: E402

OUR_OPS = (LAPLACE_KERNEL, NEWTON_SCHULZ, EXACT_INVERSE, WHITENING_VARIANCE,
           BADDBMM, SOFTMAX_ATTENTION)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='FLOPs (MACs) and parameters of a model config')
    parser.add_argument('config', help='classifier or detector config')
    parser.add_argument(
        '--shape',
        type=int,
        nargs='+',
        help='input H W (or one size for a square); defaults: 224 224 for '
        'a classifier, 800 1333 for a detector')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override config settings, key=value')
    return parser.parse_args(argv)


def build_model(cfg: Config) -> Tuple[nn.Module, str]:
    """Build ``cfg.model`` in its config's scope; returns model and scope."""
    scope = cfg.get('default_scope', 'mmdet')
    init_default_scope(scope)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    model_cfg = cfg.model.copy()
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    return registry.build(model_cfg), scope


def _detector_inputs(model: nn.Module, shape: Tuple[int, int]):
    from mmdet.structures import DetDataSample
    divisor = getattr(model.data_preprocessor, 'pad_size_divisor', 1) or 1
    padded = tuple(math.ceil(s / divisor) * divisor for s in shape)
    sample = DetDataSample(
        metainfo=dict(
            img_shape=shape,
            ori_shape=shape,
            pad_shape=padded,
            batch_input_shape=padded,
            scale_factor=(1.0, 1.0)))
    return torch.rand(1, 3, *padded), [sample]


def count(cfg: Config, shape: Optional[Sequence[int]] = None
          ) -> Tuple[ModelFlops, Tuple[int, int]]:
    """Build the model of ``cfg`` and count it on one image.

    Args:
        cfg (Config): A classifier (mmpretrain) or detector (mmdet) config.
        shape (Sequence[int], optional): ``(H, W)`` or ``(S, )``.

    Returns:
        tuple[ModelFlops, tuple[int, int]]: The counts and the input shape
        actually fed (a detector's input is padded like its preprocessor).
    """
    model, scope = build_model(cfg)
    model.eval()
    if shape is None:
        shape = (224, 224) if scope == 'mmpretrain' else (800, 1333)
    shape = (shape[0], shape[0]) if len(shape) == 1 else tuple(shape[:2])
    if scope == 'mmdet':
        inputs, samples = _detector_inputs(model, shape)
    else:
        inputs, samples = torch.rand(1, 3, *shape), None
    model.forward = partial(model.forward, data_samples=samples, mode='tensor')
    result = count_model_flops(model, (inputs, ))
    return result, tuple(inputs.shape[-2:])


def format_table(result: ModelFlops, shape: Tuple[int, int]) -> str:
    """Markdown table of params and GFLOPs per top-level module."""
    rows = [[name, f'{result.params_by_module[name] / 1e6:.2f}',
             f'{flops / 1e9:.3f}']
            for name, flops in result.flops_by_module.items()
            if flops or result.params_by_module[name]]
    rows.append(['**total**', f'**{result.params / 1e6:.2f}**',
                 f'**{result.flops / 1e9:.3f}**'])
    lines = [
        f'input 1x3x{shape[0]}x{shape[1]}; FLOPs are multiply-accumulates',
        '', markdown_table(['module', 'params (M)', 'GFLOPs'], rows, 'lrr')
    ]
    ours = [(op, result.by_operator.get(op, 0)) for op in OUR_OPS]
    lines += [
        '', 'counted by our op handles (GFLOPs): ' + ', '.join(
            f'{op} {flops / 1e9:.3f}' for op, flops in ours if flops)
    ]
    if result.uncounted_python_ops:
        # mmcv's RoIAlign and NMS land here, uncounted as in mmdet's tool.
        lines.append('not counted (custom ops without a FLOP handle): '
                     f'{dict(result.uncounted_python_ops)}')
    return '\n'.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> ModelFlops:
    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    result, shape = count(cfg, args.shape)
    print(format_table(result, shape))
    return result


if __name__ == '__main__':
    main()
