"""Export a LaplacianFormer backbone, an mmseg segmentor or an mmdet
detector built on it to an ExecuTorch program for XNNPACK, in float32 or
static int8.

    python tools/deployment/export_executorch.py --arch tiny --shape 224 320 \
        --out work_dirs/lf_tiny.pte [--checkpoint checkpoints/lf_tiny_in1k.pth]
    python tools/deployment/export_executorch.py \
        --config configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py \
        --checkpoint work_dirs/quickstart_seg/iter_900.pth --shape 96 96 \
        --out work_dirs/seg_int8.pte --quantize int8
    python tools/deployment/export_executorch.py \
        --config configs/quickstart/mask_rcnn_lf_tiny_synthetic.py \
        --checkpoint work_dirs/quickstart/epoch_8.pth --shape 192 192 \
        --out work_dirs/mask_rcnn.pte

A backbone's program takes the normalised RGB image and returns its feature
maps. A segmentor's takes the image as the pipeline loads it (BGR, 0-255)
and returns the class logits at the input's size. A detector becomes its
networks' programs (:func:`~mmlaplacian.deployment.
export_detector_executorch`: the dense part, and a two-stage detector's
RoI heads in a second file); its NMS and RoI Align run on the host.

float32: the program is run once in ExecuTorch's runtime and compared with
eager PyTorch within the ONNX exports' tolerance (exit status 1 beyond it).
int8 (``--quantize int8``): PT2E static quantization calibrated on
``--calibration-count`` images of ``--calibration-images`` (default: the
quick start's training images for a backbone, the config's own training
images otherwise); the program's outputs on a few further images of that
folder are compared with eager float32 (correlation per output, and the
label agreement of a segmentor). The operators left to ExecuTorch's
portable kernels are listed. Needs ``pip install executorch``.
"""
from __future__ import annotations

import argparse
import os.path as osp
import sys
from collections import Counter
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmlaplacian.deployment.calibration import calibration_inputs
from mmlaplacian.deployment.executorch_export import (
    EXECUTORCH_LAPLACE_FORMS, INT8_FLOAT_PARTS, XNNPACK_BLOCK_ELEMENTS,
    ExecuTorchResult, export_executorch, run_executorch)
from mmlaplacian.deployment.export import (FEATURE_RTOL, eager_outputs,
                                           largest_relative_difference)
from mmlaplacian.deployment.loading import (add_model_arguments,
                                            backbone_for_export)

# The quick start's training images: a backbone's default calibration set.
BACKBONE_CALIBRATION_IMAGES = 'data/synthetic_coco/train'
# Images beyond the calibration set on which int8 is compared with float32.
CHECK_IMAGES = 4


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_model_arguments(parser, shape=(224, 320))
    parser.add_argument(
        '--laplace', choices=EXECUTORCH_LAPLACE_FORMS, default='auto',
        help='graph form of the Laplacian kernel; operator: keep our '
        'operator, and LayerNorm, run by our ExecuTorch kernels (faster; '
        'the runtime needs mmlaplacian._executorch_kernels, '
        'docs/deployment.md)')
    parser.add_argument(
        '--block-elements', type=int, default=XNNPACK_BLOCK_ELEMENTS,
        help='element budget of one row block of the row-blocks kernel '
        f'(default {XNNPACK_BLOCK_ELEMENTS}; smaller for a device with a '
        'smaller cache)')
    parser.add_argument('--quantize', choices=('int8', ),
                        help='static int8 (PT2E, XNNPACK quantizer)')
    parser.add_argument('--calibration-images', metavar='DIR',
                        help='int8 calibration images (default: '
                        f'{BACKBONE_CALIBRATION_IMAGES} for a backbone, '
                        'the config\'s training images with --config)')
    parser.add_argument('--calibration-count', type=int, default=32,
                        metavar='N', help='calibration images (default 32)')
    parser.add_argument(
        '--float-parts', nargs='*', metavar='PART',
        help='with --quantize int8: parts left in float32, of '
        f'{", ".join(float_part_names())} (default: '
        f'{" ".join(INT8_FLOAT_PARTS)}; the flag alone quantizes all the '
        'quantizer takes)')
    parser.add_argument('--out', required=True, help='output .pte file')
    args = parser.parse_args(argv)
    if args.calibration_count < 1:
        parser.error('--calibration-count must be at least 1')
    if args.block_elements < 1:
        parser.error('--block-elements must be at least 1')
    if args.quantize is None and args.calibration_images:
        parser.error('--calibration-images is for --quantize int8')
    if args.quantize is None and args.float_parts is not None:
        parser.error('--float-parts is for --quantize int8')
    if args.float_parts:
        # Checked before the model is built; int8 needs executorch anyway.
        from mmlaplacian.deployment.pt2e_quantization import \
            check_float_parts
        try:
            check_float_parts(args.float_parts)
        except ValueError as err:
            parser.error(f'--float-parts: {err}')
    return args


def float_part_names() -> List[str]:
    """The parts ``--float-parts`` can name (the int8 module loads only
    where executorch is installed)."""
    try:
        from mmlaplacian.deployment.pt2e_quantization import PARTS
    except ImportError:
        return list(INT8_FLOAT_PARTS)
    return sorted(PARTS)


def training_image_folder(cfg) -> str:
    """The image folder of a config's training set (through dataset
    wrappers such as ``RepeatDataset``)."""
    dataset = cfg.train_dataloader.dataset
    while 'dataset' in dataset:
        dataset = dataset.dataset
    prefix = dataset.get('data_prefix', {})
    images = prefix.get('img_path', prefix.get('img', ''))
    return osp.join(dataset.get('data_root', ''), images)


def is_detector(cfg) -> bool:
    """An mmdet config (its default scope), as opposed to an mmseg one."""
    return cfg.get('default_scope') == 'mmdet'


def build_module(args: argparse.Namespace, cfg) -> nn.Module:
    """The backbone or segmentor to export."""
    if cfg is None:
        return backbone_for_export(args.arch, args.checkpoint)
    from mmseg.apis import init_model

    from mmlaplacian.deployment.segmentors import SegmentorForExport
    # init_model leaves the backbone's init_cfg out: random weights, or the
    # whole segmentor's checkpoint.
    segmentor = init_model(cfg, args.checkpoint, device='cpu')
    return SegmentorForExport(segmentor.eval())


def calibration_and_check(
        args: argparse.Namespace,
        cfg) -> Tuple[List[Tuple[torch.Tensor]], List[Tuple[torch.Tensor]]]:
    """int8's calibration inputs, and the further images int8 is checked
    on, from ``--calibration-images`` or the default folder."""
    folder = args.calibration_images or (BACKBONE_CALIBRATION_IMAGES
                                         if cfg is None else
                                         training_image_folder(cfg))
    inputs = calibration_inputs(folder, args.shape,
                                args.calibration_count + CHECK_IMAGES,
                                normalize=cfg is None)
    if len(inputs) <= args.calibration_count:
        # A small folder: calibrate on all but one image, check on that one.
        count = max(1, len(inputs) - 1)
        return inputs[:count], inputs[count:] or inputs[:1]
    return inputs[:args.calibration_count], inputs[args.calibration_count:]


def counted(ops: Counter) -> str:
    """``'name xN, ...'``, most frequent first, or ``'nothing'``."""
    return ', '.join(f'{name} x{count}'
                     for name, count in ops.most_common()) or 'nothing'


def print_lowering(result: ExecuTorchResult) -> None:
    """What the program holds: its delegates, what the portable kernels
    run and, for int8, what was quantized."""
    int8 = f' ({result.int8_delegates} int8)' if result.quantize else ''
    print(f'wrote {result.path} in {result.seconds:.1f} s: '
          f'{result.delegated} XNNPACK subgraphs{int8}')
    print(f'left to the portable kernels: {counted(result.portable_ops)}')
    if result.own_ops:
        print(f'run by our ExecuTorch kernels: {counted(result.own_ops)}')
    if result.quantize:
        for label, ops in (('int8', result.quantized),
                           ('left in float32', result.float_ops)):
            print(f'{label}: {counted(ops)}')


def correlation(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson correlation of two tensors' values (float64)."""
    pair = torch.stack([got.flatten().double(), expected.flatten().double()])
    return float(torch.corrcoef(pair)[0, 1])


def print_label_agreement(pairs) -> None:
    """``pairs``: (program outputs, eager outputs) per image, logits
    first."""
    agree = torch.cat([(got[0].argmax(1) == ref[0].argmax(1)).flatten()
                       for got, ref in pairs]).float().mean()
    print(f'label maps agree on {100 * float(agree):.2f}% of the pixels')


def compare_float(path: str, module: nn.Module, image: torch.Tensor,
                  labels: bool) -> bool:
    """Print the program's largest relative difference from eager (and the
    label maps' agreement); whether it is within :data:`FEATURE_RTOL`."""
    expected = eager_outputs(module, image)
    got = run_executorch(path, [image])
    worst = largest_relative_difference(got, expected)
    verdict = 'matches' if worst <= FEATURE_RTOL else 'DIFFERS FROM'
    print(f'ExecuTorch {verdict} eager: largest relative difference '
          f'{worst:.2e} (tolerance {FEATURE_RTOL})')
    if labels:
        print_label_agreement([(got, expected)])
    return worst <= FEATURE_RTOL


def compare_int8(path: str, module: nn.Module,
                 check: Sequence[Tuple[torch.Tensor]],
                 labels: bool) -> None:
    """Print the int8 program's correlation with eager float32 per output
    over the ``check`` images (and the label maps' agreement)."""
    pairs = [(run_executorch(path, [args[0]]), eager_outputs(module, args[0]))
             for args in check]
    for i in range(len(pairs[0][1])):
        corr = correlation(torch.cat([got[i].flatten() for got, _ in pairs]),
                           torch.cat([ref[i].flatten() for _, ref in pairs]))
        print(f'int8 against float32 eager, output {i}: correlation '
              f'{corr:.5f} over {len(pairs)} images')
    if labels:
        print_label_agreement(pairs)


def export_detector(args: argparse.Namespace, cfg) -> int:
    """A detector's programs; their dense part checked against eager."""
    from mmlaplacian.deployment import (build_exportable_detector,
                                        export_detector_executorch,
                                        graph_input, load_detector)
    detector = load_detector(cfg, args.checkpoint)
    calibration, check = ((None, [(graph_input(args.shape, detector=True), )])
                          if args.quantize is None else
                          calibration_and_check(args, cfg))
    programs = export_detector_executorch(detector, args.shape, args.out,
                                          args.quantize, calibration,
                                          args.laplace, args.block_elements,
                                          args.float_parts)
    for result in programs.results:
        print_lowering(result)
    dense = build_exportable_detector(detector).eval().dense
    print('dense program:')
    if args.quantize:
        compare_int8(programs.dense.path, dense, check, labels=False)
        return 0
    ok = compare_float(programs.dense.path, dense, check[0][0], labels=False)
    return 0 if ok else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return export(args)
    except FileNotFoundError as err:
        # A calibration folder that is missing or holds no image.
        print(f'export_executorch.py: error: {err}', file=sys.stderr)
        return 2


def export(args: argparse.Namespace) -> int:
    """Export, report and compare; the exit status."""
    cfg = None
    if args.config is not None:
        from mmengine.config import Config
        cfg = Config.fromfile(args.config)
        if is_detector(cfg):
            return export_detector(args, cfg)
    module = build_module(args, cfg)
    if args.quantize is None:
        generator = torch.Generator().manual_seed(0)
        image = torch.rand(1, 3, *args.shape, generator=generator)
        image = image if cfg is None else image * 255
        result = export_executorch(module, image, args.out, args.laplace,
                                   block_elements=args.block_elements)
        print_lowering(result)
        ok = compare_float(result.path, module, image, labels=cfg is not None)
        return 0 if ok else 1
    calibration, check = calibration_and_check(args, cfg)
    result = export_executorch(module, calibration[0][0], args.out,
                               args.laplace, 'int8', calibration,
                               float_parts=args.float_parts,
                               block_elements=args.block_elements)
    print_lowering(result)
    compare_int8(result.path, module, check, labels=cfg is not None)
    return 0


if __name__ == '__main__':
    sys.exit(main())
