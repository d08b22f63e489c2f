"""Latency and peak memory of the backbone, the segmentor and the detectors
in every runtime we export to, side by side on this CPU.

    python -m benchmarks.runtime_speed --models backbone segmentor retinanet \\
        mask_rcnn --shapes quick 800x1344 --threads 2

For each (model, size) the programs are exported once (under
``--work-dir``, reused when present): ONNX fp32 and int8 (onnxruntime's
static QDQ), ExecuTorch fp32 and int8 (PT2E, XNNPACK), each with the
Laplacian kernel in standard operators and as our operator
(``executorch-operator-*``: run by our ExecuTorch kernels, with
LayerNorm, :mod:`mmlaplacian.deployment.executorch_kernels`). One fresh process then
times every runtime interleaved pass by pass (so the machine's load falls
on all alike), and each runtime's peak resident memory is measured in
a fresh process of its own. Weights are random (seeded): speed does not
depend on them; int8 calibrates on a few quick-start training images. A
program that fails to export is reported with its error, and the other
runtimes are timed without it.

Each ExecuTorch program (a detector's dense program) is then profiled by
ExecuTorch's own profiler (:mod:`benchmarks.executorch_profile`): the time
XNNPACK runs, and what is left to the portable kernels and its share.

What a runtime runs:
* eager: the PyTorch module the exports are made from (detectors: the
  network and our traceable postprocessing, eagerly);
* onnxruntime: the whole graph (detectors: NMS and RoI Align included);
* executorch: the program(s); a detector's decoding, NMS and RoI Align run
  on the host in PyTorch (:meth:`~mmlaplacian.deployment.executorch_runner.
  ExecuTorchDetector.outputs`).

Every runtime stops at the detector's outputs: Mask R-CNN's masks are
``(D, 28, 28)`` probabilities in all of them, their pasting into the image
(the same host code for every runtime) is not timed.

``quick`` is each model's quick-start size: 192x192 for the backbone and
the detectors, 96x96 for the segmentor.
"""
from __future__ import annotations

import argparse
import functools
import os
import os.path as osp
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from benchmarks.executorch_profile import (profile_row, profile_table,
                                           xnnpack_row, xnnpack_table)
from benchmarks.harness import (REPO_ROOT, peak_rss_mb, run_in_subprocess,
                                time_passes, worker_main)
from benchmarks.tables import markdown_table

RUNTIMES = ('eager', 'onnxruntime-fp32', 'onnxruntime-int8',
            'executorch-fp32', 'executorch-int8', 'executorch-operator-fp32',
            'executorch-operator-int8')
# The ExecuTorch runtimes whose programs keep the Laplacian kernel as our
# operator, run with LayerNorm by our ExecuTorch kernels (export_executorch's
# laplace='operator'); the others hold its standard-operator form.
OPERATOR_RUNTIME = 'executorch-operator-'


def laplace_form(runtime: str) -> str:
    """The ``laplace`` an ExecuTorch runtime's program is exported with."""
    return 'operator' if runtime.startswith(OPERATOR_RUNTIME) else 'auto'


def program_suffix(runtime: str) -> str:
    """What an ExecuTorch runtime's program file ends with before
    ``.pte``: its precision, and ``.operator`` for our operator's."""
    precision = runtime.split('-')[-1]
    operator = laplace_form(runtime) == 'operator'
    return f'{precision}.operator' if operator else precision
# model -> (config or None for the backbone alone, quick-start size)
MODELS: Dict[str, tuple] = {
    'backbone': (None, (192, 192)),
    'segmentor': ('configs/quickstart/sem_fpn_lf_tiny_synthetic_seg.py',
                  (96, 96)),
    'retinanet': ('configs/retinanet/lf_tiny_1x.py', (192, 192)),
    'mask_rcnn': ('configs/quickstart/mask_rcnn_lf_tiny_synthetic.py',
                  (192, 192)),
}
DETECTORS = ('retinanet', 'mask_rcnn')
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
    if name in DETECTORS:
        return build_exportable_detector(build_openmmlab_model(name))
    if name == 'segmentor':
        return SegmentorForExport(build_openmmlab_model(name))
    from mmlaplacian import LaplacianFormer
    torch.manual_seed(0)
    return BackboneForExport(LaplacianFormer('tiny', drop_path_rate=0.).eval())


def build_openmmlab_model(name: str) -> torch.nn.Module:
    """The mmdet detector or mmseg segmentor of ``name``'s config, random
    weights (seeded: every call builds the same weights)."""
    from mmlaplacian.deployment.loading import load_model
    from mmlaplacian.engine import read_config
    torch.manual_seed(0)
    return load_model(read_config(osp.join(REPO_ROOT, MODELS[name][0])))


def example_input(name: str, shape: Sequence[int]) -> torch.Tensor:
    from mmlaplacian.deployment import graph_input
    return graph_input(shape, detector=name != 'backbone')


def export_all(name: str, shape: Sequence[int], runtimes: Sequence[str],
               work_dir: str, calibration_folder: str
               ) -> Tuple[Dict[str, object], Dict[str, str]]:
    """Every program of ``runtimes`` for (model, size), made when absent.

    Returns:
        tuple: ``{runtime: path(s)}`` of the programs made, and
        ``{runtime: error}`` of those that failed to export.
    """
    os.makedirs(work_dir, exist_ok=True)
    stem = osp.join(work_dir, f'{name}_{shape[0]}x{shape[1]}')
    # Built on first use: with every program in place, none is needed.
    model = functools.cache(functools.partial(build_model, name))
    image = example_input(name, shape)
    calibration = _Calibration(calibration_folder, shape,
                               normalize=name == 'backbone')
    paths: Dict[str, object] = {}
    failures: Dict[str, str] = {}
    for runtime in runtimes:
        if runtime == 'eager':
            continue
        try:
            paths[runtime] = _export(name, model, image, runtime, stem,
                                     shape, calibration)
        except Exception as err:  # reported in the table, the rest go on
            message = str(err).strip().splitlines()
            failures[runtime] = (f'{type(err).__name__}: '
                                 f'{message[-1] if message else ""}')
            print(f'   {runtime} failed to export: {failures[runtime]}',
                  flush=True)
    return paths, failures


class _Calibration:
    """The calibration images, read on first use (only int8 needs them)."""

    def __init__(self, folder: str, shape: Sequence[int],
                 normalize: bool) -> None:
        self.folder, self.shape, self.normalize = folder, shape, normalize
        self._inputs: Optional[list] = None

    def inputs(self) -> list:
        if self._inputs is None:
            from mmlaplacian.deployment.calibration import \
                calibration_inputs
            self._inputs = calibration_inputs(self.folder, self.shape, 8,
                                              normalize=self.normalize)
        return self._inputs


def _export(name: str, model: Callable[[], torch.nn.Module],
            image: torch.Tensor, runtime: str, stem: str,
            shape: Sequence[int], calibration: _Calibration) -> object:
    """The program(s) of one runtime, made when absent: a path, or a
    detector's ``{'dense': path, 'roi_heads': path}``. ``model()`` gives
    the module to export."""
    from mmlaplacian.deployment import export_onnx
    from mmlaplacian.deployment.executorch_export import export_executorch
    precision = runtime.split('-')[-1]
    quantize = 'int8' if precision == 'int8' else None
    laplace = laplace_form(runtime)
    if runtime.startswith('onnxruntime'):
        path = f'{stem}.{precision}.onnx'
        fp32 = f'{stem}.fp32.onnx'
        if not osp.exists(fp32):
            print(f'   exporting {fp32}', flush=True)
            names = getattr(model(), 'output_names', None)
            export_onnx(model(), image, fp32,
                        output_names=list(names) if names else None)
        if quantize and not osp.exists(path):
            from mmlaplacian.deployment.onnx_quantization import \
                quantize_onnx
            print(f'   quantizing {path}', flush=True)
            quantize_onnx(fp32, path, calibration.inputs())
        return path
    path = f'{stem}.{program_suffix(runtime)}.pte'
    if name in DETECTORS:
        from mmlaplacian.deployment.executorch_detectors import (
            export_detector_executorch, program_paths)
        files = program_paths(path, name == 'mask_rcnn')
        if not all(osp.exists(f) for f in files.values()):
            print(f'   lowering {path}', flush=True)
            export_detector_executorch(
                build_openmmlab_model(name), shape, path, quantize=quantize,
                calibration=calibration.inputs() if quantize else None,
                laplace=laplace)
        return files
    if not osp.exists(path):
        print(f'   lowering {path}', flush=True)
        export_executorch(model(), image, path, laplace=laplace,
                          quantize=quantize,
                          calibration=calibration.inputs() if quantize
                          else None)
    return path


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
    if name in DETECTORS:
        from mmlaplacian.deployment.executorch_runner import \
            ExecuTorchDetector
        detector = ExecuTorchDetector(osp.join(REPO_ROOT, MODELS[name][0]),
                                      **path)
        # The detector's outputs, as eager and onnxruntime give them: the
        # masks' pasting into the image is the same host code for all.
        return lambda: detector.outputs(image[0])
    from mmlaplacian.deployment.executorch_kernels import load_program
    method = load_program(path).load_method('forward')
    return lambda: method.execute([image])


def run_case(spec: dict) -> dict:
    """Worker: time every runtime interleaved, or one runtime's memory."""
    torch.set_num_threads(spec['threads'])
    if spec['mode'] == 'profile':
        from benchmarks.executorch_profile import profile_method
        path = spec['paths'][spec['runtime']]
        if isinstance(path, dict):  # a detector: its dense program
            path = path['dense']
        image = example_input(spec['model'], spec['shape'])
        return dict(spec, profile=profile_method(path, [image],
                                                 threads=spec['threads']))
    if spec['mode'] == 'memory':
        _runner(spec['runtime'], spec)()
        return dict(spec, peak_mb=peak_rss_mb())
    runners: Dict[str, Callable[[], object]] = {}
    failures: Dict[str, str] = {}
    for runtime in spec['runtimes']:
        try:
            runners[runtime] = _runner(runtime, spec)
            runners[runtime]()  # warm-up: allocations, thread pools, caches
        # e.g. a program XNNPACK refuses, or our kernel library not built
        except (RuntimeError, ImportError) as err:
            runners.pop(runtime, None)
            failures[runtime] = str(err).strip().splitlines()[-1]
    times = time_passes([lambda _=None, r=r: r() for r in runners.values()],
                        spec['passes'])
    return dict(spec, failures=failures, median_ms={
        runtime: 1e3 * times.median(index)
        for index, runtime in enumerate(runners)
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


def model_shape(name: str, text: str) -> Tuple[int, int]:
    """The ``(H, W)`` of a :func:`parse_shape` text for model ``name``."""
    if text == 'quick':
        return MODELS[name][1]
    height, width = (int(v) for v in text.lower().split('x'))
    return height, width


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
    parser.add_argument('--out', help='markdown file of the tables '
                        '(default: WORK_DIR/runtime_speed.md)')
    parser.add_argument('--no-profile', action='store_true',
                        help='skip the ExecuTorch profiler runs')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def measure(name: str, shape: Sequence[int], args: argparse.Namespace
            ) -> Tuple[Optional[str], Optional[str]]:
    """Export, time, measure and profile one (model, size); returns its
    speed table and its profile table (None where nothing ran)."""
    label = f'{LABELS[name]}, {shape[0]}x{shape[1]}'
    print(f'-- {label}', flush=True)
    paths, failures = export_all(name, shape, args.runtimes, args.work_dir,
                                 args.calibration_images)
    runtimes = [r for r in args.runtimes if r not in failures]
    spec = dict(model=name, shape=list(shape), threads=args.threads,
                passes=args.passes, runtimes=runtimes, paths=paths)
    timed = run_in_subprocess('benchmarks.runtime_speed',
                              dict(spec, mode='time'))
    if timed.get('status') != 'ok':
        print(f'   timing failed: {timed.get("message")}')
        return None, None
    rows: List[List[str]] = []
    eager = timed['median_ms'].get('eager')
    for runtime in args.runtimes:
        if runtime in failures or runtime in timed['failures']:
            failure = (f'fails to export ({failures[runtime]})'
                       if runtime in failures else
                       f'fails to run ({timed["failures"][runtime]})')
            rows.append([runtime, failure, '', ''])
            continue
        memory = {} if args.no_memory else run_in_subprocess(
            'benchmarks.runtime_speed',
            dict(spec, mode='memory', runtime=runtime))
        ms = timed['median_ms'][runtime]
        rows.append([
            runtime, f'{ms:.1f}', f'{ms / eager:.2f}' if eager else '',
            f'{memory.get("peak_mb", float("nan")):.0f}'
        ])
    speed = (f'**{label}, {args.threads} threads, median of {args.passes} '
             f'interleaved passes (load {os.getloadavg()[0]:.1f})**\n\n' +
             markdown_table(['runtime', 'ms', 'vs eager',
                             'peak RSS MB (own process)'], rows,
                            align='lrrr'))
    print(speed, flush=True)
    profiles = []
    for runtime in timed['median_ms']:
        if not runtime.startswith('executorch') or args.no_profile:
            continue
        result = run_in_subprocess('benchmarks.runtime_speed',
                                   dict(spec, mode='profile',
                                        runtime=runtime))
        if result.get('status') == 'ok':
            profiles.append((runtime, result['profile']))
        else:
            print(f'   {runtime}: profile failed: {result.get("message")}')
    if not profiles:
        return speed, None
    which = ' (the dense program)' if name in DETECTORS else ''
    profile = (f'**{label}{which}: ExecuTorch profiler, {args.threads} '
               'threads**\n\n' + profile_table(
                   [profile_row(runtime, result)
                    for runtime, result in profiles]) + '\n\n' +
               xnnpack_table([xnnpack_row(runtime, result)
                              for runtime, result in profiles]))
    print(profile, flush=True)
    return speed, profile


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return 0
    failed = False
    tables: List[str] = []
    for name in args.models:
        for text in args.shapes:
            speed, profile = measure(name, model_shape(name, text), args)
            failed = failed or speed is None
            tables += [t for t in (speed, profile) if t]
    out = args.out or osp.join(args.work_dir, 'runtime_speed.md')
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    with open(out, 'w') as f:
        f.write('\n\n'.join(tables) + '\n')
    print(f'tables written to {out}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
