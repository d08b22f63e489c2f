"""The C++ ExecuTorch runner against ExecuTorch's Python runtime: time per
inference and peak resident memory, side by side on this CPU.

    make executorch-runner
    python -m benchmarks.executorch_runner_speed lf_tiny_op.pte \\
        lf_tiny_op_int8.pte --rounds 3 --passes 5

Each round runs every program in two fresh processes, one after the other:
``mmlaplacian_executorch_runner`` (``tools/deployment/executorch_runner/``)
and a Python process that loads the program as this package's runners do
(:func:`mmlaplacian.deployment.executorch_kernels.load_program`: ExecuTorch's
Python runtime with our kernels). Both feed seeded uniform [0, 1) inputs
(each its own generator: the time does not depend on the values), run one
untimed pass, then ``--passes`` timed ones; the table gives the
median over rounds of each process's median, and the largest peak resident
memory of its processes (the whole process: runtime, program and, for
Python, the interpreter and torch). Both use ExecuTorch's thread pool at
its default size.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import re
import statistics
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from benchmarks.executorch_profile import random_inputs
from benchmarks.harness import (REPO_ROOT, peak_rss_mb, run_in_subprocess,
                                time_passes, worker_main)
from benchmarks.tables import markdown_table

RUNNER = osp.join(REPO_ROOT, 'build', 'executorch_runner',
                  'mmlaplacian_executorch_runner')


def run_case(spec: dict) -> dict:
    """Worker: one program in ExecuTorch's Python runtime."""
    import torch

    from mmlaplacian.deployment.executorch_kernels import load_program
    program = load_program(spec['program'])
    torch.manual_seed(spec['seed'])
    inputs = random_inputs(program, spec['method'])
    method = program.load_method(spec['method'])
    method.execute(inputs)  # warm-up: allocations, thread pool, caches
    times = time_passes([lambda: method.execute(inputs)], spec['passes'])
    return dict(spec, median_ms=1e3 * times.median(), peak_mb=peak_rss_mb())


def run_cpp(runner: str, spec: dict) -> dict:
    """One program in the C++ runner; its printed median and peak RSS."""
    command = [
        runner, spec['program'], '--method', spec['method'], '--warmup', '1',
        '--passes',
        str(spec['passes']), '--seed',
        str(spec['seed'])
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    median = re.search(r'time: median ([\d.]+) ms', result.stdout)
    peak = re.search(r'peak RSS: ([\d.]+) MB', result.stdout)
    if result.returncode != 0 or not (median and peak):
        tail = (result.stderr.strip().splitlines() or ['no output'])[-1]
        return dict(spec, status='error',
                    message=f'exit {result.returncode}: {tail}')
    return dict(spec, status='ok', median_ms=float(median.group(1)),
                peak_mb=float(peak.group(1)))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('programs', nargs='*', help='.pte files')
    parser.add_argument('--runner', default=RUNNER,
                        help='the runner executable (default: what make '
                        'executorch-runner builds)')
    parser.add_argument('--method', default='forward')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--passes', type=int, default=5)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    if not args.programs:
        parser.error('give at least one .pte program')
    for path in args.programs:
        if not osp.isfile(path):
            parser.error(f'no program at {path}')
    if not os.access(args.runner, os.X_OK):
        parser.error(f'no runner at {args.runner} (make executorch-runner)')
    if args.rounds < 1 or args.passes < 1:
        parser.error('--rounds and --passes must be at least 1')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(run_case, args.worker)
        return 0
    results: Dict[str, Dict[str, List[dict]]] = {
        path: {'cpp': [], 'python': []}
        for path in args.programs
    }
    for round_index in range(args.rounds):
        for path in args.programs:
            spec = dict(program=osp.abspath(path), method=args.method,
                        passes=args.passes, seed=args.seed)
            for kind, result in (
                ('cpp', run_cpp(args.runner, spec)),
                ('python', run_in_subprocess('benchmarks.'
                                             'executorch_runner_speed', spec)),
            ):
                if result.get('status') != 'ok':
                    print(f'{path}: {kind} failed: {result.get("message")}')
                    return 1
                results[path][kind].append(result)
                print(f'round {round_index + 1}/{args.rounds} {path} {kind}: '
                      f'{result["median_ms"]:.1f} ms, '
                      f'{result["peak_mb"]:.0f} MB', flush=True)
    rows = []
    for path, kinds in results.items():
        ms = {k: statistics.median(r['median_ms'] for r in kinds[k])
              for k in kinds}
        mb = {k: max(r['peak_mb'] for r in kinds[k]) for k in kinds}
        rows.append([
            osp.basename(path), f'{ms["cpp"]:.1f}', f'{ms["python"]:.1f}',
            f'{ms["cpp"] / ms["python"]:.2f}', f'{mb["cpp"]:.0f}',
            f'{mb["python"]:.0f}'
        ])
    print(f'\n**C++ runner against the Python runtime: median of {args.rounds} '
          f'round(s) of {args.passes} passes (load '
          f'{os.getloadavg()[0]:.1f})**\n')
    print(markdown_table(['program', 'C++ ms', 'Python ms', 'C++ / Python',
                          'C++ peak RSS MB', 'Python peak RSS MB'], rows,
                         align='lrrrrr'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
