"""The C++ ExecuTorch runner (``tools/deployment/executorch_runner/``):
built as a user builds it, it runs LaplacianFormer programs with our
kernels and no Python, and its outputs equal those of ExecuTorch's Python
runtime in float32 and in int8; cross-built for aarch64 and run under
qemu-user, it agrees too. Bad arguments are named. Skipped where executorch
is not installed (the aarch64 cases also without the cross compiler and
qemu-user, which CI installs)."""
import os
import os.path as osp
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip('executorch')

from detection_utils import REPO_ROOT, run_tool  # noqa: E402

from mmlaplacian import LaplacianFormer  # noqa: E402
from mmlaplacian.deployment import BackboneForExport  # noqa: E402
from mmlaplacian.deployment.executorch_export import \
    export_executorch  # noqa: E402

pytestmark = pytest.mark.timeout(900)

RUNNER = osp.join(REPO_ROOT, 'build', 'executorch_runner',
                  'mmlaplacian_executorch_runner')
ARM_RUNNER = osp.join(REPO_ROOT, 'build', 'executorch_runner_aarch64',
                      'mmlaplacian_executorch_runner')
QEMU = 'qemu-aarch64 -cpu cortex-a72 -L /usr/aarch64-linux-gnu'
SHAPE = (1, 3, 64, 96)


@pytest.fixture(scope='module')
def runner() -> str:
    """``bash tools/deployment/build_executorch_runner.sh``, as in
    docs/deployment.md."""
    printed = run_tool(['tools/deployment/build_executorch_runner.sh'],
                       timeout=600).stdout
    assert RUNNER in printed, printed[-2000:]
    assert os.access(RUNNER, os.X_OK)
    return RUNNER


@pytest.fixture(scope='module')
def arm_runner() -> str:
    """``bash tools/deployment/build_executorch_runner.sh aarch64``: the
    runner cross-built for 64-bit Arm, run here under qemu-user."""
    for tool, package in (('aarch64-linux-gnu-g++', 'g++-aarch64-linux-gnu'),
                          ('qemu-aarch64', 'qemu-user')):
        if shutil.which(tool) is None:
            pytest.skip(f'no {tool} to build and run the aarch64 runner '
                        f'(apt-get install {package})')
    printed = run_tool(
        ['tools/deployment/build_executorch_runner.sh', 'aarch64'],
        timeout=900).stdout
    assert ARM_RUNNER in printed, printed[-2000:]
    return ARM_RUNNER


def _backbone_program(directory, quantize=None) -> str:
    torch.manual_seed(0)
    backbone = BackboneForExport(
        LaplacianFormer('tiny', drop_path_rate=0.).eval())
    image = torch.rand(*SHAPE)
    calibration = None
    if quantize:
        calibration = [(torch.rand(*SHAPE), ) for _ in range(4)]
    path = str(directory / f'lf_t_{quantize or "fp32"}.pte')
    export_executorch(backbone, (image, ), path, laplace='operator',
                      quantize=quantize, calibration=calibration)
    return path


@pytest.fixture(scope='module')
def program(tmp_path_factory) -> str:
    """LaplacianFormer-T in float32 with our operators, at 64x96."""
    return _backbone_program(tmp_path_factory.mktemp('fp32'))


@pytest.fixture(scope='module')
def int8_program(tmp_path_factory) -> str:
    """The same in int8 (PT2E, calibrated on 4 random images)."""
    return _backbone_program(tmp_path_factory.mktemp('int8'), 'int8')


# The fixture of each precision's program.
PROGRAMS = {'fp32': 'program', 'int8': 'int8_program'}


def _run(args, expect_status=0):
    result = subprocess.run(args, capture_output=True, text=True,
                            timeout=600, cwd=REPO_ROOT)
    assert result.returncode == expect_status, (result.stdout +
                                                result.stderr)
    return result


@pytest.mark.parametrize('precision', ['fp32', 'int8'])
def test_the_runner_matches_the_python_runtime(runner, request, precision):
    """``check_executorch_runner.py`` runs the program in both runtimes on
    one input: every feature map agrees within 1e-4 of its largest value
    (the same XNNPACK and our kernels on the same CPU)."""
    printed = run_tool([
        'tools/deployment/check_executorch_runner.py',
        request.getfixturevalue(PROGRAMS[precision]), '--runner',
        runner
    ]).stdout
    rows = re.findall(r'output (\d) .*max \|Python\| (\S+), correlation',
                      printed)
    assert [index for index, _ in rows] == ['0', '1', '2', '3'], printed
    assert all(float(diff) <= 1e-4 for _, diff in rows), printed
    assert 'within the tolerance' in printed, printed


def test_the_runner_reads_and_writes_npy_files(runner, program, tmp_path):
    """An input given as .npy gives the features the Python runtime
    computes from it; the runner prints its time and peak memory."""
    image = np.random.default_rng(3).random(SHAPE, dtype=np.float32)
    np.save(tmp_path / 'image.npy', image)
    printed = _run([
        runner, program, '--input',
        str(tmp_path / 'image.npy'), '--output-dir',
        str(tmp_path), '--passes', '2'
    ]).stdout
    assert re.search(r'time: median [\d.]+ ms over 2 pass', printed), printed
    assert re.search(r'peak RSS: \d+ MB', printed), printed
    from mmlaplacian.deployment.executorch_export import run_executorch
    expected = run_executorch(program, [torch.from_numpy(image)])
    for i, reference in enumerate(expected):
        output = np.load(tmp_path / f'output_{i}.npy')
        assert output.shape == tuple(reference.shape)
        scale = reference.abs().max().item()
        assert np.abs(output - reference.numpy()).max() <= 1e-4 * scale


def test_random_inputs_are_seeded(runner, program, tmp_path):
    outputs = []
    for seed, name in ((1, 'a'), (1, 'b'), (2, 'c')):
        (tmp_path / name).mkdir()
        _run([
            runner, program, '--seed',
            str(seed), '--output-dir',
            str(tmp_path / name), '--passes', '1'
        ])
        outputs.append(np.load(tmp_path / name / 'output_3.npy'))
    assert np.array_equal(outputs[0], outputs[1])
    assert not np.array_equal(outputs[0], outputs[2])


@pytest.mark.parametrize('problem, args, status, message', [
    ('shape', ['--input', '{wrong_shape}'], 1,
     r'shape \[1, 3, 64, 64\], but input 0 of the program is \[1, 3, 64, 96\]'
     ),
    ('count', ['--input', '{right}', '--input', '{right}'], 1,
     r'takes 1 input\(s\), 2 given'),
    ('dtype', ['--input', '{float64}'], 1, r'float64\.npy: is not float32'),
    ('missing input', ['--input', '{missing}'], 1, r'missing\.npy: cannot be opened'),
    ('method', ['--method', 'backward'], 1,
     r'has no method backward; its methods: forward \(--method\)'),
    ('option', ['--threads', '2'], 2, r'unknown option --threads'),
    ('passes', ['--passes', '0'], 2, r'--passes takes an integer >= 1'),
])
def test_bad_arguments_are_named(runner, program, tmp_path, problem, args,
                                 status, message):
    np.save(tmp_path / 'wrong_shape.npy', np.zeros((1, 3, 64, 64),
                                                  np.float32))
    np.save(tmp_path / 'right.npy', np.zeros(SHAPE, np.float32))
    np.save(tmp_path / 'float64.npy', np.zeros(SHAPE, np.float64))
    files = {
        name: str(tmp_path / f'{name}.npy')
        for name in ('wrong_shape', 'right', 'float64', 'missing')
    }
    args = [arg.format(**files) for arg in args]
    result = _run([runner, program, *args], expect_status=status)
    assert re.search(message, result.stderr), result.stderr


def test_a_missing_program_is_named(runner, tmp_path):
    missing = str(tmp_path / 'absent.pte')
    result = _run([runner, missing], expect_status=1)
    assert 'cannot load ' + missing in result.stderr, result.stderr


def test_speed_benchmark_tables_both_runtimes(runner, program):
    """``benchmarks.executorch_runner_speed``: one row per program with
    both runtimes' times and peak memory; the runner, with no interpreter
    and no torch, holds less memory than the Python runtime."""
    printed = _run([
        sys.executable, '-m', 'benchmarks.executorch_runner_speed', program,
        '--runner', runner, '--rounds', '1', '--passes', '1'
    ]).stdout
    row = next(line for line in printed.splitlines()
               if line.startswith('| ' + osp.basename(program)))
    cpp_ms, python_ms, ratio, cpp_mb, python_mb = (
        float(cell) for cell in row.strip('|').split('|')[1:])
    assert cpp_ms > 0 and python_ms > 0 and ratio > 0, row
    assert 0 < cpp_mb < python_mb, row


def test_the_check_tool_names_a_missing_method(runner, program):
    result = run_tool([
        'tools/deployment/check_executorch_runner.py', program, '--runner',
        runner, '--method', 'mask_head'
    ], expect_success=False)
    assert result.returncode == 1, result.stdout
    assert "has no method 'mask_head'; its methods: forward" in result.stdout


@pytest.mark.parametrize('precision', ['fp32', 'int8'])
def test_the_aarch64_runner_matches_under_qemu(arm_runner, request,
                                               precision):
    """The same program on 64-bit Arm (qemu-user, Cortex-A72): fp32 to
    float rounding; int8 correlates with x86-64's int8 at >= 0.99 (XNNPACK's
    int8 kernels differ between the architectures: measured 0.998-1.0)."""
    quantize = precision == 'int8'
    printed = run_tool([
        'tools/deployment/check_executorch_runner.py',
        request.getfixturevalue(PROGRAMS[precision]), '--runner', arm_runner,
        '--launcher', QEMU, '--tolerance', '0.2' if quantize else '1e-4'
    ]).stdout
    rows = re.findall(r'output (\d) .*max \|Python\| (\S+), correlation '
                      r'(\S+)', printed)
    assert [index for index, _, _ in rows] == ['0', '1', '2', '3'], printed
    for _, diff, correlation in rows:
        if quantize:
            assert float(correlation) >= 0.99, printed
        else:
            assert float(diff) <= 1e-4, printed
