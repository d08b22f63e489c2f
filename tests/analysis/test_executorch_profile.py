"""benchmarks.executorch_profile: ExecuTorch's profiler splits a program's
time between the XNNPACK delegate and the portable kernels."""
import pytest
import torch

pytest.importorskip('executorch')
pytest.importorskip('pandas')  # the profiler's Inspector reads with it

from benchmarks import executorch_profile as tool  # noqa: E402


class ConvThenSum(torch.nn.Module):
    """A convolution (XNNPACK runs it) and a sum over channels (XNNPACK
    has no sum: ExecuTorch's portable kernel runs it)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)

    def forward(self, image):
        return self.conv(image).relu().sum(dim=1)


@pytest.fixture(scope='module')
def program(tmp_path_factory):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import \
        XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    image = torch.rand(1, 3, 64, 80)
    exported = torch.export.export(ConvThenSum().eval(), (image, ))
    lowered = to_edge_transform_and_lower(
        exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    path = tmp_path_factory.mktemp('profile') / 'conv_sum.pte'
    path.write_bytes(lowered.buffer)
    return str(path)


def test_time_splits_into_delegate_and_portable_kernels(program):
    result = tool.profile_method(program, runs=2, threads=1)
    assert result['execute_ms'] > 0 and result['delegate_ms'] > 0
    # The sum is the portable operator, named by its kernel.
    assert 'sum.IntList_out' in result['portable_ops']
    calls, ms = result['portable_ops']['sum.IntList_out']
    assert calls == 1 and 0 < ms <= result['portable_ms']
    # Both parts run inside Method::execute.
    assert (result['delegate_ms'] + result['portable_ms'] <=
            result['execute_ms'] * 1.001)
    assert result['portable_share'] == pytest.approx(
        result['portable_ms'] / result['execute_ms'])
    # A float program: XNNPACK's kernels are all fp32.
    assert result['int8_ms'] == 0
    assert any('F32' in name for name in result['xnnpack_ops'])


def test_int8_program_runs_int8_kernels(tmp_path):
    """An int8 export runs its convolution and linear layer as XNNPACK int8
    kernels (their weights stay int8 through the lowering), which the
    profile counts."""
    from mmlaplacian.deployment.executorch_export import export_executorch

    class ConvLinear(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.fc = torch.nn.Linear(16, 32)

        def forward(self, image):
            return self.fc(self.conv(image).relu().permute(0, 2, 3, 1))

    torch.manual_seed(0)
    images = [(torch.rand(1, 3, 32, 48), ) for _ in range(2)]
    path = str(tmp_path / 'int8.pte')
    export_executorch(ConvLinear().eval(), images[0], path, quantize='int8',
                      calibration=images)
    result = tool.profile_method(path, runs=2, threads=1)
    int8 = [name for name in result['xnnpack_ops']
            if tool.INT8_TYPES.search(name)]
    assert any(name.startswith('Convolution') for name in int8), int8
    assert any(name.startswith('Fully Connected') for name in int8), int8
    assert 0 < result['int8_ms'] <= result['delegate_ms']


def test_command_line_prints_the_table(program, capsys):
    assert tool.main([program, '--runs', '1', '--threads', '1']) == 0
    out = capsys.readouterr().out
    assert 'portable share' in out and 'conv_sum.pte:forward' in out
    assert 'sum.IntList_out ×1' in out
    assert 'slowest XNNPACK kernels' in out


def test_missing_program_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tool.main([str(tmp_path / 'absent.pte')])
    assert 'absent.pte: no such file' in capsys.readouterr().err


def test_our_kernel_is_timed_apart_from_the_portable_kernels(tmp_path):
    """A program that keeps the Laplacian kernel as our operator: its calls
    are named by the operator and counted as ours, not as portable."""
    from mmlaplacian.deployment.executorch_export import export_executorch

    class KernelThenSum(torch.nn.Module):

        def forward(self, x, y):
            return torch.ops.mmlaplacian.laplace_kernel(x, y).sum(-1)

    inputs = (torch.rand(1, 2000, 32), torch.rand(1, 49, 32))
    path = str(tmp_path / 'operator.pte')
    export_executorch(KernelThenSum(), inputs, path, laplace='operator')
    result = tool.profile_method(path, list(inputs), runs=2, threads=1)
    calls, ms = result['own_ops']['mmlaplacian::laplace_kernel.out']
    assert calls == 1 and ms == result['own_ms'] > 0
    assert 'sum.IntList_out' in result['portable_ops']
    assert not any('laplace' in name for name in result['portable_ops'])
    assert (result['delegate_ms'] + result['portable_ms'] + result['own_ms']
            <= result['execute_ms'] * 1.001)
