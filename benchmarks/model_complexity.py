"""Markdown table of params / FLOPs of the five variants as classifiers.

Each ImageNet classifier of ``configs/imagenet`` (1000-class head, default
attention settings) is built and traced by ``mmlaplacian.utils.flops``, the
counter of ``tools/analysis_tools/get_flops.py`` (mmengine's
``FlopAnalyzer`` with handles for our ops), and its figures are
set beside those published for LaplacianFormer and the parameter counts
of SOFT's variants of the same names, which the layouts aim at (SOFT++'s
macro-architecture: head width 32, MLP ratio 4). A column leaves out the
Newton–Schulz inverse (``iters · 2m³`` per head and block, independent of
the image size). ``--verify`` also checks that the parameter count is
``sum(p.numel())``, that the trace met no custom op without a FLOP handle
and that the Newton–Schulz handle fired.

Example:
    python -m benchmarks.model_complexity --shape 224 224
"""
from __future__ import annotations

import argparse
import os.path as osp
from typing import Dict, Optional, Sequence, Tuple

from mmlaplacian.engine import read_config
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.utils.flops import ModelFlops, build_model, count_config

from benchmarks.harness import REPO_ROOT
from benchmarks.tables import markdown_table

CONFIG_DIR = osp.join(REPO_ROOT, 'configs', 'imagenet')

ARCHS = ('tiny', 'small', 'medium', 'large', 'huge')
# (params in M, GFLOPs) reported by the LaplacianFormer paper; None: not
# reported.
PAPER: Dict[str, Tuple[Optional[float], Optional[float]]] = {
    'tiny': (None, None),
    'small': (None, None),
    'medium': (46.3, 7.43),
    'large': (None, 11.2),
    'huge': (None, None),
}
# Params in M of SOFT's variant of the same name, with a 1000-class head.
SOFT_PARAMS = {'tiny': 13, 'small': 24, 'medium': 46, 'large': 65,
               'huge': 87}


def _fmt(value: Optional[float], digits: int) -> str:
    return '—' if value is None else f'{value:.{digits}f}'


def _delta(ours: float, ref: Optional[float]) -> str:
    return '' if ref is None else f' ({100 * (ours - ref) / ref:+.1f}%)'


def classifier_flops(arch: str, shape: Tuple[int, int],
                     verify: bool = False) -> ModelFlops:
    """Build the ImageNet classifier of ``arch`` and count it at ``shape``.

    Raises:
        AssertionError: With ``verify``, when the parameters are not
            ``sum(p.numel())``, a custom op went uncounted or no
            Newton–Schulz FLOPs were found.
    """
    cfg = read_config(osp.join(CONFIG_DIR, f'lf_{arch}_in1k.py'))
    result, _ = count_config(cfg, shape)
    if verify:
        model, _ = build_model(cfg)
        numel = sum(p.numel() for p in model.parameters())
        if result.params != numel:
            raise AssertionError(f'{arch}: counted {result.params} params, '
                                 f'the built classifier has {numel}')
        if result.uncounted_python_ops:
            raise AssertionError(f'{arch}: custom ops without a FLOP handle: '
                                 f'{dict(result.uncounted_python_ops)}')
        if result.newton_schulz_flops <= 0:
            raise AssertionError(f'{arch}: no Newton–Schulz FLOPs counted')
    return result


def make_table(shape: Tuple[int, int] = (224, 224),
               verify: bool = False,
               archs: Sequence[str] = ARCHS) -> str:
    """The markdown table for the variants ``archs`` at input ``shape``."""
    header = [
        'arch', 'embed dims', 'depths', 'params (M)',
        f'GFLOPs @{shape[0]}×{shape[1]}',
        'GFLOPs without the Newton–Schulz inverse', 'paper params (M)',
        'paper GFLOPs', 'SOFT-like target (M)'
    ]
    rows = []
    for arch in archs:
        result = classifier_flops(arch, shape, verify)
        params, gflops = result.params / 1e6, result.flops / 1e9
        no_inverse = gflops - result.newton_schulz_flops / 1e9
        paper_params, paper_gflops = PAPER[arch]
        layout = LaplacianFormer.arch_zoo[arch]
        rows.append([
            arch, ','.join(map(str, layout['embed_dims'])),
            ','.join(map(str, layout['depths'])),
            f'{params:.2f}{_delta(params, paper_params)}',
            f'{gflops:.2f}{_delta(gflops, paper_gflops)}',
            f'{no_inverse:.2f}{_delta(no_inverse, paper_gflops)}',
            _fmt(paper_params, 1), _fmt(paper_gflops, 2),
            f'≈{SOFT_PARAMS[arch]}'
        ])
    return markdown_table(header, rows, 'lllrrrrrr')


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--shape', type=int, nargs=2, default=(224, 224))
    parser.add_argument(
        '--verify',
        action='store_true',
        help='check the parameter counts against sum(p.numel()) and that '
        'every custom op was counted')
    parser.add_argument(
        '--archs', nargs='+', default=list(ARCHS), choices=ARCHS,
        help='variants to count (default: all)')
    args = parser.parse_args(argv)
    table = make_table(tuple(args.shape), args.verify, args.archs)
    print(table)
    return table


if __name__ == '__main__':
    main()
