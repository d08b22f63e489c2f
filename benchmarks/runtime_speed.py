"""Latency and peak memory of the backbone, the segmentor and the detectors
in every runtime we export to, side by side on this CPU.

    python -m benchmarks.runtime_speed --models backbone segmentor retinanet \\
        mask_rcnn --shapes quick 800x1344 --threads 2

For each (model, size) the programs are exported once (under
``--work-dir``, reused when present): ONNX fp32 and int8 (onnxruntime's
static QDQ), ExecuTorch fp32 and int8 (PT2E, XNNPACK). One fresh process
then times every runtime interleaved pass by pass (so the machine's load
falls on all alike), and each runtime's peak resident memory is measured in
a fresh process of its own. Weights are random (seeded): speed does not
depend on them; int8 calibrates on a few quick-start training images.

What a runtime runs:
* eager: the PyTorch module the exports are made from (detectors: the
  network and our traceable postprocessing, eagerly);
* onnxruntime: the whole graph (detectors: NMS and RoI Align included);
* executorch: the program(s); a detector's decoding, NMS and RoI Align run
  on the host in PyTorch (:class:`~mmlaplacian.deployment.executorch_runner.
  ExecuTorchDetector`).

``quick`` is each model's quick-start size: 192x192 for the backbone and
the detectors, 96x96 for the segmentor.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.harness import (REPO_ROOT, peak_rss_mb, run_in_subprocess,
                                time_passes, worker_main)
from benchmarks.tables import markdown_table

RUNTIMES = ('eager', 'onnxruntime-fp32', 'onnxruntime-int8',
            'executorch-fp32', 'executorch-int8')
# model -> (config or None for the backbone alone, quick-start size)
MODELS: Dict[str, tuple] = {
    'backbone': (None, (192, 192)),
    'segmentor': ('configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py',
                  (96, 96)),
    'retinanet': ('configs/retinanet/lf_tiny_1x.py', (192, 192)),
    'mask_rcnn': ('configs/quickstart/mask_rcnn_lf_tiny_synthetic.py',
                  (192, 192)),
}
LABELS = {
    'backbone': 'LaplacianFormer-T backbone',
    'segmentor': 'Semantic FPN LF-T (quick start)',
    'retinanet': 'RetinaNet LF-T',
    'mask_rcnn': 'Mask R-CNN LF-T (quick start)',
}
CALIBRATION_IMAGES = 'data/synthetic_coco/train'


def build_model(name: str) -> torch.nn.Module:
    """The module the exports are made from, random weights (seeded)."""
    from mmlaplacian.deployment import (BackboneForExport, SegmentorForExport,
                                        build_exportable_detector)
    from mmlaplacian.deployment.loading import load_model
    from mmlaplacian.engine import read_config
    torch.manual_seed(0)
    config = MODELS[name][0]
    if config is None:
        from mmlaplacian import LaplacianFormer
        return BackboneForExport(
            LaplacianFormer('tiny', drop_path_rate=0.).eval())
    cfg = read_config(osp.join(REPO_ROOT, config))
    if name == 'segmentor':
        return SegmentorForExport(load_model(cfg))
    return build_exportable_detector(load_model(cfg))


def example_input(name: str, shape: Sequence[int]) -> torch.Tensor:
    from mmlaplacian.deployment import graph_input
    return graph_input(shape, detector=name != 'backbone')


def export_all(name: str, shape: Sequence[int], runtimes: Sequence[str],
               work_dir: str, calibration_folder: str) -> Dict[str, object]:
    """Every program of ``runtimes`` for (model, size), made when absent."""
    from mmlaplacian.deployment import export_onnx
    from mmlaplacian.deployment.calibration import calibration_inputs
    from mmlaplacian.deployment.executorch_export import export_executorch
    os.makedirs(work_dir, exist_ok=True)
    stem = osp.join(work_dir, f'{name}_{shape[0]}x{shape[1]}')
    model, image = build_model(name), example_input(name, shape)
    calibration = calibration_inputs(calibration_folder, shape, 8,
                                     normalize=name == 'backbone')
    paths: Dict[str, object] = {}
    names = getattr(model, 'output_names', None)
    for runtime in runtimes:
        if runtime == 'eager':
            continue
        precision = runtime.split('-')[1]
        quantize = 'int8' if precision == 'int8' else None
        if runtime.startswith('onnxruntime'):
            path = f'{stem}.{precision}.onnx'
            fp32 = f'{stem}.fp32.onnx'
            if not osp.exists(fp32):
                print(f'   exporting {fp32}', flush=True)
                export_onnx(model, image, fp32,
                            output_names=list(names) if names else None)
            if quantize and not osp.exists(path):
                from mmlaplacian.deployment.onnx_quantization import \
                    quantize_onnx
                print(f'   quantizing {path}', flush=True)
                quantize_onnx(fp32, path, calibration)
            paths[runtime] = path
            continue
        path = f'{stem}.{precision}.pte'
        if name in ('retinanet', 'mask_rcnn'):
            from mmlaplacian.deployment.executorch_detectors import (
                export_detector_executorch, program_paths)
            files = program_paths(path, name == 'mask_rcnn')
            if not all(osp.exists(f) for f in files.values()):
                print(f'   lowering {path}', flush=True)
                export_detector_executorch(
                    model.detector, shape, path, quantize=quantize,
                    calibration=calibration if quantize else None)
            paths[runtime] = files
        else:
            if not osp.exists(path):
                print(f'   lowering {path}', flush=True)
                export_executorch(model, image, path, quantize=quantize,
                                  calibration=calibration if quantize else
                                  None)
            paths[runtime] = path
    return paths


def _runner(runtime: str, spec: dict) -> Callable[[], object]:
    """A callable running one inference of ``runtime``."""
    name = spec['model']
    image = example_input(name, spec['shape'])
    if runtime == 'eager':
        model = build_model(name)

        def run():
            with torch.no_grad():
                return model(image)

        return run
    path = spec['paths'][runtime]
    if runtime.startswith('onnxruntime'):
        from mmlaplacian.deployment import ort_run, ort_session
        session = ort_session(path, num_threads=spec['threads'])
        return lambda: ort_run(session, image)
    if name in ('retinanet', 'mask_rcnn'):
        from mmlaplacian.deployment.executorch_runner import \
            ExecuTorchDetector
        detector = ExecuTorchDetector(osp.join(REPO_ROOT, MODELS[name][0]),
                                      **path)
        return lambda: detector.predict(image[0])
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(path).load_method('forward')
    return lambda: method.execute([image])


def run_case(spec: dict) -> dict:
    """Worker: time every runtime interleaved, or one runtime's memory."""
    torch.set_num_threads(spec['threads'])
    if spec['mode'] == 'memory':
        _runner(spec['runtime'], spec)()
        return dict(spec, peak_mb=peak_rss_mb())
    runtimes = spec['runtimes']
    runners = [_runner(runtime, spec) for runtime in runtimes]
    for run in runners:  # warm-up: allocations, thread pools, caches
        run()
    times = time_passes([lambda _=None, r=r: r() for r in runners],
                        spec['passes'])
    return dict(spec, median_ms={
        runtime: 1e3 * times.median(index)
        for index, runtime in enumerate(runtimes)
    })


def parse_shape(text: str) -> str:
    if text != 'quick':
        try:
            height, width = (int(v) for v in text.lower().split('x'))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f'{text!r}: a size is HxW (e.g. 800x1344) or "quick"')
        if height % 32 or width % 32:
            raise argparse.ArgumentTypeError(
                f'{text}: sides must be multiples of 32')
    return text


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', choices=tuple(MODELS),
                        default=list(MODELS))
    parser.add_argument('--shapes', nargs='+', type=parse_shape,
                        default=['quick', '800x1344'])
    parser.add_argument('--runtimes', nargs='+', choices=RUNTIMES,
                        default=list(RUNTIMES))
    parser.add_argument('--passes', type=int, default=5)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--calibration-images', default=CALIBRATION_IMAGES)
    parser.add_argument('--work-dir', default='work_dirs/runtime_speed')
    parser.add_argument('--no-memory', action='store_true',
                        help='skip the per-runtime peak-memory processes')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return 0
    failed = False
    for name in args.models:
        for text in args.shapes:
            shape = MODELS[name][1] if text == 'quick' else tuple(
                int(v) for v in text.split('x'))
            print(f'-- {LABELS[name]}, {shape[0]}x{shape[1]}', flush=True)
            spec = dict(model=name, shape=list(shape), threads=args.threads,
                        passes=args.passes, runtimes=list(args.runtimes),
                        paths=export_all(name, shape, args.runtimes,
                                         args.work_dir,
                                         args.calibration_images))
            timed = run_in_subprocess('benchmarks.runtime_speed',
                                      dict(spec, mode='time'))
            if timed.get('status') != 'ok':
                print(f'   timing failed: {timed.get("message")}')
                failed = True
                continue
            rows: List[List[str]] = []
            eager = timed['median_ms'].get('eager')
            for runtime in args.runtimes:
                memory = {} if args.no_memory else run_in_subprocess(
                    'benchmarks.runtime_speed',
                    dict(spec, mode='memory', runtime=runtime))
                ms = timed['median_ms'][runtime]
                rows.append([
                    runtime, f'{ms:.1f}',
                    f'{ms / eager:.2f}' if eager else '',
                    f'{memory.get("peak_mb", float("nan")):.0f}'
                ])
            print(f'{LABELS[name]}, {shape[0]}x{shape[1]}, {args.threads} '
                  f'threads, median of {args.passes} interleaved passes '
                  f'(load {os.getloadavg()[0]:.1f})')
            print(markdown_table(
                ['runtime', 'ms', 'vs eager', 'peak RSS MB (own process)'],
                rows, align='lrrr'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
