"""Where a detector's time goes, stage by stage, in eager PyTorch and in
ExecuTorch.

    python -m benchmarks.detector_stages --model mask_rcnn --shape 800x1344

The detector runs as :class:`~mmlaplacian.deployment.executorch_runner.
ExecuTorchDetector` runs it: the networks (the dense program, the RoI
heads) and the host steps between them, here with each step timed:

* ``dense``: backbone, neck and RPN (RetinaNet: its head) in one program;
* ``RoI Align``: both poolings (proposals for the box head, detections for
  the mask head), torchvision's kernel on the host;
* ``box head``, ``mask head``: the RoI heads program's two methods;
* ``detections``: box decoding, score threshold, NMS per class, top-k;
* ``rest``: what remains of the detector's outputs (RPN proposals and
  their NMS; RetinaNet: all of its decoding and NMS);
* ``paste masks``: the masks pasted into the image (``paste_masks``), as
  ``ExecuTorchDetector.predict`` does before it returns.

``eager`` runs the module the programs are exported from, with the same
host code. The programs are those of :mod:`benchmarks.runtime_speed` (same
``--work-dir``, made when absent); every runtime runs once per pass, in
turn, in one process, after a warm-up pass. Random weights (seeded).
"""
from __future__ import annotations

import argparse
import os.path as osp
import statistics
import sys
import time
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.runtime_speed import (CALIBRATION_IMAGES, DETECTORS, LABELS,
                                      MODELS, RUNTIMES, build_model,
                                      example_input, export_all, model_shape,
                                      parse_shape)
from benchmarks.harness import REPO_ROOT
from benchmarks.tables import markdown_table

STAGES = ('dense', 'RoI Align', 'box head', 'mask head', 'detections',
          'rest', 'paste masks', 'total')


class StageTimer:
    """Wall time of each named stage, summed within a pass."""

    def __init__(self) -> None:
        self.passes: List[Dict[str, float]] = []

    def start_pass(self) -> None:
        self.passes.append(defaultdict(float))

    def wrap(self, stage: str, fn: Callable) -> Callable:
        def timed(*args):
            start = time.perf_counter()
            out = fn(*args)
            self.passes[-1][stage] += time.perf_counter() - start
            return out

        return timed

    def median_ms(self, stage: str) -> float:
        return 1e3 * statistics.median(p.get(stage, 0.) for p in self.passes)


def stage_runner(module: torch.nn.Module, stages: Sequence[Callable],
                 image: torch.Tensor, timer: StageTimer) -> Callable[[], int]:
    """One timed pass of ``module.detect`` with the given networks; returns
    the number of detections."""
    from mmlaplacian.deployment import paste_masks
    two_stage = hasattr(module, 'bbox_head')
    names = ('dense', 'box head', 'mask head')[:len(stages)]
    timed = [timer.wrap(name, fn) for name, fn in zip(names, stages)]
    if two_stage:  # the host steps, as instance attributes over the class's
        module.pool = timer.wrap('RoI Align', type(module).pool)
        module.detections = timer.wrap('detections',
                                       type(module).detections.__get__(module))
    hw = tuple(image.shape[-2:])

    def run() -> int:
        timer.start_pass()
        start = time.perf_counter()
        with torch.no_grad():
            named = dict(zip(module.output_names,
                             module.detect(image, hw, *timed)))
        count = int(named['num_dets'])
        if 'masks' in named:
            timer.wrap('paste masks', paste_masks)(
                named['masks'][:count].numpy(),
                named['boxes'][:count].numpy(), hw)
        total = time.perf_counter() - start
        times = timer.passes[-1]
        times['total'] = total
        times['rest'] = total - sum(v for k, v in times.items()
                                    if k != 'total')
        return count

    return run


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', choices=DETECTORS, default='mask_rcnn')
    parser.add_argument('--shape', default='800x1344', type=parse_shape,
                        help="HxW, or 'quick' for the quick start's size")
    parser.add_argument('--runtimes', nargs='+',
                        choices=[r for r in RUNTIMES
                                 if not r.startswith('onnxruntime')],
                        default=['eager', 'executorch-operator-fp32',
                                 'executorch-operator-int8'])
    parser.add_argument('--passes', type=int, default=5)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--work-dir', default='work_dirs/runtime_speed')
    parser.add_argument('--calibration-images', default=CALIBRATION_IMAGES)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from mmlaplacian.deployment.executorch_runner import ExecuTorchDetector
    torch.set_num_threads(args.threads)
    shape = model_shape(args.model, args.shape)
    paths, failures = export_all(args.model, shape, args.runtimes,
                                 args.work_dir, args.calibration_images)
    if failures:
        print(f'failed to export: {failures}')
        return 1
    image = example_input(args.model, shape)
    timers = {runtime: StageTimer() for runtime in args.runtimes}
    runners = {}
    for runtime in args.runtimes:
        if runtime == 'eager':
            module = build_model(args.model).eval()
            # The networks in detect()'s order, as the module's forward
            # passes them (RetinaNet has the dense part only).
            stages = [
                s for s in (module.dense, getattr(module, 'bbox_head', None),
                            getattr(module, 'mask_head', None))
                if s is not None
            ]
        else:
            detector = ExecuTorchDetector(
                osp.join(REPO_ROOT, MODELS[args.model][0]), **paths[runtime])
            module, stages = detector.module, detector.stages
        runners[runtime] = stage_runner(module, stages, image,
                                        timers[runtime])
    counts = {runtime: run() for runtime, run in runners.items()}  # warm-up
    for timer in timers.values():
        timer.passes.clear()
    for index in range(args.passes):
        for runtime, run in runners.items():
            run()
        print(f'pass {index + 1}/{args.passes}', flush=True)
    rows = [[stage] + [f'{timers[r].median_ms(stage):.1f}'
                       for r in args.runtimes] for stage in STAGES
            if any(timers[r].median_ms(stage) for r in args.runtimes)]
    rows.append(['detections (count)'] + [str(counts[r])
                                          for r in args.runtimes])
    print(f'\n**{LABELS[args.model]}, {shape[0]}x{shape[1]}, '
          f'{args.threads} threads, median ms of {args.passes} passes**\n')
    print(markdown_table(['stage'] + list(args.runtimes), rows,
                         align='l' + 'r' * len(args.runtimes)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
