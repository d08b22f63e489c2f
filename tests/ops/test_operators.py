"""The fused ops are PyTorch operators: schema, fake kernels, registered
autograd and dispatch checked by ``torch.library.opcheck``, and traced by
``torch.compile(fullgraph=True)`` and ``torch.export``."""
import os
import subprocess
import sys

import pytest
import torch

from mmlaplacian.ops import ext_info, laplace_kernel, newton_schulz_inverse

OPS = torch.ops.mmlaplacian
CUDA = pytest.param(
    'cuda',
    marks=pytest.mark.skipif(
        'cuda' not in ext_info()['devices'] or not torch.cuda.is_available(),
        reason='needs a GPU and mmlaplacian._ext built with CUDA'))
DEVICES = ['cpu', CUDA]
NO_CPP = pytest.mark.skipif('cpu' not in ext_info()['devices'],
                            reason='mmlaplacian._ext has no CPU kernels')


def _inputs(shape, dtype, device, requires_grad=True, seed=0):
    batch, rows, cols, dim = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, rows, dim, generator=g, dtype=dtype) / dim
    y = torch.randn(batch, cols, dim, generator=g, dtype=dtype) / dim
    return (x.to(device).requires_grad_(requires_grad),
            y.to(device).requires_grad_(requires_grad))


def _spd(batch, m, dtype, device, seed=0):
    """Landmark-like SPD matrices: a Laplacian kernel matrix plus 0.1 I."""
    g = torch.Generator().manual_seed(seed)
    points = torch.randn(batch, m, 4, generator=g, dtype=torch.float64)
    dist = (points[:, :, None] - points[:, None]).abs().sum(-1)
    a = torch.exp(-dist) + 0.1 * torch.eye(m, dtype=torch.float64)
    return a.to(device, dtype)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('shape', [(1, 1, 1, 1), (2, 65, 49, 32),
                                   (3, 7, 129, 17)], ids=str)
def test_laplace_kernel_passes_opcheck(device, dtype, shape):
    x, y = _inputs(shape, dtype, device)
    torch.library.opcheck(OPS.laplace_kernel.default, (x, y))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('need', [(True, True), (True, False), (False, True)])
def test_laplace_kernel_backward_passes_opcheck(device, need):
    x, y = _inputs((2, 33, 17, 32), torch.float64, device, False)
    out = OPS.laplace_kernel(x, y)
    grad = torch.randn_like(out)
    torch.library.opcheck(OPS.laplace_kernel_backward.default,
                          (grad, x, y, out, *need))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('m, init', [(1, 'auto'), (49, 'identity'),
                                     (65, 'auto'), (129, 'transpose')])
def test_newton_schulz_passes_opcheck(device, dtype, m, init):
    a = _spd(2, m, dtype, device).requires_grad_()
    torch.library.opcheck(OPS.newton_schulz_inverse.default, (a, 20, init))


@pytest.mark.parametrize('device', DEVICES)
def test_compiled_kernels_are_registered_per_dispatch_key(device):
    """With the extension built, each operator's kernel for the device's
    dispatch key is the one its C++ or CUDA source registers, and the
    reference serves the other keys."""
    pytest.importorskip('mmlaplacian._ext')
    key = 'CUDA' if device == 'cuda' else 'CPU'
    suffix = '_cuda.cu' if device == 'cuda' else '_cpu.cpp'
    for name, source in [('laplace_kernel', 'laplace_kernel'),
                         ('laplace_kernel_backward', 'laplace_kernel'),
                         ('newton_schulz_inverse', 'newton_schulz')]:
        qualname = f'mmlaplacian::{name}'
        registered = dict(
            line.split(': ', 1)
            for line in torch._C._dispatch_dump(qualname).splitlines()
            if ': registered at' in line)
        assert f'cuda_ops/{device}/{source}{suffix}' in registered[key], (
            registered)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(
            qualname, 'CompositeExplicitAutograd')


@pytest.mark.parametrize('impl,backend', [
    pytest.param('pytorch', 'aot_eager', id='pytorch-aot_eager'),
    pytest.param('cpp', 'aot_eager', id='cpp-aot_eager', marks=NO_CPP),
    pytest.param('cpp', 'inductor', id='cpp-inductor', marks=NO_CPP),
])
def test_fullgraph_compile_of_both_ops_equals_eager(impl, backend):
    """One graph, no breaks, through the public functions (input checks,
    dtype rules, autograd); forward and gradients equal eager. ``aot_eager``
    checks traceability cheaply, inductor generates code around our
    compiled kernels (the reference's inductor code is torch's own)."""

    def attention_core(x, landmarks):
        inverse = newton_schulz_inverse(
            laplace_kernel(landmarks, landmarks, impl=impl) +
            0.01 * torch.eye(landmarks.shape[1]), impl=impl)
        return (laplace_kernel(x, landmarks, impl=impl) @ inverse).square(
        ).sum()

    x, landmarks = _inputs((2, 300, 49, 32), torch.float32, 'cpu')
    compiled = torch.compile(attention_core, fullgraph=True,
                             backend=backend)
    eager_grads = torch.autograd.grad(attention_core(x, landmarks),
                                      (x, landmarks))
    loss = compiled(x, landmarks)
    grads = torch.autograd.grad(loss, (x, landmarks))
    torch.testing.assert_close(loss, attention_core(x, landmarks))
    for got, expected in zip(grads, eager_grads):
        torch.testing.assert_close(got, expected)


def test_export_holds_the_operators():
    """``torch.export`` records our operators (not their internals), so
    each runtime chooses how to run them."""

    class Kernel(torch.nn.Module):

        def forward(self, x, y):
            return laplace_kernel(x, y)

    program = torch.export.export(Kernel(), _inputs((2, 9, 5, 4),
                                                    torch.float32, 'cpu',
                                                    False))
    targets = {node.target for node in program.graph.nodes
               if node.op == 'call_function'}
    assert OPS.laplace_kernel.default in targets
    x, y = _inputs((2, 9, 5, 4), torch.float32, 'cpu', False)
    torch.testing.assert_close(program.module()(x, y), laplace_kernel(x, y))


def test_inductor_compiles_the_operators_where_ci_is_set(tmp_path):
    """Inductor refuses to fall back to an operator that has an entry in
    torch's global decomposition table when ``CI`` is set (as on most CI
    services): our export forms must stay out of that table. A fresh
    interpreter, with Inductor's caches off, so nothing compiled earlier
    answers for it."""
    script = (
        'import torch, mmlaplacian\n'
        'from mmlaplacian.ops import laplace_kernel\n'
        'x, y = torch.rand(1, 40, 8), torch.rand(1, 7, 8)\n'
        'fn = torch.compile(lambda a, b: laplace_kernel(a, b).sum(), '
        'fullgraph=True, backend="inductor")\n'
        'torch.testing.assert_close(fn(x, y), laplace_kernel(x, y).sum())\n')
    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    env = dict(os.environ, CI='true', TORCHINDUCTOR_FORCE_DISABLE_CACHES='1',
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path), PYTHONPATH=repo)
    proc = subprocess.run([sys.executable, '-c', script], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
