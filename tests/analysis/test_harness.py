"""benchmarks.harness: timing, memory and subprocess cases that can be
checked against known work, known allocations and known failures."""
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from benchmarks import harness


def test_twice_the_work_takes_twice_the_cpu_time():
    a = torch.randn(256, 256)

    def work(steps):
        out = a
        for _ in range(steps):
            out = (out @ a).tanh()
        return out

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time of one thread: robust to load
    try:
        once, twice = [], []
        for _ in range(3):  # alternate, so drifts hit both alike
            once += harness.time_passes([lambda: work(20)], 3).cpu
            twice += harness.time_passes([lambda: work(40)], 3).cpu
    finally:
        torch.set_num_threads(threads)
    ratio = sorted(twice)[4] / sorted(once)[4]
    assert 1.6 < ratio < 2.5, (once, twice)


def test_phases_chain_and_are_timed_apart():
    seen = []
    times = harness.time_passes(
        [lambda: 21, lambda value: seen.append(value * 2) or time.sleep(0.05)],
        count=2)
    assert seen == [42, 42] and times.passes == 2
    assert min(times.wall[1]) >= 0.05 and max(times.wall[0]) < 0.01
    assert times.median() == pytest.approx(
        times.median(0) + times.median(1))
    assert max(times.cpu) < 0.04  # sleeping costs no CPU time


RSS_SCRIPT = """
import torch
from benchmarks.harness import current_rss_mb, peak_rss_mb
before = current_rss_mb()
block = torch.ones(64 * 2**20 // 4)  # 64 MB, every page written
print(current_rss_mb() - before, peak_rss_mb() - current_rss_mb())
"""


def test_rss_sees_a_known_allocation():
    """Measured in a fresh process: a long-lived one (a pytest worker) may
    get the block from pages that are resident already."""
    proc = subprocess.run([sys.executable, '-c', RSS_SCRIPT],
                          capture_output=True,
                          text=True,
                          cwd=harness.REPO_ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    grown, peak_over_current = map(float, proc.stdout.split())
    assert 60 < grown < 70
    assert peak_over_current >= -1


# A case worker run as `python -c` from the repository root.
WORKER = '''
import os
import sys
import time
from benchmarks.harness import current_rss_mb, peak_rss_mb, worker_main


def run_case(spec):
    if spec['kind'] == 'fail':
        raise RuntimeError('broken case\\nsecond line')
    if spec['kind'] == 'sleep':
        time.sleep(60)
    base = current_rss_mb()
    block = b'\\x01' * (spec['mb'] * 2**20)
    return dict(spec, delta=peak_rss_mb() - base, size=len(block),
                env=os.environ.get('HARNESS_TEST'))


if __name__ == '__main__':
    worker_main(run_case, sys.argv[2])
'''


@pytest.fixture(scope='module')
def worker():
    return ['-c', textwrap.dedent(WORKER)]


def test_subprocess_cases_measure_their_own_memory(worker):
    small, large = (harness.run_in_subprocess(
        worker, dict(kind='alloc', mb=mb), env=dict(HARNESS_TEST='on'))
                    for mb in (40, 160))
    assert small['status'] == large['status'] == 'ok'
    assert small['env'] == 'on'
    assert 36 < small['delta'] < 48 and 150 < large['delta'] < 172


def test_failing_cases_are_reported(worker):
    failed = harness.run_in_subprocess(worker, dict(kind='fail'))
    assert failed['status'] == 'error'
    assert failed['message'] == 'broken case'
    slow = harness.run_in_subprocess(worker, dict(kind='sleep'), timeout=3)
    assert slow['status'] == 'timeout' and slow['kind'] == 'sleep'
