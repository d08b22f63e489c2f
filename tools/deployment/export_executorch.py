"""Export a LaplacianFormer backbone, or an mmseg segmentor built on it, to
an ExecuTorch program for XNNPACK.

    python tools/deployment/export_executorch.py --arch tiny --shape 224 320 \
        --out work_dirs/lf_tiny.pte [--checkpoint checkpoints/lf_tiny_in1k.pth]
    python tools/deployment/export_executorch.py \
        --config configs/sem_fpn/lf_tiny_fpn_40k_ade20k.py [--checkpoint CKPT] \
        --shape 512 512 --out work_dirs/lf_tiny_fpn.pte

A segmentor's program takes the image as the pipeline loads it (BGR,
0-255) and returns the class logits at the input's size. The program is
run once in ExecuTorch's runtime and compared with eager PyTorch; the
operators left to ExecuTorch's portable kernels are listed. Detectors are
not exported this way: their NMS and RoI Align have no ExecuTorch kernels
(use export_onnx.py). Needs ``pip install executorch``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmlaplacian.deployment import BackboneForExport
from mmlaplacian.deployment.executorch_export import (export_executorch,
                                                      run_executorch)
from mmlaplacian.deployment.export import FEATURE_RTOL
from mmlaplacian.models import LaplacianFormer
from mmlaplacian.ops import LAPLACE_FORMS


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--arch', default='tiny', help='LaplacianFormer '
                        'variant of a backbone export (default tiny)')
    parser.add_argument('--config', help='an mmseg segmentor config '
                        '(exports the whole segmentor instead)')
    parser.add_argument('--checkpoint', help='weights (default: random): '
                        'the backbone\'s, in any layout it loads; with '
                        '--config, a checkpoint of that segmentor (mmseg '
                        'tools/train.py)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        default=(224, 320), help='input size (static)')
    parser.add_argument('--laplace', choices=LAPLACE_FORMS, default='auto',
                        help='graph form of the Laplacian kernel')
    parser.add_argument('--out', required=True, help='output .pte file')
    return parser.parse_args(argv)


def build_module(args: argparse.Namespace) -> Tuple[nn.Module, torch.Tensor]:
    """The module to export and its example input."""
    generator = torch.Generator().manual_seed(0)
    image = torch.rand(1, 3, *args.shape, generator=generator)
    if args.config is None:
        backbone = LaplacianFormer(args.arch, drop_path_rate=0.)
        if args.checkpoint:
            backbone.load_pretrained(args.checkpoint)
        return BackboneForExport(backbone.eval()), image
    from mmseg.apis import init_model

    from mmlaplacian.deployment.segmentors import SegmentorForExport
    # init_model leaves the backbone's init_cfg out: random weights, or the
    # whole segmentor's checkpoint.
    segmentor = init_model(args.config, args.checkpoint, device='cpu')
    return SegmentorForExport(segmentor.eval()), image * 255


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    module, image = build_module(args)
    result = export_executorch(module, image, args.out, args.laplace)
    print(f'wrote {result.path} in {result.seconds:.1f} s: '
          f'{result.delegated} XNNPACK subgraphs')
    portable = ', '.join(f'{name} x{count}'
                         for name, count in result.portable_ops.most_common())
    print(f'left to the portable kernels: {portable or "nothing"}')
    with torch.no_grad():
        expected = module(image)
    if isinstance(expected, torch.Tensor):
        expected = (expected, )
    got = run_executorch(result.path, [image])
    worst = max(
        float((out - ref).abs().max() / ref.abs().max())
        for out, ref in zip(got, expected))
    verdict = 'matches' if worst <= FEATURE_RTOL else 'DIFFERS FROM'
    print(f'ExecuTorch {verdict} eager: largest relative difference '
          f'{worst:.2e} (tolerance {FEATURE_RTOL})')
    if args.config is not None:
        agree = (got[0].argmax(1) == expected[0].argmax(1)).float().mean()
        print(f'label maps agree on {100 * float(agree):.2f}% of the pixels')
    return 0 if worst <= FEATURE_RTOL else 1


if __name__ == '__main__':
    sys.exit(main())
