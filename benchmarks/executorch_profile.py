"""Where an ExecuTorch program's time goes, from ExecuTorch's own profiler:
the XNNPACK delegate against the operators left to the portable kernels.

    python -m benchmarks.executorch_profile work_dirs/runtime_speed/backbone_192x192.int8.pte

The program runs ``--runs`` times on random inputs of its own shapes with
ETDump recording, and ExecuTorch's ``Inspector`` reads the events back. A
method's time splits into ``DELEGATE_CALL`` events (the subgraphs XNNPACK
runs) and ``OPERATOR_CALL`` events (one per operator the portable kernels
run, each wrapping a ``native_call_<operator>`` event that names it); the
rest of ``Method::execute`` is the runtime's own bookkeeping. Inside the
delegates XNNPACK records one event per kernel, named by its operator and
data type (``Fully Connected (NC, QS8, QC8W) GEMM #3``): those of int8 types
(QS8, QC8, QU8, QD8) are the time the program actually spends in int8.
Our own kernels (a program exported with ``laplace='operator'``) are
operator calls too, each recording an event named by its operator
(``mmlaplacian::laplace_kernel.out``, ``mmlaplacian::layer_norm.out``):
their time is reported on its own and taken out of the portable kernels'.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import torch

from benchmarks.tables import markdown_table

EXECUTE = 'Method::execute'
DELEGATE = 'DELEGATE_CALL'
PORTABLE = 'OPERATOR_CALL'
KERNEL_PREFIX = 'native_call_'
# Events of our ExecuTorch kernels (mmlaplacian.deployment.executorch_kernels).
OWN_PREFIX = 'mmlaplacian::'
RUNTIME_EVENTS = (EXECUTE, DELEGATE, PORTABLE, 'Program::load_method',
                  'Method::init')
INT8_TYPES = re.compile(r'\bQ[SCUD]8')


def random_inputs(program, method: str) -> List[torch.Tensor]:
    """Random float inputs of the method's input shapes."""
    from mmlaplacian.deployment.executorch_kernels import method_input_sizes
    return [torch.rand(size) for size in method_input_sizes(program, method)]


def event_times_ms(etdump_path: str,
                   skip_first: bool = True) -> Dict[str, List[float]]:
    """Mean time over the recorded runs of every profiling event, in ms,
    grouped by event name (one list entry per event of that name).

    ``skip_first`` leaves out the first run (first-call allocations)."""
    from executorch.devtools import Inspector
    inspector = Inspector(etdump_path=etdump_path)
    times: Dict[str, List[float]] = defaultdict(list)
    for block in inspector.event_blocks:
        for event in block.events:
            if event.perf_data is None:
                continue
            raw = event.perf_data.raw
            if skip_first and len(raw) > 1:
                raw = raw[1:]
            times[event.name].append(sum(raw) / len(raw))
    return times


def profile_method(path: str,
                   inputs: Optional[Sequence[torch.Tensor]] = None,
                   method: str = 'forward',
                   runs: int = 3,
                   threads: int = 2) -> dict:
    """Profile ``runs`` executions of a method (after one left out).

    Args:
        path (str): The ``.pte`` program.
        inputs (Sequence[Tensor], optional): The method's arguments; random
            ones of its shapes when omitted.
        method (str): The method to run.
        runs (int): Executions recorded; times are their means.
        threads (int): torch threads (XNNPACK's thread pool follows them).

    Returns:
        dict: ``execute_ms``, ``delegate_ms``, ``portable_ms``,
        ``portable_share`` (of ``execute_ms``), ``int8_ms`` (XNNPACK's int8
        kernels), ``own_ms`` (our kernels, not in ``portable_ms``), and
        ``portable_ops``, ``own_ops`` and ``xnnpack_ops``:
        ``{name: [calls, ms]}``, slowest first (XNNPACK kernels by operator
        and data type, their ``#n`` instance numbers dropped).
    """
    from mmlaplacian.deployment.executorch_kernels import load_program
    torch.set_num_threads(threads)
    program = load_program(path, enable_etdump=True, debug_buffer_size=0)
    if inputs is None:
        inputs = random_inputs(program, method)
    loaded = program.load_method(method)
    for _ in range(runs + 1):
        loaded.execute(list(inputs))
    with tempfile.TemporaryDirectory() as folder:
        etdump = os.path.join(folder, 'run.etdp')
        program.write_etdump_result_to_file(
            etdump, os.path.join(folder, 'debug.bin'))
        times = event_times_ms(etdump)
    execute = sum(times.get(EXECUTE, [0.]))
    ops: Dict[str, List[float]] = {}
    own: Dict[str, List[float]] = {}
    kernels: Dict[str, List[float]] = defaultdict(lambda: [0, 0.])
    for name, values in times.items():
        if name.startswith(KERNEL_PREFIX):
            ops[name[len(KERNEL_PREFIX):]] = [len(values), sum(values)]
        elif name.startswith(OWN_PREFIX):
            own[name] = [len(values), sum(values)]
        elif name not in RUNTIME_EVENTS:
            kernel = kernels[re.sub(r' #\d+$', '', name)]
            kernel[0] += len(values)
            kernel[1] += sum(values)
    # Our kernels' calls are operator calls too: the rest is portable.
    own_ms = sum(ms for _, ms in own.values())
    portable = sum(times.get(PORTABLE, [0.])) - own_ms
    return dict(execute_ms=execute,
                delegate_ms=sum(times.get(DELEGATE, [0.])),
                portable_ms=portable,
                portable_share=portable / execute if execute else 0.,
                int8_ms=sum(ms for name, (_, ms) in kernels.items()
                            if INT8_TYPES.search(name)),
                own_ms=own_ms,
                portable_ops=_slowest_first(ops),
                own_ops=_slowest_first(own),
                xnnpack_ops=_slowest_first(kernels))


def _slowest_first(ops: Dict[str, List[float]]) -> Dict[str, List[float]]:
    return dict(sorted(ops.items(), key=lambda item: -item[1][1]))


PROFILE_HEADER = ['program', 'execute ms', 'XNNPACK ms',
                  'of which int8 kernels', 'portable ms', 'portable share',
                  'our kernels ms', 'slowest portable operators']


def profile_row(label: str, result: dict, top: int = 5) -> List[str]:
    """A :data:`PROFILE_HEADER` row of :func:`profile_method`'s result."""
    ops = ', '.join(f'{name} ×{calls} {ms:.1f} ms'
                    for name, (calls, ms) in list(
                        result['portable_ops'].items())[:top])
    return [label, f'{result["execute_ms"]:.1f}',
            f'{result["delegate_ms"]:.1f}', f'{result["int8_ms"]:.1f}',
            f'{result["portable_ms"]:.1f}', f'{result["portable_share"]:.1%}',
            f'{result["own_ms"]:.1f}' if result['own_ops'] else '—',
            ops or '—']


def xnnpack_row(label: str, result: dict, top: int = 6) -> List[str]:
    """The slowest XNNPACK kernels of :func:`profile_method`'s result."""
    return [label, ', '.join(f'{name} ×{calls} {ms:.1f} ms'
                             for name, (calls, ms) in list(
                                 result['xnnpack_ops'].items())[:top])]


def profile_table(rows: Sequence[Sequence[str]]) -> str:
    return markdown_table(PROFILE_HEADER, rows, align='lrrrrrrl')


def xnnpack_table(rows: Sequence[Sequence[str]]) -> str:
    return markdown_table(['program', 'slowest XNNPACK kernels'], rows,
                          align='ll')


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('program', help='a .pte file')
    parser.add_argument('--method', default='forward')
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--threads', type=int, default=2)
    args = parser.parse_args(argv)
    if not os.path.isfile(args.program):
        parser.error(f'{args.program}: no such file')
    result = profile_method(args.program, method=args.method,
                            runs=args.runs, threads=args.threads)
    label = f'{os.path.basename(args.program)}:{args.method}'
    print(profile_table([profile_row(label, result)]))
    print()
    print(xnnpack_table([xnnpack_row(label, result)]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
