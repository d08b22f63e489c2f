"""LaplacianFormer backbone latency and memory: eager PyTorch, onnxruntime
and ExecuTorch (XNNPACK), side by side on this CPU.

    python -m benchmarks.executorch_latency --arch tiny --shape 224 320

Exports the backbone once to ONNX and to a ``.pte`` program (under
``--work-dir``), then times the three runtimes interleaved pass by pass in
one process (so the machine's load affects them alike), and measures each
runtime's peak resident memory in a fresh process of its own. Needs
onnxruntime and executorch.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys
from typing import Callable, Dict, Optional, Sequence

import torch

from benchmarks.harness import (peak_rss_mb, run_in_subprocess, time_passes,
                                worker_main)
from benchmarks.tables import markdown_table

RUNTIMES = ('eager', 'onnxruntime', 'executorch')


def _backbone(arch: str) -> torch.nn.Module:
    from mmlaplacian import LaplacianFormer
    from mmlaplacian.deployment import BackboneForExport
    torch.manual_seed(0)
    return BackboneForExport(LaplacianFormer(arch, drop_path_rate=0.).eval())


def _image(shape: Sequence[int]) -> torch.Tensor:
    return torch.rand(1, 3, *shape, generator=torch.Generator().manual_seed(0))


def _runner(runtime: str, spec: dict) -> Callable[[], object]:
    """A callable running one forward pass of ``runtime``."""
    image = _image(spec['shape'])
    if runtime == 'eager':
        model = _backbone(spec['arch'])

        def run():
            with torch.no_grad():
                return model(image)

        return run
    if runtime == 'onnxruntime':
        from mmlaplacian.deployment import ort_run, ort_session
        session = ort_session(spec['onnx'], num_threads=spec['threads'])
        return lambda: ort_run(session, image)
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(spec['pte']).load_method('forward')
    return lambda: method.execute([image])


def run_case(spec: dict) -> dict:
    """Worker: time every runtime interleaved, or one runtime's memory."""
    torch.set_num_threads(spec['threads'])
    if spec['mode'] == 'memory':
        _runner(spec['runtime'], spec)()
        return dict(spec, peak_mb=peak_rss_mb())
    runners = [_runner(runtime, spec) for runtime in RUNTIMES]
    for run in runners:  # warm-up: allocations, thread pools, caches
        run()
    times = time_passes([lambda _=None, r=r: r() for r in runners],
                        spec['passes'])
    return dict(spec, median_ms={
        runtime: 1e3 * times.median(index)
        for index, runtime in enumerate(RUNTIMES)
    })


def export_both(arch: str, shape: Sequence[int], work_dir: str) -> Dict:
    """ONNX and ExecuTorch files of the backbone (reused when present)."""
    from mmlaplacian.deployment import export_onnx
    from mmlaplacian.deployment.executorch_export import export_executorch
    os.makedirs(work_dir, exist_ok=True)
    stem = osp.join(work_dir, f'lf_{arch}_{shape[0]}x{shape[1]}')
    paths = dict(onnx=stem + '.onnx', pte=stem + '.pte')
    model, image = _backbone(arch), _image(shape)
    if not osp.exists(paths['onnx']):
        export_onnx(model, image, paths['onnx'])
    if not osp.exists(paths['pte']):
        result = export_executorch(model, image, paths['pte'])
        print('left to ExecuTorch\'s portable kernels: ' + ', '.join(
            f'{name} x{count}'
            for name, count in result.portable_ops.most_common()))
    return paths


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--arch', default='tiny')
    parser.add_argument('--shape', type=int, nargs=2, default=(224, 320))
    parser.add_argument('--passes', type=int, default=20)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--work-dir', default='work_dirs/executorch')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return
    spec = dict(arch=args.arch, shape=list(args.shape), threads=args.threads,
                passes=args.passes,
                **export_both(args.arch, args.shape, args.work_dir))
    timed = run_in_subprocess('benchmarks.executorch_latency',
                              dict(spec, mode='time'))
    if timed.get('status') != 'ok':
        sys.exit(f'timing failed: {timed.get("message")}')
    rows = []
    for runtime in RUNTIMES:
        memory = run_in_subprocess(
            'benchmarks.executorch_latency',
            dict(spec, mode='memory', runtime=runtime))
        ms = timed['median_ms'][runtime]
        rows.append([
            runtime, f'{ms:.1f}', f'{ms / timed["median_ms"]["eager"]:.2f}',
            f'{memory.get("peak_mb", float("nan")):.0f}'
        ])
    print(f'LaplacianFormer-{args.arch} backbone, {args.shape[0]}x'
          f'{args.shape[1]}, {args.threads} threads, median of '
          f'{args.passes} interleaved passes')
    print(markdown_table(
        ['runtime', 'ms', 'vs eager', 'peak RSS MB (own process)'], rows))


if __name__ == '__main__':
    main()
