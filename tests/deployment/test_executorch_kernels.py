"""Our ExecuTorch kernels (``mmlaplacian._executorch_kernels``): programs
exported with ``laplace='operator'`` keep ``mmlaplacian::laplace_kernel``
and ``mmlaplacian::newton_schulz_inverse`` and turn LayerNorm into
``mmlaplacian::layer_norm``, and ExecuTorch's runtime runs them with our
kernels, equal to the PyTorch references on odd
shapes; a LaplacianFormer-T program with them matches eager in float32 and
in int8. Skipped where executorch is not installed."""
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip('executorch')

from detection_utils import run_tool  # noqa: E402

from mmlaplacian import LaplacianFormer  # noqa: E402
from mmlaplacian.deployment import BackboneForExport  # noqa: E402
from mmlaplacian.deployment.executorch_export import (  # noqa: E402
    export_executorch, run_executorch)
from mmlaplacian.deployment.executorch_kernels import (  # noqa: E402
    LAYER_NORM_OPERATOR, NEWTON_SCHULZ_OPERATOR, OPERATOR, declare_operators,
    kernels_library, program_needs_kernels)
from mmlaplacian.ops import laplace_kernel_reference  # noqa: E402
from mmlaplacian.ops.reference import \
    newton_schulz_forward_reference  # noqa: E402
from mmlaplacian.synthetic_data.instances import \
    make_synthetic_coco  # noqa: E402

pytestmark = pytest.mark.timeout(900)


class LaplaceKernel(nn.Module):
    """The operator alone, on inputs made non-contiguous inside the
    program (a transpose), as the attention hands it strided views."""

    def forward(self, x_t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.mmlaplacian.laplace_kernel(
            x_t.transpose(1, 2).contiguous(), y)


def _export_kernel(tmp_path, x, y, name='kernel'):
    path = str(tmp_path / f'{name}.pte')
    result = export_executorch(LaplaceKernel(),
                               (x.transpose(1, 2).contiguous(), y), path,
                               laplace='operator')
    return path, result


def test_the_kernel_library_is_built_where_executorch_is():
    """``make install`` builds it when executorch is installed."""
    assert kernels_library() is not None


def test_the_out_form_equals_the_operator():
    """What ExecuTorch's lowering turns the operator into, in PyTorch."""
    declare_operators()
    x, y = torch.randn(2, 13, 5), torch.randn(2, 7, 5)
    out = torch.empty(2, 13, 7)
    got = torch.ops.mmlaplacian.laplace_kernel.out(x, y, out=out)
    assert got is out
    torch.testing.assert_close(out, torch.ops.mmlaplacian.laplace_kernel(x, y))
    # An out of another shape, even one the result broadcasts to, is refused.
    with pytest.raises(ValueError, match=r'\(2, 13, 7\)'):
        torch.ops.mmlaplacian.laplace_kernel.out(x, y,
                                                 out=torch.empty(3, 13, 7))


@pytest.mark.parametrize('batch, rows, cols, dim', [
    (3, 1001, 49, 32),  # the attention's shapes: M = 7 x 7 landmarks
    (1, 1, 1, 1),
    (2, 5, 7, 3),  # fewer rows than a row block, M not a multiple of 8
    (1, 67, 17, 17),  # odd everything, M past one 16-column block
])
def test_the_kernel_equals_the_reference(tmp_path, batch, rows, cols, dim):
    """fp32 in our kernel against the reference in float64, from a program
    that lists the operator as ours and leaves nothing to the portable
    kernels."""
    generator = torch.Generator().manual_seed(rows + cols)
    x = torch.randn(batch, rows, dim, generator=generator) / dim**0.5
    y = torch.randn(batch, cols, dim, generator=generator) / dim**0.5
    path, result = _export_kernel(tmp_path, x, y)
    assert program_needs_kernels(path)
    assert sum(result.own_ops.values()) == 1, result.own_ops
    assert not any('laplace' in name for name in result.portable_ops)
    (got, ) = run_executorch(path, [x.transpose(1, 2).contiguous(), y])
    expected = laplace_kernel_reference(x.double(), y.double())
    assert got.shape == (batch, rows, cols)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-7)


class NewtonSchulzInverse(nn.Module):
    """The operator alone, on a transpose made contiguous inside the
    program, as the attention hands it a kernel matrix it computed."""

    def __init__(self, num_iters: int, init: str) -> None:
        super().__init__()
        self.num_iters, self.init = num_iters, init

    def forward(self, a_t: torch.Tensor) -> torch.Tensor:
        return torch.ops.mmlaplacian.newton_schulz_inverse(
            a_t.transpose(1, 2).contiguous(), self.num_iters, self.init)


def _landmark_matrices(batch: int, size: int, generator) -> torch.Tensor:
    """Laplacian kernel matrices of random landmarks: symmetric positive
    definite, as the attention inverts them."""
    landmarks = torch.randn(batch, size, 8, generator=generator)
    return torch.exp(-torch.cdist(landmarks, landmarks, p=1) / 4)


@pytest.mark.parametrize('batch, size, num_iters, init, symmetric', [
    (10, 49, 20, 'auto', True),  # the attention's: 7 x 7 landmarks
    (3, 49, 20, 'auto', False),  # auto picks the transpose start
    (2, 67, 25, 'identity', True),  # odd size past two row tiles
    (1, 5, 30, 'transpose', False),  # smaller than one tile
    (1, 1, 3, 'auto', True),
    (2, 33, 0, 'auto', True),  # no step: the start itself
    (4, 6, 12, 'transpose', True),
])
def test_the_newton_schulz_kernel_equals_the_reference(
        tmp_path, batch, size, num_iters, init, symmetric):
    """fp32 in our kernel against the reference iterated in float64 from
    the same start, from a program that lists the operator as ours and
    leaves nothing of the inverse to the portable kernels."""
    generator = torch.Generator().manual_seed(batch * 100 + size)
    a = _landmark_matrices(batch, size, generator)
    if not symmetric:
        a = a + 0.05 * torch.rand(batch, size, size, generator=generator)
    a_t = a.transpose(1, 2).contiguous()
    path = str(tmp_path / 'inverse.pte')
    result = export_executorch(NewtonSchulzInverse(num_iters, init), (a_t, ),
                               path, laplace='operator')
    assert result.own_ops == {'mmlaplacian.newton_schulz_inverse.out': 1}
    assert not {'amax.out', 'where.self_out'} & set(result.portable_ops)
    (got, ) = run_executorch(path, [a_t])
    expected = newton_schulz_forward_reference(a.double(), num_iters, init)
    assert got.shape == (batch, size, size)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4,
                               atol=1e-4 * expected.abs().max().item())


def test_the_newton_schulz_out_form_equals_the_operator():
    declare_operators()
    a = _landmark_matrices(3, 7, torch.Generator().manual_seed(0))
    out = torch.empty(3, 7, 7)
    got = torch.ops.mmlaplacian.newton_schulz_inverse.out(a, 10, 'auto',
                                                          out=out)
    assert got is out
    torch.testing.assert_close(
        out, torch.ops.mmlaplacian.newton_schulz_inverse(a, 10, 'auto'))
    with pytest.raises(ValueError, match=r'\(3, 7, 7\)'):
        torch.ops.mmlaplacian.newton_schulz_inverse.out(
            a, 10, 'auto', out=torch.empty(3, 7, 8))


class LayerNorm(nn.Module):
    """``nn.LayerNorm`` on a transpose of its input (a strided view, as
    the backbone's patch embedding hands it one), with random affine
    parameters."""

    def __init__(self, channels: int, affine: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, elementwise_affine=affine)
        if affine:
            nn.init.normal_(self.norm.weight)
            nn.init.normal_(self.norm.bias)

    def forward(self, x_t: torch.Tensor) -> torch.Tensor:
        return self.norm(x_t.transpose(1, 2))


@pytest.mark.parametrize('batch, rows, channels', [
    (1, 67, 64),  # the first stage's channels
    (2, 5, 17),  # channels not a multiple of a vector
    (1, 1, 1),  # one element: the output is the bias
    (3, 1001, 320),  # more rows than one task of the thread pool
])
def test_our_layer_norm_equals_pytorch(tmp_path, batch, rows, channels):
    """fp32 in our kernel against ``F.layer_norm`` in float64, on inputs
    with a large mean (the variance must not cancel), from a program that
    lists the operator as ours and leaves LayerNorm to no other kernel."""
    generator = torch.Generator().manual_seed(rows + channels)
    model = LayerNorm(channels).eval()
    x_t = torch.randn(batch, channels, rows, generator=generator) * 3 + 20
    path = str(tmp_path / 'layer_norm.pte')
    result = export_executorch(model, (x_t, ), path, laplace='operator')
    assert result.own_ops == {'mmlaplacian.layer_norm.out': 1}
    assert not result.portable_ops, result.portable_ops
    assert program_needs_kernels(path)
    (got, ) = run_executorch(path, [x_t])
    expected = F.layer_norm(x_t.double().transpose(1, 2), (channels, ),
                            model.norm.weight.double(),
                            model.norm.bias.double())
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_a_layer_norm_without_affine_stays_standard(tmp_path):
    """Without weight and bias our kernel does not apply: the program keeps
    ExecuTorch's LayerNorm and still matches PyTorch."""
    model = LayerNorm(8, affine=False).eval()
    x_t = torch.randn(1, 8, 10)
    path = str(tmp_path / 'plain.pte')
    result = export_executorch(model, (x_t, ), path, laplace='operator')
    assert not result.own_ops
    assert 'native_layer_norm.out' in result.portable_ops
    (got, ) = run_executorch(path, [x_t])
    torch.testing.assert_close(got, model(x_t), rtol=1e-5, atol=1e-5)


def test_the_layer_norm_out_form_equals_pytorch():
    declare_operators()
    x, weight, bias = torch.randn(4, 6), torch.randn(6), torch.randn(6)
    out = torch.empty(4, 6)
    got = torch.ops.mmlaplacian.layer_norm.out(x, weight, bias, 1e-5,
                                               out=out)
    assert got is out
    torch.testing.assert_close(out, F.layer_norm(x, (6, ), weight, bias))
    with pytest.raises(ValueError, match=r'\(4, 6\)'):
        torch.ops.mmlaplacian.layer_norm.out(x, weight, bias, 1e-5,
                                             out=torch.empty(4, 7))


def _load_in_fresh_interpreter(patch: str, *paths: str):
    """Load each program with ``load_program`` in a fresh interpreter after
    ``patch`` ran there; prints ``loaded`` or the ``ImportError``."""
    code = '\n'.join([
        'import mmlaplacian.deployment.executorch_kernels as kernels',
        patch,
        f'for path in {list(paths)!r}:',
        '    try:',
        '        kernels.load_program(path)',
        "        print('loaded')",
        '    except ImportError as err:',
        "        print('ImportError:', err)",
    ])
    done = subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()


def test_a_program_without_our_library_says_how_to_build_it(tmp_path):
    """In a fresh interpreter where the package finds no library (the test
    makes ``kernels_library`` answer None), loading a program that calls
    our operator raises an error naming the operator and the rebuild, and
    a program of the standard form still loads."""
    x, y = torch.randn(1, 9, 4), torch.randn(1, 3, 4)
    operator, _ = _export_kernel(tmp_path, x, y)
    standard = str(tmp_path / 'standard.pte')
    export_executorch(LaplaceKernel(), (x.transpose(1, 2).contiguous(), y),
                      standard)
    assert not program_needs_kernels(standard)
    first, second = _load_in_fresh_interpreter(
        'kernels.kernels_library = lambda: None', operator, standard)
    assert first.startswith('ImportError') and OPERATOR in first, first
    assert LAYER_NORM_OPERATOR in first, first
    assert NEWTON_SCHULZ_OPERATOR in first, first
    assert 'rebuild' in first, first
    assert second == 'loaded'


def test_a_library_built_for_another_executorch_is_refused(tmp_path):
    """The runtime's types have no stable ABI across releases: with another
    executorch installed (the test makes the installed version another
    one), the library is refused with both versions and the rebuild."""
    x, y = torch.randn(1, 9, 4), torch.randn(1, 3, 4)
    operator, _ = _export_kernel(tmp_path, x, y)
    (line, ) = _load_in_fresh_interpreter(
        "kernels._installed_executorch = lambda: '0.1.0'", operator)
    assert line.startswith('ImportError'), line
    assert 'executorch 0.1.0 is installed' in line and 'rebuild' in line


def correlation(got: torch.Tensor, expected: torch.Tensor) -> float:
    pair = torch.stack([got.flatten().double(), expected.flatten().double()])
    return float(torch.corrcoef(pair)[0, 1])


@pytest.mark.slow
@pytest.mark.parametrize('quantize', [None, 'int8'])
def test_tool_writes_a_backbone_program_with_the_operator(
        tmp_path, quantize):
    """``export_executorch.py --laplace operator`` as a user runs it, on
    LaplacianFormer-T weights at 96x96: the tool names our kernel, leaves
    no Laplacian-kernel block to any runtime, and its program, run here,
    matches eager float32 within the ONNX exports' tolerance (float32) or
    above the int8 programs' correlation floor (int8, calibrated on 8
    synthetic scenes; tests/deployment/test_executorch_int8.py)."""
    torch.manual_seed(0)
    backbone = LaplacianFormer('tiny', drop_path_rate=0.).eval()
    weights = tmp_path / 'lf_t.pth'
    torch.save({'state_dict': backbone.state_dict()}, weights)
    program = tmp_path / 'lf_t.pte'
    args = [
        'tools/deployment/export_executorch.py', '--arch', 'tiny',
        '--checkpoint',
        str(weights), '--shape', '96', '96', '--laplace', 'operator',
        '--out',
        str(program)
    ]
    if quantize:
        images = str(tmp_path / 'scenes')
        make_synthetic_coco(images, num_train=12, num_val=4, image_size=128,
                            seed=0)
        args += [
            '--quantize', 'int8', '--calibration-images',
            osp.join(images, 'train'), '--calibration-count', '8'
        ]
    printed = run_tool(args).stdout
    own = re.search(r'run by our ExecuTorch kernels: (.*)', printed)[1]
    for operator in ('laplace_kernel', 'newton_schulz_inverse', 'layer_norm'):
        assert operator in own, own
    portable = re.search(r'left to the portable kernels: (.*)', printed)[1]
    # Nothing of the kernel (maximum), of LayerNorm, of the inverse's start
    # (amax, where) or of the landmarks' pooling stays on the portable
    # kernels.
    for name in ('laplace', 'maximum', 'layer_norm', 'amax', 'where',
                 'adaptive_avg_pool'):
        assert name not in portable, portable

    image = torch.rand(1, 3, 96, 96,
                       generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        pairs = list(
            zip(run_executorch(str(program), [image]),
                BackboneForExport(backbone)(image)))
    assert len(pairs) == 4
    for out, ref in pairs:
        if quantize:
            # The int8 programs' floor; the tool measured 0.9978-0.9992 at
            # 192x192 (docs/deployment.md).
            assert correlation(out, ref) >= 0.99
        else:
            relative = (out - ref).abs().max() / ref.abs().max()
            assert relative <= 1e-4, relative


def test_the_operator_form_refuses_inputs_its_kernel_does_not_take(
        tmp_path):
    """Our kernel computes in float32: a float64 program is refused when
    it is exported, with the dtype and the way out named, instead of
    failing on the device."""
    x, y = (torch.randn(1, 9, 4, dtype=torch.float64),
            torch.randn(1, 3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r'float32.*torch\.float64.*auto'):
        export_executorch(LaplaceKernel(), (x.transpose(1, 2), y),
                          str(tmp_path / 'float64.pte'), laplace='operator')
    assert not (tmp_path / 'float64.pte').exists()


def test_a_float64_inverse_is_refused_at_export(tmp_path):
    """The same for the Newton–Schulz inverse: the operator is named."""
    a = _landmark_matrices(1, 5, torch.Generator().manual_seed(0)).double()
    with pytest.raises(ValueError,
                       match=r'newton_schulz_inverse.*float32.*float64'):
        export_executorch(NewtonSchulzInverse(4, 'auto'), (a, ),
                          str(tmp_path / 'float64.pte'), laplace='operator')
    assert not (tmp_path / 'float64.pte').exists()


def test_an_unknown_laplacian_form_is_named(tmp_path):
    with pytest.raises(ValueError, match="'operator'.*'fused'"):
        export_executorch(LaplaceKernel(), (torch.randn(1, 4, 9),
                                            torch.randn(1, 3, 4)),
                          str(tmp_path / 'x.pte'), laplace='fused')
