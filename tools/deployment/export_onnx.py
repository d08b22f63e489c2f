"""Export a detector or a backbone to ONNX, check it in onnxruntime against
PyTorch, and time both.

The exported graph uses standard ONNX operators only (opset >= 16): the
LaplacianFormer attention becomes matrix products, element-wise ops and an
unrolled Newton-Schulz iteration; the detectors' postprocessing becomes
``TopK``, ``NonMaxSuppression``, ``RoiAlign`` and ``Gather`` (see
``docs/deployment.md``). It runs in the stock ``onnxruntime`` wheel.

Examples:
    python tools/deployment/export_onnx.py configs/mask_rcnn/lf_tiny_1x.py \
        CKPT --shape 800 1344 --out lf_tiny_mask_rcnn.onnx
    python tools/deployment/export_onnx.py configs/mask_rcnn/lf_tiny_1x.py \
        --backbone-only --shape 800 1344 --dynamic --check-shape 640 960 \
        --out lf_tiny.onnx

Detector graphs take ``image (1, 3, H, W)``: pixel values as the config's
pipeline loads them (BGR, 0-255), H and W multiples of 32; they normalise
it themselves and return ``boxes, scores, labels, num_dets`` (+ ``masks``,
28x28 probabilities to paste into the image). Backbone graphs take the
normalised image and return the feature maps. Exit status 1 when an output
differs from PyTorch beyond the stated tolerance.
"""
import argparse
import os
import os.path as osp
import sys
from typing import List, Sequence, Tuple

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import torch  # noqa: E402
from mmengine.config import DictAction  # noqa: E402

from mmlaplacian.deployment import (  # noqa: E402
    BackboneForExport, Detections, ExportUnsupportedError, build_model,
    build_exportable_detector, check_exportable, compare_detections,
    compare_features, detections_from_ort, export_onnx, mmdet_predict, ort_run,
    ort_session)
from mmlaplacian.deployment.export import (  # noqa: E402
    DEFAULT_OPSET, largest_tensors)
from mmlaplacian.ops.export_forms import (  # noqa: E402
    CHUNK_ELEMENTS, LAPLACE_FORMS)
from mmlaplacian.deployment.peak_memory import (  # noqa: E402
    measure_in_subprocess)
from mmlaplacian.deployment.runtime import time_interleaved  # noqa: E402
from mmlaplacian.engine import read_config  # noqa: E402


def parse_args(argv: Sequence[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Export to ONNX, verify in onnxruntime, time it')
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
    parser.add_argument(
        '--check-shape',
        type=int,
        nargs=2,
        metavar=('H', 'W'),
        action='append',
        default=[],
        help='also compare at this size (needs --dynamic); repeatable. '
        'With --dynamic and none given, one other size is checked')
    parser.add_argument('--opset',
                        type=int,
                        default=DEFAULT_OPSET,
                        help=f'ONNX opset, >= 16 (default {DEFAULT_OPSET})')
    parser.add_argument(
        '--laplace',
        choices=LAPLACE_FORMS,
        help='graph form of the Laplacian kernel (default: chunked for '
        'static sizes, per-feature with --dynamic, which needs it)')
    parser.add_argument(
        '--chunk-elements',
        type=int,
        default=CHUNK_ELEMENTS,
        help='element budget of one chunk of the chunked kernel (default '
        f'{CHUNK_ELEMENTS})')
    parser.add_argument(
        '--optimize',
        action='store_true',
        help='run onnxscript\'s graph optimizer on the export (slower '
        'export, smaller graph; onnxruntime optimises at load anyway)')
    parser.add_argument(
        '--image',
        help='an image file resized to --shape (default: random '
        'pixels)')
    parser.add_argument('--runs',
                        type=int,
                        default=3,
                        help='timed runs per runtime')
    parser.add_argument(
        '--threads',
        type=int,
        default=0,
        help='CPU threads for both runtimes (0: torch default)')
    parser.add_argument(
        '--memory',
        action='store_true',
        help='also measure the peak memory of one inference of each runtime '
        '(each in a fresh process)')
    parser.add_argument(
        '--no-arena',
        action='store_true',
        help='onnxruntime without its CPU memory arena (about half the peak '
        'memory of the LaplacianFormer graphs, same latency measured)')
    parser.add_argument('--cfg-options',
                        nargs='+',
                        action=DictAction,
                        help='override config settings: key=value pairs')
    args = parser.parse_args(argv)
    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    if args.checkpoint and not osp.isfile(args.checkpoint):
        parser.error(f'checkpoint file not found: {args.checkpoint}')
    if args.check_shape and not args.dynamic:
        parser.error('--check-shape needs --dynamic (a static graph serves '
                     'one size only)')
    if args.dynamic and args.laplace == 'chunked':
        parser.error('--laplace chunked needs static sizes (the chunk count '
                     'is fixed in the graph); --dynamic uses per-feature')
    if args.chunk_elements < 1:
        parser.error('--chunk-elements must be >= 1')
    if min(args.shape) < 32:
        parser.error(f'--shape {args.shape}: both sides must be >= 32')
    if args.runs < 1:
        parser.error('--runs must be >= 1')
    return args


def make_input(shape: Sequence[int],
               detector: bool,
               image_path: str = None) -> torch.Tensor:
    """``(1, 3, H, W)``: pixels (detectors) or a normalised-like tensor
    (backbones), from ``image_path`` or seeded random values."""
    height, width = shape
    if image_path:
        import mmcv
        pixels = mmcv.imresize(mmcv.imread(image_path), (width, height))
        image = torch.from_numpy(pixels).permute(2, 0, 1)[None].float()
        if not detector:
            image = (image - image.mean()) / image.std().clamp_min(1e-6)
        return image
    generator = torch.Generator().manual_seed(0)
    if detector:
        return torch.rand(1, 3, height, width, generator=generator) * 255
    return torch.randn(1, 3, height, width, generator=generator)


def other_shapes(args) -> List[Tuple[int, int]]:
    if not args.dynamic:
        return []
    if args.check_shape:
        return [tuple(s) for s in args.check_shape]
    height, width = args.shape
    return [(height + 64, width - 64 if width >= 192 else width + 64)]


def check_divisible(model, shape: Sequence[int]) -> None:
    divisor = getattr(model.data_preprocessor, 'pad_size_divisor', 1) or 1
    if any(side % divisor for side in shape):
        raise SystemExit(
            f'error: --shape {tuple(shape)}: detector inputs must be '
            f'multiples of the data preprocessor\'s pad_size_divisor '
            f'({divisor}), as mmdet pads them; e.g. '
            f'{tuple(-(-s // divisor) * divisor for s in shape)}')


def compare_once(args, model, module, session, shape, names) -> bool:
    """Run both runtimes at ``shape``; print the differences; True if all
    are within tolerance."""
    detector = not args.backbone_only
    image = make_input(shape, detector, args.image)
    ort_out = ort_run(session, image)
    print(f'\n-- outputs at {shape[0]}x{shape[1]} '
          f'(onnxruntime against PyTorch eager)')
    if detector:
        rcnn_cfg = (model.test_cfg or {}).get('rcnn') or {}
        mask_thr = rcnn_cfg.get('mask_thr_binary', 0.5)
        ort_dets = detections_from_ort(ort_out, names, shape, mask_thr)
        ref = Detections.from_instances(mmdet_predict(model, image))
        comparison = compare_detections(ort_dets, ref)
        lines, ok = comparison.lines(), comparison.ok
    else:
        with torch.no_grad():
            ref = module(image)
        comparison = compare_features(ort_out, ref)
        lines, ok = comparison.lines(names), comparison.ok
    for line in lines:
        print('   ' + line)
    return ok


def time_both(args, model, module, session, shape) -> None:
    detector = not args.backbone_only
    image = make_input(shape, detector, args.image)

    def eager():
        with torch.no_grad():
            return mmdet_predict(model, image) if detector else module(image)

    # In turns: on a shared machine a change of load hits both runtimes.
    ort_latency, torch_latency = time_interleaved(
        [lambda: ort_run(session, image), eager], args.runs)
    what = 'mmdet predict' if detector else 'backbone forward'
    print(f'\n-- latency at {shape[0]}x{shape[1]}, {torch.get_num_threads()} '
          f'threads, median (min) of {args.runs} runs in turns, load '
          f'average {os.getloadavg()[0]:.1f}')
    print(f'   onnxruntime    {ort_latency.median:8.3f} s '
          f'({ort_latency.minimum:.3f})')
    print(f'   PyTorch eager  {torch_latency.median:8.3f} s '
          f'({torch_latency.minimum:.3f})  [{what}]')


def memory_both(args, shape) -> None:
    common = ['--shape', str(shape[0]), str(shape[1])]
    if args.threads:
        common += ['--threads', str(args.threads)]
    if args.backbone_only:
        common.append('--backbone-only')
    ort_args = ['ort', args.out] + common
    if args.no_arena:
        ort_args.append('--no-arena')
    ort_mem = measure_in_subprocess(ort_args)
    torch_args = ['torch', args.config] + common
    if args.checkpoint:
        torch_args += ['--checkpoint', args.checkpoint]
    torch_mem = measure_in_subprocess(torch_args)
    print(f'\n-- peak memory at {shape[0]}x{shape[1]} (fresh process each; '
          f'MiB)')
    for name, mem in (('onnxruntime', ort_mem), ('PyTorch eager', torch_mem)):
        print(f'   {name:14s} loaded {mem["loaded_mib"]:8.1f}  peak '
              f'{mem["peak_mib"]:8.1f}  inference +{mem["inference_mib"]:.1f}')


def main(argv: Sequence[str] = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = read_config(args.config, args.cfg_options)
    model = build_model(cfg, args.checkpoint)
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
    example = make_input(args.shape, detector, args.image)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    result = export_onnx(module,
                         example,
                         args.out,
                         opset=args.opset,
                         dynamic=args.dynamic,
                         output_names=names,
                         optimize=args.optimize,
                         laplace=args.laplace,
                         chunk_elements=args.chunk_elements)
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

    session = ort_session(args.out, args.threads, arena=not args.no_arena)
    ok = True
    for shape in [tuple(args.shape)] + other_shapes(args):
        ok &= compare_once(args, model, module, session, shape, names)
    time_both(args, model, module, session, tuple(args.shape))
    if args.memory:
        memory_both(args, tuple(args.shape))
    if not ok:
        print(
            '\nFAIL: onnxruntime and PyTorch differ beyond the tolerance '
            '(see above)',
            file=sys.stderr)
        return 1
    print('\nOK: onnxruntime matches PyTorch within the stated tolerances')
    return 0


if __name__ == '__main__':
    sys.exit(main())
