"""Compile a model ahead of time into an AOTInductor package for the CPU.

The model is a LaplacianFormer backbone, an mmseg segmentor or an mmdet
detector's dense part:

    python tools/deployment/export_aoti.py --arch tiny --shape 800 1344 \
        --out work_dirs/lf_tiny_800x1344.pt2 \
        [--checkpoint checkpoints/lf_tiny_in1k.pth]
    python tools/deployment/export_aoti.py \
        --config configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py \
        --checkpoint work_dirs/quickstart_seg/iter_900.pth --shape 96 96 \
        --out work_dirs/seg.pt2
    python tools/deployment/export_aoti.py \
        --config configs/quickstart/mask_rcnn_lf_tiny_synthetic.py \
        --checkpoint work_dirs/quickstart/epoch_8.pth --shape 192 192 \
        --out work_dirs/mask_rcnn_dense.pt2

The package runs float32 at the one input size it was made for, with the
weights frozen in (``mmlaplacian.deployment.aoti_export``). A backbone's
takes the normalised RGB image and returns its feature maps; a segmentor's
takes the image as the pipeline loads it (BGR, 0-255) and returns the class
logits; a detector's is its dense part (preprocessing, backbone, neck and
dense head, as in the ExecuTorch and ONNX exports), whose outputs the host
decodes and filters by NMS.

The package is loaded in a fresh interpreter, run once and compared with
eager PyTorch within the ONNX exports' tolerance (exit status 1 beyond it).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

import torch
import torch.nn as nn

from mmlaplacian.deployment.aoti_export import PACKAGE_SUFFIX, export_aoti
from mmlaplacian.deployment.export import (FEATURE_RTOL, eager_outputs,
                                           largest_relative_difference)
from mmlaplacian.deployment.loading import (add_model_arguments,
                                            backbone_for_export)

# Run in a fresh interpreter: the package's outputs for the saved input.
RUN_PACKAGE = '''
import sys, torch
from mmlaplacian.deployment.aoti_export import load_aoti
image, out, path = sys.argv[1:]
torch.save(load_aoti(path)(torch.load(image)), out)
'''


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_model_arguments(parser, shape=(800, 1344))
    parser.add_argument('--no-freezing', dest='freezing',
                        action='store_false',
                        help='keep the weights as inputs of the compiled '
                        'code instead of folding and packing them')
    parser.add_argument('--out', required=True, help='output .pt2 package')
    args = parser.parse_args(argv)
    if not args.out.endswith(PACKAGE_SUFFIX):
        parser.error(f'--out must be a {PACKAGE_SUFFIX} file, got '
                     f'{args.out!r}')
    if min(args.shape) < 1:
        parser.error('--shape needs positive sizes')
    return args


def build_module(args: argparse.Namespace) -> nn.Module:
    """The backbone, the segmentor or the detector's dense part."""
    if args.config is None:
        return backbone_for_export(args.arch, args.checkpoint)
    from mmengine.config import Config

    from mmlaplacian.deployment import (SegmentorForExport,
                                        build_exportable_detector)
    from mmlaplacian.deployment.loading import (is_segmentor_config,
                                                load_model)
    cfg = Config.fromfile(args.config)
    model = load_model(cfg, args.checkpoint)
    if is_segmentor_config(cfg):
        return SegmentorForExport(model).eval()
    return build_exportable_detector(model).eval().dense


def run_in_fresh_interpreter(path: str, image: torch.Tensor, work: str):
    """The package's outputs on ``image``, as a new process gets them."""
    image_file, out_file = f'{work}/image.pt', f'{work}/outputs.pt'
    torch.save(image, image_file)
    subprocess.run([sys.executable, '-c', RUN_PACKAGE, image_file, out_file,
                    path], check=True)
    return torch.load(out_file)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    module = build_module(args)
    generator = torch.Generator().manual_seed(0)
    image = torch.rand(1, 3, *args.shape, generator=generator)
    if args.config is not None:
        image = image * 255
    result = export_aoti(module, image, args.out, freezing=args.freezing)
    linears = ', '.join(f'{kind} x{count}' for kind, count in
                        result.linear_kernels.most_common()) or 'none'
    print(f'wrote {result.path}: exported in {result.export_seconds:.1f} s, '
          f'compiled in {result.compile_seconds:.1f} s; linear layers: '
          f'{linears}')
    with tempfile.TemporaryDirectory() as work:
        got = run_in_fresh_interpreter(result.path, image, work)
    expected = eager_outputs(module, image)
    worst = largest_relative_difference(got, expected)
    verdict = 'matches' if worst <= FEATURE_RTOL else 'DIFFERS FROM'
    print(f'the package {verdict} eager: largest relative difference '
          f'{worst:.2e} over {len(got)} outputs (tolerance {FEATURE_RTOL})')
    return 0 if worst <= FEATURE_RTOL else 1


if __name__ == '__main__':
    sys.exit(main())
