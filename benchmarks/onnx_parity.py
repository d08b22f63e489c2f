"""An exported ONNX graph against PyTorch eager: outputs, latency and peak
memory.

Detectors are compared with mmdet's own ``inference_detector`` (matched
detections: boxes, scores, pasted masks), backbones feature map by feature
map. A graph exported with ``--dynamic`` is also compared at each
``--check-shape`` (one other size when none is given). Both runtimes are
timed in turns, so that a change of load hits both alike; ``--memory``
measures the peak of one inference of each runtime in a fresh process.
Exit status 1 when an output differs beyond the stated tolerance.

Examples:
    python tools/deployment/export_onnx.py configs/mask_rcnn/lf_tiny_1x.py \\
        CKPT --shape 800 1344 --out lf_tiny_mask_rcnn.onnx
    python -m benchmarks.onnx_parity configs/mask_rcnn/lf_tiny_1x.py CKPT \\
        --onnx lf_tiny_mask_rcnn.onnx --shape 800 1344 --memory
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.config import DictAction

from mmlaplacian.deployment import (detections_from_ort, graph_input,
                                    load_detector, ort_run, ort_session)
from mmlaplacian.engine import read_config

from benchmarks.harness import (current_rss_mb, peak_rss_mb,
                                run_in_subprocess, time_passes, worker_main)
from benchmarks.onnx_compare import (compare_detections, compare_features,
                                     mmdet_reference)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Compare an ONNX export with PyTorch and time both')
    parser.add_argument('config', nargs='?', help='mmdet config file')
    parser.add_argument('checkpoint',
                        nargs='?',
                        help='checkpoint the graph was exported from '
                        '(default: the seeded random weights of the export)')
    parser.add_argument('--onnx', help='the exported graph (.onnx)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='input height and width of the comparison')
    parser.add_argument('--backbone-only', action='store_true',
                        help='the graph is the backbone alone')
    parser.add_argument('--check-shape', type=int, nargs=2,
                        metavar=('H', 'W'), action='append', default=[],
                        help='also compare at this size (dynamic graphs); '
                        'repeatable')
    parser.add_argument('--image',
                        help='an image file resized to --shape (default: '
                        'random pixels)')
    parser.add_argument('--runs', type=int, default=3,
                        help='timed runs per runtime')
    parser.add_argument('--threads', type=int, default=0,
                        help='CPU threads for both runtimes (0: default)')
    parser.add_argument('--memory', action='store_true',
                        help='also measure the peak memory of one inference '
                        'of each runtime (each in a fresh process)')
    parser.add_argument('--no-arena', action='store_true',
                        help='onnxruntime without its CPU memory arena')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings: key=value pairs')
    parser.add_argument('--worker', help=argparse.SUPPRESS)  # memory case
    args = parser.parse_args(argv)
    if args.worker:
        return args
    for name in ('config', 'onnx', 'shape'):
        if getattr(args, name) is None:
            parser.error(f'--{name} is required' if name != 'config' else
                         'the config is required')
    for path in (args.config, args.onnx, args.checkpoint):
        if path and not osp.isfile(path):
            parser.error(f'file not found: {path}')
    if args.runs < 1:
        parser.error('--runs must be >= 1')
    return args


def is_dynamic(session) -> bool:
    """Whether the graph's input height or width is symbolic."""
    return any(isinstance(d, str) for d in session.get_inputs()[0].shape[2:])


def shapes_to_check(args, dynamic: bool) -> List[Tuple[int, int]]:
    if args.check_shape and not dynamic:
        raise SystemExit('error: --check-shape needs a graph exported with '
                         '--dynamic (a static graph serves one size only)')
    shapes = [tuple(args.shape)] + [tuple(s) for s in args.check_shape]
    if dynamic and not args.check_shape:
        height, width = args.shape
        shapes.append((height + 64, width - 64 if width >= 192 else
                       width + 64))
    return shapes


def eager_fn(model, detector: bool, image: torch.Tensor):
    """PyTorch's side of one inference: mmdet's or the backbone's."""
    if detector:
        return lambda: mmdet_reference(model, image)

    def backbone():
        with torch.no_grad():
            return model.backbone(image)

    return backbone


def compare_once(args, model, session, shape) -> bool:
    """Run both runtimes at ``shape``; print the differences; True if all
    are within tolerance."""
    detector = not args.backbone_only
    image = graph_input(shape, detector, args.image)
    ort_out = ort_run(session, image)
    names = [o.name for o in session.get_outputs()]
    print(f'\n-- outputs at {shape[0]}x{shape[1]} '
          f'(onnxruntime against PyTorch eager)')
    ref = eager_fn(model, detector, image)()
    if detector:
        rcnn_cfg = (model.test_cfg or {}).get('rcnn') or {}
        mask_thr = rcnn_cfg.get('mask_thr_binary', 0.5)
        comparison = compare_detections(
            detections_from_ort(ort_out, names, shape, mask_thr), ref)
        lines = comparison.lines()
    else:
        comparison = compare_features(ort_out, ref)
        lines = comparison.lines(names)
    for line in lines:
        print('   ' + line)
    return comparison.ok


def time_both(args, model, session, shape) -> None:
    detector = not args.backbone_only
    image = graph_input(shape, detector, args.image)
    eager = eager_fn(model, detector, image)
    # Two phases of one pass: each runtime timed on its own, in turns.
    phases = [lambda: ort_run(session, image), lambda _: eager()]
    time_passes(phases, 1)  # warm-up
    times = time_passes(phases, args.runs)
    what = 'mmdet inference_detector' if detector else 'backbone forward'
    print(f'\n-- latency at {shape[0]}x{shape[1]}, {torch.get_num_threads()} '
          f'threads, median (min) of {args.runs} runs in turns, load '
          f'average {os.getloadavg()[0]:.1f}')
    for phase, name in enumerate(('onnxruntime', 'PyTorch eager')):
        print(f'   {name:14s} {times.median(phase):8.3f} s '
              f'({min(times.wall[phase]):.3f})' +
              (f'  [{what}]' if phase else ''))


def run_memory_case(spec: dict) -> Dict[str, float]:
    """One runtime's resident memory before and at the peak of inference."""
    if spec['threads']:
        torch.set_num_threads(spec['threads'])
    detector = not spec['backbone_only']
    image = graph_input(spec['shape'], detector)
    if spec['runtime'] == 'ort':
        session = ort_session(spec['onnx'], arena=spec['arena'])
        run = lambda: ort_run(session, image)  # noqa: E731
    else:
        cfg = read_config(spec['config'], spec['cfg_options'])
        run = eager_fn(load_detector(cfg, spec['checkpoint']), detector,
                       image)
    before = current_rss_mb()
    for _ in range(2):
        run()
    peak = peak_rss_mb()
    return dict(loaded_mib=round(before, 1), peak_mib=round(peak, 1),
                inference_mib=round(peak - before, 1))


def memory_both(args, shape) -> None:
    spec = dict(shape=list(shape), threads=args.threads,
                backbone_only=args.backbone_only, onnx=args.onnx,
                arena=not args.no_arena, config=args.config,
                checkpoint=args.checkpoint, cfg_options=args.cfg_options)
    print(f'\n-- peak memory at {shape[0]}x{shape[1]} (fresh process each; '
          f'MiB)')
    for runtime, name in (('ort', 'onnxruntime'), ('torch', 'PyTorch eager')):
        mem = run_in_subprocess('benchmarks.onnx_parity',
                                dict(spec, runtime=runtime), timeout=1800)
        if mem['status'] != 'ok':
            print(f'   {name:14s} {mem["status"]}: {mem.get("message")}')
            continue
        print(f'   {name:14s} loaded {mem["loaded_mib"]:8.1f}  peak '
              f'{mem["peak_mib"]:8.1f}  inference +{mem["inference_mib"]:.1f}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_memory_case, args.worker)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_detector(read_config(args.config, args.cfg_options),
                          args.checkpoint)
    session = ort_session(args.onnx, args.threads, arena=not args.no_arena)
    ok = True
    for shape in shapes_to_check(args, is_dynamic(session)):
        ok &= compare_once(args, model, session, shape)
    time_both(args, model, session, tuple(args.shape))
    if args.memory:
        memory_both(args, tuple(args.shape))
    if not ok:
        print('\nFAIL: onnxruntime and PyTorch differ beyond the tolerance '
              '(see above)', file=sys.stderr)
        return 1
    print('\nOK: onnxruntime matches PyTorch within the stated tolerances')
    return 0


if __name__ == '__main__':
    sys.exit(main())
