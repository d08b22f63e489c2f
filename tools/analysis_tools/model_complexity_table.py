"""Markdown table of params / FLOPs of the five variants as classifiers.

Counts are analytic (``mmlaplacian.analysis.classifier_complexity``: the
ImageNet classifier of ``configs/imagenet``, 1000-class head, default
attention settings) and set beside the figures published for LaplacianFormer.
A column leaves out the Newton–Schulz inverse (``iters · 2m³`` per head and
block, independent of the image size), which jit-based counters cannot see;
``--verify`` also builds each backbone and checks the parameter count.

Example:
    python tools/analysis_tools/model_complexity_table.py --shape 224 224
"""
from __future__ import annotations

import argparse
from typing import Dict, Optional, Sequence, Tuple

from mmlaplacian.analysis import classifier_complexity
from mmlaplacian.models import LaplacianFormer

ARCHS = ('tiny', 'small', 'medium', 'large', 'huge')
# (params in M, GFLOPs) reported by the LaplacianFormer paper; None: not
# reported. Params target of DESIGN.md §4 (SOFT++ macro-architecture).
PAPER: Dict[str, Tuple[Optional[float], Optional[float]]] = {
    'tiny': (None, None),
    'small': (None, None),
    'medium': (46.3, 7.43),
    'large': (None, 11.2),
    'huge': (None, None),
}
TARGET_PARAMS = {'tiny': 13, 'small': 24, 'medium': 46, 'large': 65,
                 'huge': 87}


def _fmt(value: Optional[float], digits: int) -> str:
    return '—' if value is None else f'{value:.{digits}f}'


def _delta(ours: float, ref: Optional[float]) -> str:
    return '' if ref is None else f' ({100 * (ours - ref) / ref:+.1f}%)'


def make_table(shape: Tuple[int, int] = (224, 224),
               verify: bool = False) -> str:
    """The markdown table for all variants at input ``shape``."""
    lines = [
        f'| arch | params (M) | GFLOPs @{shape[0]}×{shape[1]} | GFLOPs '
        'without the Newton–Schulz inverse | paper params (M) | paper GFLOPs '
        '| params target (M, DESIGN §4) |',
        '|---|---:|---:|---:|---:|---:|---:|',
    ]
    for arch in ARCHS:
        report = classifier_complexity(shape, arch=arch)
        if verify:
            built = LaplacianFormer(arch, out_indices=(3, ))
            numel = sum(p.numel() for p in built.parameters())
            if numel != report.params - report.params_of('head'):
                raise AssertionError(f'{arch}: analytic params differ from '
                                     f'the built backbone ({numel})')
        params, gflops = report.params / 1e6, report.flops / 1e9
        no_inverse = gflops - sum(
            report.flops_of(f'stage{i}.attention.inverse')
            for i in range(1, 5)) / 1e9
        paper_params, paper_gflops = PAPER[arch]
        lines.append(
            f'| {arch} | {params:.2f}{_delta(params, paper_params)} | '
            f'{gflops:.2f}{_delta(gflops, paper_gflops)} | '
            f'{no_inverse:.2f}{_delta(no_inverse, paper_gflops)} | '
            f'{_fmt(paper_params, 1)} | {_fmt(paper_gflops, 2)} | '
            f'≈{TARGET_PARAMS[arch]} |')
    return '\n'.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--shape', type=int, nargs=2, default=(224, 224))
    parser.add_argument(
        '--verify',
        action='store_true',
        help='build every backbone and check the analytic parameter count')
    args = parser.parse_args(argv)
    table = make_table(tuple(args.shape), args.verify)
    print(table)
    return table


if __name__ == '__main__':
    main()
