"""The compiled kernels write every entry of what they allocate.

The kernels allocate their outputs and partial sums uninitialised
(``at::empty``, ``empty_like``, ``new_empty``). A tile that a kernel forgets
to write holds whatever the allocator hands back, often zeros, which a
value test only notices where zero is the wrong answer. Under
``torch.use_deterministic_algorithms`` with
``torch.utils.deterministic.fill_uninitialized_memory``, ATen's empty
kernels (``empty_cpu``, ``empty_cuda``, ``empty_strided_*``) fill every new
float tensor with NaN. The fill happens in those kernels, behind the
dispatcher, so it reaches allocations made from C++ as well as from Python:
an unwritten entry then comes out as NaN, and finite inputs must give
finite results everywhere.

The shapes sit on the kernels' tile edges: N, M in {1, 63, 64, 65, 1000}
(the CPU forward's blocks of 4 rows and 16 + 8 columns, its backward's
pairs of rows and 256-row chunks, the CUDA tiles), d in {1, 17, 32, 33, 64}
(the CPU backward's specialisations for 16, 32, 64 and its generic loop),
m in {1, 49, 64, 65, 127, 128, 129} (the CUDA Newton–Schulz fused kernel
up to 128, the batched-matmul path above).
"""
import contextlib

import pytest
import torch

from mmlaplacian.ops import (laplace_kernel, laplace_kernel_reference,
                             newton_schulz_inverse)

pytestmark = pytest.mark.compiled

ROWS = COLS = (1, 63, 64, 65, 1000)
DIMS = (1, 17, 32, 33, 64)
SIDES = (1, 49, 64, 65, 127, 128, 129)
# Every (N, M, d) of the tile-edge values: 125 shapes, about 3 s on one
# CPU core, so no subset has to be argued for.
SHAPES = [(n, m, d) for n in ROWS for m in COLS for d in DIMS]


@contextlib.contextmanager
def nan_filled_allocations():
    """Every uninitialised float allocation is filled with NaN inside; both
    global settings are restored afterwards.

    ``warn_only`` keeps the fill (it needs the deterministic mode on, not
    its errors) while cuBLAS's reproducibility rule for batched matmuls
    (``CUBLAS_WORKSPACE_CONFIG``), which has nothing to do with unwritten
    memory, stays a warning.
    """
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = was_fill


@pytest.fixture
def nan_filled_empty():
    with nan_filled_allocations():
        yield


def deterministic_settings():
    return (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory)


@pytest.mark.parametrize('device', [
    'cpu',
    pytest.param('cuda', marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason='needs a CUDA device'))
])
def test_new_memory_is_nan_inside_and_settings_come_back(device):
    before = deterministic_settings()
    with nan_filled_allocations():
        # From one element to past the caching allocator's small blocks.
        for numel in (1, 1000, 3 * 1024 * 1024):
            assert torch.empty(numel, device=device).isnan().all()
            assert torch.empty_like(
                torch.zeros(numel, dtype=torch.float64,
                            device=device)).isnan().all()
    assert deterministic_settings() == before


def make_inputs(shape, device, dtype=torch.float32, batch=2):
    """x (B, N, d), y (B, M, d) with L1 distances of order 1, so no entry
    of K is near 0, where an unwritten zero could hide."""
    rows, cols, dim = shape
    g = torch.Generator().manual_seed(rows * 7 + cols * 3 + dim)
    scale = 1.5 / dim
    x = torch.randn(batch, rows, dim, generator=g) * scale
    y = torch.randn(batch, cols, dim, generator=g) * scale
    return x.to(device, dtype), y.to(device, dtype)


def assert_all_finite(**tensors):
    bad = {name: f'{(~t.isfinite()).sum().item()} of {t.numel()} entries'
           for name, t in tensors.items() if not t.isfinite().all()}
    assert not bad, f'non-finite entries (unwritten memory?): {bad}'


@pytest.mark.parametrize('shape', SHAPES, ids=str)
def test_laplace_kernel_writes_output_and_both_gradients(
        device, impl, nan_filled_empty, shape):
    x, y = make_inputs(shape, device)
    x.requires_grad_()
    y.requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert_all_finite(out=out, dx=x.grad, dy=y.grad)
    # Every entry holds a kernel value, not merely something finite.
    assert out.min() > 0 and out.max() <= 1


# One gradient alone takes its own code (dx only: dy's partial sums are
# never allocated; dy only: dx is never written).
@pytest.mark.parametrize('shape', [(63, 65, 17), (65, 1, 32), (1000, 63, 64),
                                   (1, 1000, 33), (64, 64, 1)], ids=str)
@pytest.mark.parametrize('wanted', ['x', 'y'])
def test_laplace_kernel_writes_a_gradient_asked_for_alone(
        device, impl, nan_filled_empty, shape, wanted):
    x, y = make_inputs(shape, device)
    leaf = x if wanted == 'x' else y
    leaf.requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    out.backward(torch.randn_like(out))
    assert_all_finite(out=out, grad=leaf.grad)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float16,
                                   torch.bfloat16], ids=str)
@pytest.mark.parametrize('shape', [(65, 63, 33), (1000, 1, 64), (1, 65, 17)],
                         ids=str)
def test_laplace_kernel_writes_everything_in_other_dtypes(
        device, impl, nan_filled_empty, dtype, shape):
    # CUDA reads fp16/bf16 itself and sums in fp32 partial buffers; the CPU
    # upcasts them first.
    x, y = make_inputs(shape, device, dtype)
    x.requires_grad_()
    y.requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    out.backward(torch.randn_like(out))
    assert_all_finite(out=out, dx=x.grad, dy=y.grad)


def newton_schulz_batch(batch, m, device):
    """Symmetric positive definite matrices (the identity start) with a
    non-symmetric one in the middle when batch > 1 (the transpose start)."""
    g = torch.Generator().manual_seed(m)
    points = torch.rand(batch, m, 4, generator=g, dtype=torch.float64)
    a = laplace_kernel_reference(points, points) + torch.eye(
        m, dtype=torch.float64)
    if batch > 1:
        a[batch // 2] += 0.3 * torch.rand(m, m, generator=g,
                                          dtype=torch.float64).triu(1)
    return a.to(device, torch.float32)


@pytest.mark.parametrize('m', SIDES)
@pytest.mark.parametrize('batch', [1, 3], ids=['batch1', 'batch3'])
@pytest.mark.parametrize('num_iters', [0, 6])
def test_newton_schulz_writes_every_entry(device, impl, nan_filled_empty,
                                          m, batch, num_iters):
    """On the CPU with two threads, batch 3 takes the per-thread fused
    iteration and batch 1 the threaded batched matmuls; on CUDA m decides
    (fused kernel up to 128, batched matmuls for 129). 0 steps returns the
    starting point itself. The gradient comes back through autograd."""
    a = newton_schulz_batch(batch, m, device).requires_grad_()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = newton_schulz_inverse(a, num_iters, impl=impl)
    finally:
        torch.set_num_threads(threads)
    x.backward(torch.randn_like(x))
    assert_all_finite(x=x, grad_a=a.grad)
    # Every entry holds its value, not merely something finite.
    expected = newton_schulz_inverse(a.detach(), num_iters, impl='pytorch')
    torch.testing.assert_close(x, expected, rtol=1e-4, atol=1e-6)
