"""compute-sanitizer finds the bugs planted in broken_kernels/*.cu.

The source compiles with nvcc on any machine (no GPU needed). On a GPU each
planted bug runs under the tool that must find it, through
``tools/gpu/sanitize.sh`` (the script and kernel filter that gpu_check.sh
runs our ops' cases with), and must make it fail; the clean case, the same
patterns done right, must pass every tool. A sanitizer that refuses the
device is reported as unavailable (skipped), never as a pass.
"""
import os
import os.path as osp
import shutil
import subprocess

import pytest
import torch
from gpu_utils import NEEDS_GPU

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SOURCE = osp.join(osp.dirname(osp.abspath(__file__)), 'broken_kernels',
                  'broken_kernels.cu')
SANITIZE = osp.join(REPO, 'tools', 'gpu', 'sanitize.sh')
UNAVAILABLE = 69  # sanitize.sh: the sanitizer cannot run on this machine
# tool: (the planted bug it must find, what it reports)
BUGS = {
    'memcheck': ('oob-write', 'Invalid __global__ write'),
    'racecheck': ('race', 'Race reported'),
    'initcheck': ('uninit-read', 'Uninitialized __global__ memory read'),
    'synccheck': ('bad-warp-mask', 'Barrier error'),
}

from tools.gpu.probe import cuda_home

HOME = cuda_home()
NVCC = osp.join(HOME, 'bin', 'nvcc') if HOME else shutil.which('nvcc')
pytestmark = pytest.mark.skipif(
    not NVCC, reason='nvcc not found: set CUDA_HOME or put nvcc on PATH')


@pytest.fixture(scope='module')
def binary(tmp_path_factory):
    """broken_kernels.cu built for this GPU, or for sm_90 (H200) without
    one."""
    arch = '90'
    if torch.cuda.is_available():
        arch = '%d%d' % torch.cuda.get_device_capability()
    out = str(tmp_path_factory.mktemp('broken') / 'broken_kernels')
    cmd = [NVCC, '-O2', '-lineinfo', f'-arch=sm_{arch}', SOURCE, '-o', out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f'{" ".join(cmd)}\n{proc.stderr}'
    return out


def sanitize(tool, *cmd, **env):
    return subprocess.run(['bash', SANITIZE, tool, *cmd], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_broken_kernels_compile(binary):
    """The kernels' mangled names hold "mmlaplacian", which sanitize.sh's
    filter selects."""
    with open(binary, 'rb') as f:
        assert b'11mmlaplacian6broken' in f.read()


def test_missing_sanitizer_is_not_a_pass(tmp_path):
    proc = sanitize('memcheck', 'true',
                    COMPUTE_SANITIZER=str(tmp_path / 'compute-sanitizer'))
    assert proc.returncode == 127
    assert 'not a pass' in proc.stderr


def replay(tmp_path, tool, output, status, options=''):
    """sanitize.sh over a stand-in compute-sanitizer that prints
    ``output`` and exits with ``status`` (``--help`` lists ``options``)."""
    fake = tmp_path / 'compute-sanitizer'
    lines = ''.join(f'echo "{line}"\n' for line in output)
    fake.write_text(f'#!/bin/sh\n[ "$1" = --help ] && echo "  {options}" && '
                    f'exit 0\n{lines}exit {status}\n')
    fake.chmod(0o755)
    return sanitize(tool, 'true', COMPUTE_SANITIZER=str(fake))


def test_refused_device_is_unavailable(tmp_path):
    """What compute-sanitizer printed on a gVisor machine: the run is
    reported as unavailable (exit 69), not as a kernel failure."""
    proc = replay(tmp_path, 'racecheck', [
        '========= Error: Device not supported',
        'RuntimeError: CUDA error: unknown error'], 1)
    assert proc.returncode == UNAVAILABLE, proc.stdout
    assert 'sanitizer unavailable on this machine' in proc.stdout


@pytest.mark.parametrize('kernel,status', [
    ('void at::native::vectorized_elementwise_kernel<4>(int)', 0),
    ('void mmlaplacian::cuda::laplace_kernel_forward<float>(int)', 1)])
def test_initcheck_counts_our_kernels_only(tmp_path, kernel, status):
    """initcheck checks every kernel: an error outside ours is listed but
    does not fail the run."""
    proc = replay(tmp_path, 'initcheck', [
        '========= Uninitialized __global__ memory read of size 4 bytes',
        f'=========     at {kernel}+0x1f0',
        '========= ERROR SUMMARY: 1 error'], 86)
    assert proc.returncode == status, proc.stdout


def test_filtered_errors_always_count(tmp_path):
    """With the kernel filter every error is in our kernels, whatever the
    report line names."""
    proc = replay(tmp_path, 'racecheck', [
        '========= Error: Race reported between Write access at 0x70',
        '========= RACECHECK SUMMARY: 1 hazard displayed (1 error)'], 86,
        options='--filter arg  the kernels to check')
    assert proc.returncode == 1, proc.stdout
    assert '--filter kns=mmlaplacian' in proc.stdout


def expect_ran(proc):
    """Skip when the sanitizer refused the device (not a pass either)."""
    if proc.returncode == UNAVAILABLE:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode != 127, proc.stderr


@pytest.mark.cuda
@NEEDS_GPU
@pytest.mark.parametrize('tool', list(BUGS))
def test_clean_kernels_pass(binary, tool):
    proc = sanitize(tool, binary, 'clean')
    expect_ran(proc)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.mark.cuda
@NEEDS_GPU
@pytest.mark.parametrize('tool', list(BUGS))
def test_planted_bug_fails(binary, tool):
    case, report = BUGS[tool]
    proc = sanitize(tool, binary, case)
    expect_ran(proc)
    assert proc.returncode == 1, proc.stdout[-4000:]
    assert report in proc.stdout, proc.stdout[-4000:]
    assert 'ERRORS found in a kernel' in proc.stdout
