"""Check the C++ ExecuTorch runner against ExecuTorch's Python runtime.

Runs one ``.pte`` program on the same seeded input twice: in this process
with ExecuTorch's Python runtime (and our kernels, where the program needs
them), and in ``mmlaplacian_executorch_runner``
(``tools/deployment/build_executorch_runner.sh``), optionally through a
launcher such as qemu-user for a cross-built runner. Prints, per output,
the largest difference relative to the output's largest value and the
correlation, and exits with status 1 when a difference exceeds
``--tolerance``.

    python tools/deployment/check_executorch_runner.py work_dirs/lf.pte \
        --runner build/executorch_runner/mmlaplacian_executorch_runner
    python tools/deployment/check_executorch_runner.py work_dirs/lf.pte \
        --runner build/executorch_runner_aarch64/mmlaplacian_executorch_runner \
        --launcher 'qemu-aarch64 -cpu cortex-a72 -L /usr/aarch64-linux-gnu'
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import shlex
import subprocess
import sys
import tempfile
from typing import List, Sequence, Tuple

import numpy as np
import torch

from mmlaplacian.deployment.executorch_kernels import (load_program,
                                                     method_input_sizes)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Run a .pte program in the C++ runner and in '
        "ExecuTorch's Python runtime and compare the outputs.")
    parser.add_argument('program', help='the .pte file')
    parser.add_argument('--runner', required=True,
                        help='the mmlaplacian_executorch_runner executable')
    parser.add_argument('--launcher', default='',
                        help="command put before the runner, e.g. "
                        "'qemu-aarch64 -L /usr/aarch64-linux-gnu'")
    parser.add_argument('--method', default='forward')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the uniform [0, 1) input')
    parser.add_argument('--tolerance', type=float, default=1e-4,
                        help='largest allowed |runner - Python| / '
                        'max |Python| per output (default 1e-4; a program '
                        'run on another CPU architecture, int8 above all, '
                        'needs more)')
    return parser.parse_args(argv)


def load_method(path: str, name: str) -> Tuple[object, List[Tuple[int,
                                                                   ...]]]:
    """A method of the program, loaded once in ExecuTorch's Python runtime
    (with our kernels), and the shapes of its inputs."""
    program = load_program(path)
    if name not in program.method_names:
        raise SystemExit(f'{path} has no method {name!r}; its methods: '
                         f'{", ".join(sorted(program.method_names))} '
                         '(--method)')
    return program.load_method(name), method_input_sizes(program, name)


def compare(reference: np.ndarray, candidate: np.ndarray) -> Tuple[float,
                                                                  float]:
    """Largest difference relative to the reference's largest magnitude,
    and the correlation of the two."""
    if reference.shape != candidate.shape:
        raise ValueError(f'shapes differ: {reference.shape} (Python) and '
                         f'{candidate.shape} (runner)')
    scale = max(float(np.abs(reference).max()), 1e-12)
    relative = float(np.abs(reference - candidate).max()) / scale
    correlation = float(np.corrcoef(reference.ravel(),
                                    candidate.ravel())[0, 1])
    return relative, correlation


def run_runner(args: argparse.Namespace, input_files: Sequence[str],
               out_dir: str) -> None:
    command = shlex.split(args.launcher) + [
        args.runner, args.program, '--method', args.method, '--output-dir',
        out_dir, '--warmup', '0', '--passes', '1'
    ]
    for path in input_files:
        command += ['--input', path]
    result = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit(f'the runner failed (exit status '
                         f'{result.returncode}): {shlex.join(command)}')


def main(argv: Sequence[str] = ()) -> int:
    args = parse_args(argv or sys.argv[1:])
    for path, what in ((args.program, 'program'), (args.runner, 'runner')):
        if not osp.isfile(path):
            raise SystemExit(f'no {what} at {path}')
    method, shapes = load_method(args.program, args.method)
    generator = np.random.default_rng(args.seed)
    inputs = [generator.random(shape, dtype=np.float32) for shape in shapes]
    with tempfile.TemporaryDirectory() as work:
        input_files = []
        for i, value in enumerate(inputs):
            input_files.append(osp.join(work, f'input_{i}.npy'))
            np.save(input_files[-1], value)
        run_runner(args, input_files, work)
        expected = method.execute([torch.from_numpy(x) for x in inputs])
        worst = 0.0
        for i, reference in enumerate(expected):
            saved = osp.join(work, f'output_{i}.npy')
            if not os.path.exists(saved):
                raise SystemExit(f'the runner wrote no output {i}')
            relative, correlation = compare(reference.numpy(),
                                            np.load(saved))
            worst = max(worst, relative)
            print(f'output {i} {tuple(reference.shape)}: max |diff| / '
                  f'max |Python| {relative:.2e}, correlation '
                  f'{correlation:.6f}')
    verdict = 'within' if worst <= args.tolerance else 'BEYOND'
    print(f'runner vs Python runtime: worst {worst:.2e}, {verdict} the '
          f'tolerance {args.tolerance:.0e}')
    return 0 if worst <= args.tolerance else 1


if __name__ == '__main__':
    sys.exit(main())
