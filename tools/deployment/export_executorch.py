"""Export a LaplacianFormer backbone to an ExecuTorch program for XNNPACK.

    python tools/deployment/export_executorch.py --arch tiny --shape 224 320 \
        --out work_dirs/lf_tiny.pte [--checkpoint checkpoints/lf_tiny_in1k.pth]

The program is run once in ExecuTorch's runtime and compared with eager
PyTorch; the operators left to ExecuTorch's portable kernels are listed.
Needs ``pip install executorch``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import torch

from mmlaplacian.deployment import BackboneForExport
from mmlaplacian.deployment.executorch_export import (export_executorch,
                                                      run_executorch)
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.ops import LAPLACE_FORMS

# The ONNX exports' feature tolerance (docs/deployment.md).
FEATURE_RTOL = 1e-4


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--arch', default='tiny', help='LaplacianFormer '
                        'variant (default tiny)')
    parser.add_argument('--checkpoint', help='backbone weights in any '
                        'layout the backbone loads (default: random)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        default=(224, 320), help='input size (static)')
    parser.add_argument('--laplace', choices=LAPLACE_FORMS, default='auto',
                        help='graph form of the Laplacian kernel')
    parser.add_argument('--out', required=True, help='output .pte file')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    backbone = LaplacianFormer(args.arch, drop_path_rate=0.)
    if args.checkpoint:
        backbone.load_pretrained(args.checkpoint)
    module = BackboneForExport(backbone.eval())
    image = torch.rand(1, 3, *args.shape,
                       generator=torch.Generator().manual_seed(0))
    result = export_executorch(module, image, args.out, args.laplace)
    print(f'wrote {result.path} in {result.seconds:.1f} s: '
          f'{result.delegated} XNNPACK subgraphs')
    portable = ', '.join(f'{name} x{count}'
                         for name, count in result.portable_ops.most_common())
    print(f'left to the portable kernels: {portable or "nothing"}')
    with torch.no_grad():
        expected = module(image)
    worst = max(
        float((got - ref).abs().max() / ref.abs().max())
        for got, ref in zip(run_executorch(result.path, [image]), expected))
    verdict = 'matches' if worst <= FEATURE_RTOL else 'DIFFERS FROM'
    print(f'ExecuTorch {verdict} eager: largest relative difference '
          f'{worst:.2e} (tolerance {FEATURE_RTOL})')
    return 0 if worst <= FEATURE_RTOL else 1


if __name__ == '__main__':
    sys.exit(main())
