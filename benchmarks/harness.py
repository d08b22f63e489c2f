"""What every benchmark tool shares: cases in subprocesses, memory, timing.

* :func:`run_in_subprocess` / :func:`worker_main`: one case per fresh Python
  process (``python -m benchmarks.NAME --worker JSON`` prints
  ``RESULT <json>``), so one case's allocations, caches and thread pools
  never affect another's, and a case that runs out of time or memory is
  reported instead of ending the run.
* :func:`current_rss_mb`, :func:`peak_rss_mb`, :func:`reset_peak_rss`:
  resident memory (Linux).
* :func:`busy_cores`, :func:`wait_for_idle`: wait for a shared machine;
  :func:`threads_were_busy`: whether a pass had its cores to itself.
* :func:`save_results`, :func:`publish_table`: a run's ``results.json``
  (rewritten after every case, so an interrupted run keeps what it
  measured) and its markdown table.
* :func:`time_passes`: the one timing loop. A pass is a chain of phases
  (forward then backward, load then infer); each phase is timed on its own,
  with the device synchronised before and after it.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

RESULT_PREFIX = 'RESULT '
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- outputs
def save_results(out_dir: str, results: List[dict]) -> None:
    """Write ``results`` to ``out_dir/results.json``."""
    with open(os.path.join(out_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)


def publish_table(out_dir: str, filename: str, table: str) -> None:
    """Print a markdown table and write it to ``out_dir/filename``."""
    print(table)
    with open(os.path.join(out_dir, filename), 'w') as f:
        f.write(table)


# ------------------------------------------------------------- subprocess
def worker_main(run_case: Callable[[dict], dict], spec_json: str) -> None:
    """Entry point of a case subprocess: run it and print ``RESULT <json>``.

    A ``MemoryError`` or ``RuntimeError`` becomes ``status='oom'`` or
    ``'error'`` with the first line of its message; a result without a
    status gets ``status='ok'``.
    """
    spec = json.loads(spec_json)
    try:
        result = dict(run_case(spec))
        result.setdefault('status', 'ok')
    except (MemoryError, RuntimeError) as err:
        message = str(err).splitlines()[0] if str(err) else repr(err)
        oom = isinstance(err, MemoryError) or 'out of memory' in message \
            or "can't allocate memory" in message.lower()
        result = dict(spec, status='oom' if oom else 'error', message=message)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def run_in_subprocess(entry: Union[str, Sequence[str]],
                      spec: dict,
                      timeout: Optional[float] = None,
                      env: Optional[Dict[str, Optional[str]]] = None,
                      echo: bool = False) -> dict:
    """Run ``python -m entry --worker JSON(spec)`` in the repository root;
    never raises for a case.

    Args:
        entry (str | Sequence[str]): A module (``'benchmarks.backbone'``)
            whose ``--worker`` calls :func:`worker_main`, or the
            interpreter arguments that start one (``['-c', CODE]``).
        spec (dict): The case, passed as JSON.
        timeout (float, optional): Seconds before the case is killed.
        env (dict, optional): Variables added to this process's environment;
            a value of ``None`` removes the variable.
        echo (bool): Print the worker's standard output.

    Returns:
        dict: The worker's result, or ``spec`` with ``status`` ``'timeout'``,
        ``'oom'`` (killed by SIGKILL) or ``'error'`` and a ``message``.
    """
    start = ['-m', entry] if isinstance(entry, str) else list(entry)
    cmd = [sys.executable, *start, '--worker', json.dumps(spec)]
    environment = {name: value for name, value in
                   dict(os.environ, **(env or {})).items() if value is not None}
    try:
        # From the repository root, `python -m` finds the benchmarks package.
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout,
            cwd=REPO_ROOT, env=environment)
    except subprocess.TimeoutExpired:
        return dict(spec, status='timeout', message=f'> {timeout:g} s')
    if echo:
        print(proc.stdout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    if proc.returncode in (-9, 137):
        return dict(spec, status='oom',
                    message='killed (SIGKILL: out of memory?)')
    tail = (proc.stderr.strip().splitlines() or ['no output'])[-1]
    return dict(spec, status='error',
                message=f'exit {proc.returncode}: {tail}')


# ----------------------------------------------------------------- memory
def current_rss_mb() -> float:
    """Resident set size of this process now, in MB (Linux)."""
    with open('/proc/self/statm') as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf('SC_PAGE_SIZE') / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process's own memory so far, in MB.

    Read from ``VmHWM`` (Linux), not ``ru_maxrss``: ``ru_maxrss`` survives
    ``exec``, so a case subprocess would report its parent's footprint
    (the forked copy) whenever that was larger than its own.
    """
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> None:
    """Start :func:`peak_rss_mb` afresh from the resident set now (Linux
    4.0+: ``5`` written to ``/proc/self/clear_refs`` resets ``VmHWM``), so
    that a warm-up pass's code pages and caches are not counted again."""
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')


# ---------------------------------------------------------- shared machine
def busy_cores(interval: float = 1.) -> float:
    """Cores kept busy by all processes over ``interval`` (``/proc/stat``)."""

    def sample():
        with open('/proc/stat') as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return sum(values) - idle, sum(values)

    busy0, total0 = sample()
    time.sleep(interval)
    busy1, total1 = sample()
    cores = os.cpu_count() or 1
    return cores * (busy1 - busy0) / max(1, total1 - total0)


def wait_for_idle(max_seconds: float, idle_cores: float) -> float:
    """Wait until fewer than ``idle_cores`` are busy (or ``max_seconds``).

    Returns:
        float: The busy cores measured last.
    """
    deadline = time.perf_counter() + max_seconds
    busy = busy_cores()
    while busy > idle_cores and time.perf_counter() < deadline:
        busy = busy_cores(5.)
    return busy


# ----------------------------------------------------------------- timing
def threads_were_busy(cpu_seconds: float, wall_seconds: float,
                      threads: int) -> bool:
    """Whether a multi-threaded CPU pass kept its threads busy.

    On an otherwise idle machine the process CPU time of a compute-bound
    pass is close to ``threads × wall time``; under 80% of it means other
    processes held the cores (and idle threads waited), so the wall time
    is not the model's. A single thread is always counted as busy.
    """
    return threads <= 1 or cpu_seconds >= 0.8 * threads * wall_seconds


def synchronize(device: Any = None) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device is not None and str(device).startswith('cuda'):
        import torch
        torch.cuda.synchronize(device)


@dataclass
class PassTimes:
    """Seconds of timed passes.

    Attributes:
        wall (list[list[float]]): Wall seconds per phase, one entry per pass.
        cpu (list[float]): Process CPU seconds per pass (all threads).
    """
    wall: List[List[float]] = field(default_factory=list)
    cpu: List[float] = field(default_factory=list)

    @property
    def passes(self) -> int:
        return len(self.cpu)

    def pass_wall(self) -> List[float]:
        """Wall seconds of each whole pass (its phases added)."""
        return [sum(phases) for phases in zip(*self.wall)]

    def median(self, phase: Optional[int] = None) -> float:
        """Median wall seconds of one phase, or of whole passes."""
        return statistics.median(
            self.pass_wall() if phase is None else self.wall[phase])

    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


def time_passes(phases: Sequence[Callable[..., Any]],
                count: int,
                device: Any = None) -> PassTimes:
    """Run and time ``count`` passes of a chain of phases.

    The first phase is called without arguments, each later one with the
    previous phase's return value (e.g. ``forward() -> out``, then
    ``backward(out)``). The device is synchronised before and after every
    phase, so queued GPU work is counted where it was launched.

    Args:
        phases (Sequence[Callable]): The phases of one pass, in order.
        count (int): Passes to run (0 runs none).
        device (optional): A CUDA device to synchronise; None for the CPU.

    Returns:
        PassTimes: Wall seconds per phase and CPU seconds per pass.
    """
    times = PassTimes(wall=[[] for _ in phases])
    for _ in range(count):
        value = None
        cpu_start = time.process_time()
        for index, phase in enumerate(phases):
            synchronize(device)
            start = time.perf_counter()
            value = phase() if index == 0 else phase(value)
            synchronize(device)
            times.wall[index].append(time.perf_counter() - start)
        times.cpu.append(time.process_time() - cpu_start)
    return times
