"""Export a detector or a backbone to ONNX with standard operators only.

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

Detector graphs take ``image (1, 3, H, W)``: pixel values as the config's
pipeline loads them (BGR, 0-255), H and W multiples of 32; they normalise
it themselves and return ``boxes, scores, labels, num_dets`` (+ ``masks``,
28x28 probabilities to paste into the image). Backbone graphs take the
normalised image and return the feature maps. To compare an export with
PyTorch and time both: ``python -m benchmarks.onnx_parity`` (from a source
checkout).
"""
import argparse
import os
import os.path as osp
import sys
from typing import Sequence

from mmengine.config import DictAction

from mmlaplacian.deployment import (BackboneForExport, ExportUnsupportedError,
                                    build_exportable_detector,
                                    check_exportable, export_onnx,
                                    graph_input, load_detector, ort_run,
                                    ort_session)
from mmlaplacian.deployment.export import DEFAULT_OPSET, largest_tensors
from mmlaplacian.engine import read_config
from mmlaplacian.ops.export_forms import BLOCK_ELEMENTS, LAPLACE_FORMS


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Export a detector or backbone to ONNX')
    parser.add_argument('config', help='mmdet config file')
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
    return args


def check_divisible(model, shape: Sequence[int]) -> None:
    divisor = getattr(model.data_preprocessor, 'pad_size_divisor', 1) or 1
    if any(side % divisor for side in shape):
        raise SystemExit(
            f'error: --shape {tuple(shape)}: detector inputs must be '
            f'multiples of the data preprocessor\'s pad_size_divisor '
            f'({divisor}), as mmdet pads them; e.g. '
            f'{tuple(-(-s // divisor) * divisor for s in shape)}')


def main(argv: Sequence[str] = None) -> int:
    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    model = load_detector(cfg, args.checkpoint)
    weights = args.checkpoint or 'random weights (no checkpoint given)'
    print(f'model: {args.config}\nweights: {weights}')
    detector = not args.backbone_only
    try:
        if detector:
            check_divisible(model, args.shape)
            module = build_exportable_detector(model)
        else:
            module = BackboneForExport(model.backbone)
            check_exportable(module)
    except ExportUnsupportedError as err:
        print(f'error: cannot export {args.config}: {err}', file=sys.stderr)
        return 2
    names = list(module.output_names)
    example = graph_input(args.shape, detector)
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
    return 0


if __name__ == '__main__':
    sys.exit(main())
