"""FLOPs and parameters of a classifier or detector config.

The built model is traced by mmengine's ``FlopAnalyzer`` (the counter
behind ``get_model_complexity_info``; one multiply-accumulate = one FLOP, as
in the PVT/SOFT/Swin papers), with handles for the ops it does not know:
our fused Laplacian-kernel and Newton–Schulz ops, softmax attention and the
whitening (``mmlaplacian/utils/flop_handles.py``).

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
from typing import Optional, Sequence, Tuple

from mmengine.config import DictAction

from mmlaplacian.engine import read_config
from mmlaplacian.utils.flop_handles import (BADDBMM, EXACT_INVERSE,
                                            LAPLACE_KERNEL, NEWTON_SCHULZ,
                                            SOFTMAX_ATTENTION,
                                            WHITENING_VARIANCE)
from mmlaplacian.utils.flops import ModelFlops, count_config

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
        '', '| module | params (M) | GFLOPs |', '|---|---:|---:|'
    ] + ['| ' + ' | '.join(row) + ' |' for row in rows]
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
    result, shape = count_config(cfg, args.shape)
    print(format_table(result, shape))
    return result


if __name__ == '__main__':
    main()
