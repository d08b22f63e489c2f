"""Export a detector, a segmentor or a backbone to ONNX with standard
operators only, in fp32 and, with ``--quantize int8``, in int8 as well.

The exported graph uses standard ONNX operators only (opset >= 16): the
LaplacianFormer attention becomes matrix products, element-wise ops and an
unrolled Newton-Schulz iteration; the detectors' postprocessing becomes
``TopK``, ``NonMaxSuppression``, ``RoiAlign`` and ``Gather`` (see
``docs/deployment.md``). It runs in the stock ``onnxruntime`` wheel; the
tool runs it once there and prints its outputs' shapes.

Examples:
    python tools/deployment/export_onnx.py configs/mask_rcnn/lf_tiny_1x.py \
        CKPT --shape 800 1344 --out lf_tiny_mask_rcnn.onnx
    python tools/deployment/export_onnx.py configs/mask_rcnn/lf_tiny_1x.py \
        --backbone-only --shape 800 1344 --dynamic --out lf_tiny.onnx
    python tools/deployment/export_onnx.py \
        configs/quickstart/mask_rcnn_lf_tiny_synthetic.py \
        work_dirs/quickstart/epoch_8.pth --shape 192 192 \
        --out work_dirs/onnx/mask_rcnn.onnx --quantize int8

``--quantize int8`` writes the fp32 graph to ``--out`` as without it, then
its int8 form beside it (``X.onnx`` -> ``X.int8.onnx``): onnxruntime's
static quantization (QDQ), calibrated on ``--calibration-images`` (default:
the config's training images), with the weight layers in int8 and the rest
in float (``mmlaplacian.deployment.onnx_quantization``). The tool runs both
graphs on a few calibration images and prints how closely they agree.

Detector graphs take ``image (1, 3, H, W)``: pixel values as the config's
pipeline loads them (BGR, 0-255), H and W multiples of 32; they normalise
it themselves and return ``boxes, scores, labels, num_dets`` (+ ``masks``,
28x28 probabilities to paste into the image). Segmentor graphs (an mmseg
config) take the same pixels and return ``logits (1, classes, H, W)``.
Backbone graphs take the normalised image and return the feature maps. To
compare an export with PyTorch and time both: ``python -m
benchmarks.onnx_parity`` (from a source checkout).
"""
import argparse
import os
import os.path as osp
import sys
from typing import List, Sequence, Tuple

import numpy as np
import torch
from mmengine.config import DictAction

from mmlaplacian.deployment import (BackboneForExport, Detections,
                                    ExportUnsupportedError,
                                    SegmentorForExport,
                                    build_exportable_detector,
                                    check_exportable, detections_from_ort,
                                    export_onnx, graph_input,
                                    ort_run, ort_session)
from mmlaplacian.deployment.calibration import (calibration_inputs,
                                                image_files,
                                                training_images_folder)
from mmlaplacian.deployment.export import DEFAULT_OPSET, largest_tensors
from mmlaplacian.deployment.loading import is_segmentor_config, load_model
from mmlaplacian.deployment.onnx_quantization import (output_cosines,
                                                      quantize_onnx)
from mmlaplacian.engine import read_config
from mmlaplacian.ops.export_forms import BLOCK_ELEMENTS, LAPLACE_FORMS


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Export a detector, segmentor or backbone to ONNX')
    parser.add_argument('config', help='mmdet or mmseg config file')
    parser.add_argument(
        'checkpoint',
        nargs='?',
        help='checkpoint (default: random weights, labelled as such)')
    parser.add_argument(
        '--shape',
        type=int,
        nargs=2,
        metavar=('H', 'W'),
        required=True,
        help='input height and width (multiples of 32 for detectors)')
    parser.add_argument('--out', required=True, help='output .onnx file')
    parser.add_argument('--backbone-only',
                        action='store_true',
                        help='export model.backbone alone (feature maps)')
    parser.add_argument(
        '--dynamic',
        action='store_true',
        help='symbolic height and width: one file serves other sizes')
    parser.add_argument('--opset',
                        type=int,
                        default=DEFAULT_OPSET,
                        help=f'ONNX opset, >= 16 (default {DEFAULT_OPSET})')
    parser.add_argument(
        '--laplace',
        choices=LAPLACE_FORMS,
        help='graph form of the Laplacian kernel (default: row-blocks for '
        'static sizes, per-feature with --dynamic, which needs it)')
    parser.add_argument(
        '--block-elements',
        type=int,
        default=BLOCK_ELEMENTS,
        help='element budget of one row block of the row-blocks kernel '
        f'(default {BLOCK_ELEMENTS})')
    parser.add_argument(
        '--optimize',
        action='store_true',
        help='run onnxscript\'s graph optimizer on the export (slower '
        'export, smaller graph; onnxruntime optimises at load anyway)')
    parser.add_argument(
        '--quantize',
        choices=('int8', ),
        help='also write an int8 graph beside --out (X.onnx -> X.int8.onnx):'
        ' onnxruntime static quantization (QDQ), weight layers in int8')
    parser.add_argument(
        '--calibration-images',
        metavar='DIR',
        help='images that calibrate the int8 scales (default: the '
        'config\'s training images, e.g. data/synthetic_coco/train)')
    parser.add_argument('--calibration-count',
                        type=int,
                        default=32,
                        metavar='N',
                        help='calibration images, spread over the folder '
                        '(default 32)')
    parser.add_argument('--cfg-options',
                        nargs='+',
                        action=DictAction,
                        help='override config settings: key=value pairs')
    args = parser.parse_args(argv)
    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    if args.checkpoint and not osp.isfile(args.checkpoint):
        parser.error(f'checkpoint file not found: {args.checkpoint}')
    if args.dynamic and args.laplace == 'row-blocks':
        parser.error('--laplace row-blocks needs static sizes (the block '
                     'count is fixed in the graph); --dynamic uses '
                     'per-feature')
    if args.block_elements < 1:
        parser.error('--block-elements must be >= 1')
    if min(args.shape) < 32:
        parser.error(f'--shape {args.shape}: both sides must be >= 32')
    if args.quantize and args.dynamic:
        parser.error('--quantize int8 needs static sizes: the graph is '
                     'calibrated and checked at --shape')
    if args.calibration_count < 1:
        parser.error('--calibration-count must be >= 1')
    return args


def check_divisible(model, shape: Sequence[int]) -> None:
    divisor = getattr(model.data_preprocessor, 'pad_size_divisor', 1) or 1
    if any(side % divisor for side in shape):
        raise SystemExit(
            f'error: --shape {tuple(shape)}: detector inputs must be '
            f'multiples of the data preprocessor\'s pad_size_divisor '
            f'({divisor}), as mmdet pads them; e.g. '
            f'{tuple(-(-s // divisor) * divisor for s in shape)}')


def build_module(args: argparse.Namespace, cfg,
                 model: torch.nn.Module) -> torch.nn.Module:
    """The module to export: backbone, segmentor or detector with its
    postprocessing.

    Raises:
        ExportUnsupportedError: A part of the model cannot be exported.
    """
    if args.backbone_only:
        module = BackboneForExport(model.backbone)
    elif is_segmentor_config(cfg):
        module = SegmentorForExport(model)
    else:
        check_divisible(model, args.shape)
        return build_exportable_detector(model)
    check_exportable(module)
    return module


def calibration_folder(args: argparse.Namespace, cfg) -> str:
    """``--calibration-images``, or the config's training images; the
    folder is checked before the export.

    Raises:
        SystemExit: The folder does not exist or holds no image.
    """
    folder = args.calibration_images
    try:
        if folder is None:
            folder = training_images_folder(cfg)
        image_files(folder)
    except (FileNotFoundError, ValueError) as err:
        default = '' if args.calibration_images else (
            ' (the config\'s training images: make the dataset, or pass '
            '--calibration-images DIR)')
        raise SystemExit(f'error: --quantize int8: {err}{default}')
    return folder


def int8_path(fp32_path: str) -> str:
    """Where the int8 graph goes: ``X.onnx`` -> ``X.int8.onnx``."""
    return osp.splitext(fp32_path)[0] + '.int8.onnx'


# The int8 graph agrees with the fp32 one on a detection when it finds the
# fp32 graph's confident detection with the same label at IoU >= 0.5 (as
# AP50 counts a match).
CONFIDENT_SCORE = 0.3
MATCH_IOU = 0.5
# Calibration images both graphs run on for the comparison.
CHECK_IMAGES = 4


def detection_agreement(reference: Detections,
                        quantized: Detections) -> Tuple[int, List, List]:
    """The fp32 graph's confident detections, and the IoU and score change
    of each one the int8 graph finds."""
    from torchvision.ops import box_iou

    confident = reference.scores >= CONFIDENT_SCORE
    count = int(confident.sum())
    if not count or not len(quantized.scores):
        return count, [], []
    iou = box_iou(torch.from_numpy(reference.boxes[confident]),
                  torch.from_numpy(quantized.boxes)).numpy()
    iou[reference.labels[confident][:, None] != quantized.labels[None]] = 0
    best = iou.argmax(1)
    found = iou.max(1) >= MATCH_IOU
    changes = np.abs(quantized.scores[best[found]] -
                     reference.scores[confident][found])
    return count, list(iou.max(1)[found]), list(changes)


def agreement_lines(fp32: str, int8: str, inputs: List[torch.Tensor],
                    names: Sequence[str], kind: str,
                    shape: Sequence[int]) -> List[str]:
    """How the int8 graph's outputs agree with the fp32 graph's on
    ``inputs``: cosines of the feature maps or logits (worst over the
    inputs), the segmentors' label maps, the detectors' detections."""
    sessions = ort_session(fp32), ort_session(int8)
    runs = [[ort_run(session, image) for session in sessions]
            for image in inputs]
    if kind == 'detector':
        confident, ious, changes = 0, [], []
        for reference, quantized in runs:
            count, found, change = detection_agreement(
                detections_from_ort(reference, names, shape),
                detections_from_ort(quantized, names, shape))
            confident, ious, changes = (confident + count, ious + found,
                                        changes + change)
        if not ious:
            return [f'{len(ious)} of {confident} confident detections found']
        return [
            f'{len(ious)} of {confident} confident fp32 detections (score >= '
            f'{CONFIDENT_SCORE}) found by int8 (same label, IoU >= '
            f'{MATCH_IOU}): mean IoU {np.mean(ious):.3f}, largest score '
            f'change {max(changes):.3f}'
        ]
    cosines = np.min([output_cosines(*run) for run in runs], axis=0)
    lines = [
        'cosine to fp32 (worst image): ' +
        ', '.join(f'{name} {cos:.4f}' for name, cos in zip(names, cosines))
    ]
    if kind == 'segmentor':
        same = np.mean([(a[0].argmax(1) == b[0].argmax(1)).mean()
                        for a, b in runs])
        lines.append(f'same label at {100 * same:.2f}% of the pixels')
    return lines


def quantize(args: argparse.Namespace, folder: str, kind: str,
             names: Sequence[str]) -> None:
    """Write the int8 graph of ``args.out``, run it and print how it
    agrees with the fp32 graph."""
    calibration = calibration_inputs(folder, args.shape,
                                     args.calibration_count,
                                     normalize=kind == 'backbone')
    path = int8_path(args.out)
    result = quantize_onnx(args.out, path, calibration)
    size_mb = osp.getsize(path) / 2**20
    print(f'\nint8: {path} ({size_mb:.1f} MiB) in {result.seconds:.1f} s, '
          f'calibrated on {result.calibration_inputs} images of {folder}')
    print('int8 nodes: ' + ', '.join(f'{op} x{n}'
                                     for op, n in result.quantized.items()))
    print(f'left in float: {len(result.kept_float)} products of two '
          'activations (Newton-Schulz, attention), and every operator '
          'without weights')
    inputs = [image for image, in calibration[:CHECK_IMAGES]]
    print(f'int8 against fp32 on {len(inputs)} calibration images: ' +
          '; '.join(
              agreement_lines(args.out, path, inputs, names, kind,
                              args.shape)))


def main(argv: Sequence[str] = None) -> int:
    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    kind = 'backbone' if args.backbone_only else (
        'segmentor' if is_segmentor_config(cfg) else 'detector')
    folder = calibration_folder(args, cfg) if args.quantize else None
    model = load_model(cfg, args.checkpoint)
    weights = args.checkpoint or 'random weights (no checkpoint given)'
    print(f'model: {args.config}\nweights: {weights}')
    try:
        module = build_module(args, cfg, model)
    except ExportUnsupportedError as err:
        print(f'error: cannot export {args.config}: {err}', file=sys.stderr)
        return 2
    names = list(module.output_names)
    example = graph_input(args.shape, kind != 'backbone')
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    result = export_onnx(module,
                         example,
                         args.out,
                         opset=args.opset,
                         dynamic=args.dynamic,
                         output_names=names,
                         optimize=args.optimize,
                         laplace=args.laplace,
                         block_elements=args.block_elements)
    size_mb = osp.getsize(args.out) / 2**20
    print(f'\nexported {args.out} ({size_mb:.1f} MiB) in {result.seconds:.1f}'
          f' s, opset {args.opset}, input {result.input_shape}, Laplacian '
          f'kernel {result.laplace}')
    print('operators: ' + ', '.join(f'{op} x{n}'
                                    for op, n in result.operators.items()))
    if not args.dynamic:
        print('largest intermediate tensors: ' +
              '; '.join(f'{shape} {mib:.0f} MiB'
                        for _, shape, mib in largest_tensors(args.out)))
    outputs = ort_run(ort_session(args.out), example)
    print('onnxruntime outputs: ' + ', '.join(
        f'{name} {tuple(out.shape)}' for name, out in zip(names, outputs)))
    if args.quantize:
        quantize(args, folder, kind, names)
    return 0


if __name__ == '__main__':
    sys.exit(main())
