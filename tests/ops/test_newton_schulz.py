"""Tests of mmlaplacian.ops.newton_schulz_inverse.

Every impl, the PyTorch reference included, is checked against
``torch.linalg.inv`` or against :func:`unrolled_inverse`, a plain
per-matrix float64 loop written here independently of the op.
"""
import functools
import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmlaplacian.ops import (laplace_kernel_reference, newton_schulz_inverse,
                             newton_schulz_reference)
from mmlaplacian.ops.reference import newton_schulz_forward_reference


def unrolled_inverse(a, num_iters=20, init='auto'):
    """``num_iters`` steps of X <- 2X - X A X per matrix, in float64 on the
    CPU, from X0 = I / ||A||_inf (symmetric A, or init='identity') or
    X0 = Aᵀ / (||A||_1 ||A||_inf)."""
    out = []
    for mat in a.detach().double().cpu():
        row_sums, col_sums = mat.abs().sum(1), mat.abs().sum(0)
        symmetric = bool((mat - mat.T).abs().max() <=
                         1.2e-5 * mat.abs().max())
        if init == 'identity' or (init == 'auto' and symmetric):
            x = torch.eye(len(mat), dtype=torch.float64) / row_sums.max()
        else:
            x = mat.T / (col_sums.max() * row_sums.max())
        for _ in range(num_iters):
            x = 2 * x - x @ mat @ x
        out.append(x)
    return torch.stack(out)


def landmark_matrix(m, cond, seed=0, dim=8):
    """A symmetric Laplacian kernel matrix of m random points plus εI, with
    condition number ``cond`` (fp64).

    The points are shrunk until the kernel matrix alone is worse conditioned
    than ``cond``; ε then brings it to exactly ``cond``:
    (λmax + ε) / (λmin + ε) = cond.
    """
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(1, m, dim, generator=g, dtype=torch.float64)
    scale = 1.0
    while True:
        kernel = laplace_kernel_reference(points / scale, points / scale)[0]
        eig = torch.linalg.eigvalsh(kernel)
        if eig[-1] / eig[0] > cond:
            break
        scale *= 2
    eps = (eig[-1] - cond * eig[0]) / (cond - 1)
    return kernel + eps * torch.eye(m, dtype=torch.float64)


def general_matrix(m, cond, seed=0):
    """A non-symmetric matrix U diag(s) Vᵀ with condition number ``cond``."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    s = torch.logspace(0, -math.log10(cond), m, dtype=torch.float64)
    return u @ torch.diag(s) @ v.mT


def spd_batch(batch, m, seed=0):
    """Well-conditioned (cond <= ~20) symmetric positive definite matrices."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, m, m, generator=g, dtype=torch.float64)
    return q @ q.mT / m + torch.eye(m, dtype=torch.float64)


@pytest.mark.parametrize('m', [16, 49, 128])
@pytest.mark.parametrize('cond', [10.0, 1e2, 1e3, 1e4])
def test_converges_on_landmark_matrices(device, impl, m, cond):
    a = landmark_matrix(m, cond, seed=m)
    assert torch.linalg.cond(a).item() == pytest.approx(cond, rel=1e-6)
    x, residual = newton_schulz_inverse(
        a[None].to(device), impl=impl, return_residual=True)
    assert residual.shape == (1, ) and residual.item() < 1e-5
    torch.testing.assert_close(
        x[0].cpu(), torch.linalg.inv(a), rtol=1e-5 * cond, atol=1e-8)


@pytest.mark.parametrize('m,cond,num_iters', [(7, 30.0, 20), (49, 30.0, 20),
                                              (128, 30.0, 20),
                                              (49, 1e3, 30)])
def test_converges_on_nonsymmetric_matrices(device, impl, m, cond, num_iters):
    a = general_matrix(m, cond, seed=m)
    _, residual = newton_schulz_inverse(
        a[None].to(device), num_iters, impl=impl, return_residual=True)
    assert residual.item() < 1e-5


def test_converges_on_nonsymmetric_landmark_matrix(device, impl):
    """k(q, k̃) with distinct query and key landmarks is not symmetric."""
    g = torch.Generator().manual_seed(3)
    q = torch.rand(1, 49, 8, generator=g, dtype=torch.float64) * 4
    k = q + 0.1 * torch.randn(1, 49, 8, generator=g, dtype=torch.float64)
    a = laplace_kernel_reference(q, k) + 1e-2 * torch.eye(49)
    assert (a - a.mT).abs().max() > 1e-3
    x, residual = newton_schulz_inverse(
        a.to(device), impl=impl, return_residual=True)
    assert residual.item() < 1e-5
    torch.testing.assert_close(
        x.cpu(), torch.linalg.inv(a), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('m', [1, 7, 33, 63, 65, 97, 128, 129])
@pytest.mark.parametrize('num_iters', [3, 20])
def test_matches_unrolled_formula(device, impl, dtype, m, num_iters):
    """Against the independent loop, both after 3 steps (far from
    converged: every step's arithmetic shows) and converged."""
    a = torch.cat([spd_batch(2, m, seed=m), general_matrix(m, 5.0)[None]])
    a = a.to(device, dtype)
    x = newton_schulz_inverse(a, num_iters, impl=impl)
    expected = unrolled_inverse(a, num_iters)
    assert x.dtype == dtype and x.shape == a.shape
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(
        rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x.double().cpu(), expected, **tol)


@pytest.mark.parametrize('threads,batch', [(4, 8), (4, 4), (4, 3), (1, 5)])
def test_cpu_thread_split(impl, threads, batch):
    """The C++ CPU op iterates each thread's share of the batch on its own
    when batch >= threads ((4, 8), (4, 4)), else uses the threaded batched
    matmul ((4, 3), (1, 5)); every split gives the formula's result."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.cat([spd_batch(batch - 1, 24, seed=batch),
                       general_matrix(24, 5.0)[None]])
        a[batch // 2] *= 1e3  # matrices of different scales side by side
        x = newton_schulz_inverse(a, 20, impl=impl)
    finally:
        torch.set_num_threads(old)
    torch.testing.assert_close(x, unrolled_inverse(a, 20), rtol=1e-10,
                               atol=1e-15)


THREAD_STATE_SCRIPT = """
import torch
from mmlaplacian.ops import newton_schulz_inverse
torch.set_num_threads(2)
a = torch.eye(8).repeat(4, 1, 1) * 2 + 0.01 * torch.rand(4, 8, 8)
expected = torch.linalg.inv(a)
results = []
with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
    results.append(newton_schulz_inverse(a, 20, impl='cpp'))
with torch.inference_mode():
    results.append(newton_schulz_inverse(a, 20, impl='cpp'))
print('ok', all(torch.allclose(x, expected, atol=1e-5) for x in results))
"""


@pytest.mark.compiled
def test_cpu_thread_split_under_python_thread_state():
    """The per-thread path hands its workers the caller's grad and
    inference modes, not the whole thread-local state: saved-tensor hooks
    (torch.utils.checkpoint) are Python objects, and a worker installing
    them waits for the GIL that the caller holds while it waits for the
    workers. A subprocess with a time limit turns that deadlock into a
    failure."""
    pytest.importorskip('mmlaplacian._ext')
    proc = subprocess.run([sys.executable, '-c', THREAD_STATE_SCRIPT],
                          capture_output=True,
                          text=True,
                          timeout=120)
    # The last line: the maintained fork's mmdet prints a line at import.
    assert proc.stdout.splitlines()[-1:] == ['ok True'], proc.stderr[-3000:]


def test_init_selection(device, impl):
    sym = spd_batch(1, 9).to(device)
    nonsym = general_matrix(9, 3.0)[None].to(device)
    both = torch.cat([sym, nonsym])
    auto = newton_schulz_inverse(both, 3, 'auto', impl=impl)
    identity = newton_schulz_inverse(sym, 3, 'identity', impl=impl)
    transpose = newton_schulz_inverse(nonsym, 3, 'transpose', impl=impl)
    # Three steps are far from converged: each start leaves its own trace.
    torch.testing.assert_close(auto[:1], identity, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(auto[1:], transpose, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(
        newton_schulz_inverse(sym, 3, 'transpose', impl=impl), identity)
    # The starts themselves (zero steps).
    a = sym[0]
    x0 = newton_schulz_inverse(sym, 0, 'identity', impl=impl)[0]
    torch.testing.assert_close(
        x0, torch.eye(9, dtype=a.dtype, device=device) /
        a.abs().sum(1).max())
    x0 = newton_schulz_inverse(nonsym, 0, 'transpose', impl=impl)[0]
    n = nonsym[0]
    torch.testing.assert_close(
        x0, n.mT / (n.abs().sum(0).max() * n.abs().sum(1).max()))


def test_gradcheck(device, impl):
    a = spd_batch(2, 5, seed=1).to(device)
    a[1] += 0.1 * general_matrix(5, 2.0).to(device)  # one non-symmetric
    a.requires_grad_()
    # Converged to machine precision, the iteration is the inverse, whose
    # derivative the analytic backward computes.
    assert torch.autograd.gradcheck(
        lambda t: newton_schulz_inverse(t, 40, impl=impl), (a, ))


def test_gradient_matches_linalg_inv(device, impl):
    a = landmark_matrix(49, 1e2)[None].to(device).requires_grad_()
    a_inv = a.detach().clone().requires_grad_()
    grad = torch.randn(1, 49, 49, dtype=torch.float64, device=device)
    newton_schulz_inverse(a, impl=impl).backward(grad)
    torch.linalg.inv(a_inv).backward(grad)
    torch.testing.assert_close(a.grad, a_inv.grad, rtol=1e-6, atol=1e-8)


def test_residual(device, impl):
    a = spd_batch(3, 6).to(device)
    x, residual = newton_schulz_inverse(
        a, 2, impl=impl, return_residual=True)
    eye = torch.eye(6, dtype=a.dtype, device=device)
    expected = torch.linalg.matrix_norm(eye - a @ x)
    assert residual.shape == (3, ) and not residual.requires_grad
    torch.testing.assert_close(residual, expected)
    assert (residual > 1e-3).all()  # two steps are not converged


def test_autocast_computes_in_fp32(device, impl):
    a = landmark_matrix(49, 1e3).float()[None].to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        x, residual = newton_schulz_inverse(
            a, impl=impl, return_residual=True)
    assert x.dtype == torch.float32 and residual.dtype == torch.float32
    # bf16 matmuls would leave a residual of order 1 at cond 1e3.
    assert residual.item() < 1e-2
    inv = torch.linalg.inv(a.double().cpu())
    torch.testing.assert_close(
        x.double().cpu(), inv, rtol=1e-3, atol=1e-3 * inv.abs().max().item())


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_reduced_precision_inputs(device, impl, dtype):
    a = spd_batch(2, 20).to(device, dtype)
    x, residual = newton_schulz_inverse(a, impl=impl, return_residual=True)
    assert x.dtype == dtype and residual.dtype == torch.float32
    # Iterated in fp32 on the rounded input: converged to fp32 precision.
    assert residual.max().item() < 1e-4
    inv = torch.linalg.inv(a.double().cpu())
    torch.testing.assert_close(
        x.double().cpu(), inv, rtol=torch.finfo(dtype).eps, atol=1e-3)


@pytest.mark.parametrize('shape', [(0, 4, 4), (3, 0, 0)], ids=str)
def test_empty(device, impl, shape):
    a = torch.zeros(shape, device=device, requires_grad=True)
    x, residual = newton_schulz_inverse(a, impl=impl, return_residual=True)
    assert x.shape == shape and residual.shape == (shape[0], )
    x.sum().backward()
    assert a.grad.shape == shape


@pytest.mark.parametrize('value', [float('nan'), float('inf')])
def test_nonfinite_entries(device, impl, value):
    """A NaN or ±inf entry makes that matrix's X all NaN (an infinite norm
    gives X0 = 0 or inf/inf, then inf * 0 in A X), and its gradient all
    NaN; the other matrices of the batch, and their gradients, stay finite.
    Nothing raises. The formula gives the same NaN pattern."""
    a = spd_batch(3, 5).to(device)
    a[0, 1, 2] = value
    a[2, 3, 3] = -value
    a.requires_grad_()
    x = newton_schulz_inverse(a, impl=impl)
    x.backward(torch.ones_like(x))
    expected = unrolled_inverse(a)
    assert torch.equal(x.isnan().cpu(), expected.isnan())
    assert torch.isnan(x[[0, 2]]).all() and torch.isfinite(x[1]).all()
    assert torch.isnan(a.grad[[0, 2]]).all()
    assert torch.isfinite(a.grad[1]).all()


def test_start_near_float_max(device, impl):
    """||A||_1 · ||A||_inf near 1e38: the start must divide by the product
    as the formula does, not multiply by a reciprocal that fast-math
    flushes to zero (the iteration would then return all zeros)."""
    a = general_matrix(8, 4.0, seed=5)
    norms = a.abs().sum(0).max() * a.abs().sum(1).max()
    a = (a * math.sqrt(2e38 / norms))[None]
    assert 1e38 < (a.abs().sum(1).max() * a.abs().sum(2).max()) < 3e38
    a32 = a.float().to(device)
    x = newton_schulz_inverse(a32, 30, 'transpose', impl=impl)
    expected = unrolled_inverse(a32, 30, 'transpose')
    torch.testing.assert_close(x.double().cpu(), expected, rtol=1e-4,
                               atol=1e-6 * expected.abs().max().item())
    assert x.abs().max() > 0


def test_batch_above_cuda_grid_limit(device, impl):
    """70,000 matrices: one CUDA block each, along grid x (whose limit is
    2^31 - 1, not the 65,535 of grid y and z)."""
    a = spd_batch(70_000, 3, seed=2).to(device)
    x = newton_schulz_inverse(a, impl=impl)
    torch.testing.assert_close(
        x.double().cpu(), torch.linalg.inv(a.double().cpu()), rtol=1e-8,
        atol=1e-10)


def kernel_matrix(points, lam, eps=1e-2):
    """The attention's A: Laplacian kernel of landmark points at bandwidth
    λ, plus εI (fp64)."""
    dist = (points[:, None, :] - points[None, :, :]).abs().sum(-1)
    eye = torch.eye(len(points), dtype=points.dtype)
    return torch.exp(-dist / lam) + eps * eye


@functools.lru_cache(maxsize=None)
def kernel_matrix_with_cond(cond, m=64, dim=32, seed=0):
    """kernel_matrix of m random points with the λ (bisected on log λ) that
    gives condition number ``cond``; ε = 1e-2 caps it at (m + ε) / ε."""
    g = torch.Generator().manual_seed(seed)
    points = torch.randn(m, dim, generator=g, dtype=torch.float64)
    lo, hi = math.log(1e-2), math.log(1e7)
    for _ in range(60):
        mid = (lo + hi) / 2
        if torch.linalg.cond(kernel_matrix(points, math.exp(mid))) < cond:
            lo = mid
        else:
            hi = mid
    return kernel_matrix(points, math.exp(hi))


def backward_disagreement(a, impl, device, dtype, num_iters):
    """‖analytic − unrolled‖_F / ‖unrolled‖_F for one random G, where
    "analytic" is the op's backward −Xᵀ G Xᵀ and "unrolled" autograd through
    the reference iteration (X0 included), both in ``dtype``."""
    g = torch.Generator().manual_seed(1)
    grad = torch.randn(a.shape, generator=g, dtype=torch.float64)
    grad = grad[None].to(device, dtype)
    a_op = a[None].to(device, dtype).requires_grad_()
    newton_schulz_inverse(a_op, num_iters, impl=impl).backward(grad)
    a_ref = a[None].to(device, dtype).requires_grad_()
    x_ref = newton_schulz_forward_reference(a_ref, num_iters, 'auto')
    unrolled, = torch.autograd.grad(x_ref, a_ref, grad)
    diff = (a_op.grad - unrolled).double().norm()
    return (diff / unrolled.double().norm()).item()


# Measured (m = 64 landmarks, d = 32, one G), analytic vs unrolled, relative
# Frobenius error, at the defaults (20 iterations, ε = 1e-2):
#   cond   fp64      fp32
#   10     7.4e-16   3.2e-7
#   1e2    1.9e-15   9.4e-7
#   1e3    1.3e-14   7.3e-6
#   5e3    9.4e-14   5.0e-5
# In fp32 each of the two is that far from the exact gradient too (the fp32
# rounding floor). The bounds are 2-4x these figures.
BACKWARD_BOUND = {
    torch.float64: lambda cond: 4e-17 * cond + 1.5e-15,
    torch.float32: lambda cond: 3e-8 * cond + 7e-7,
}


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32],
                         ids=['fp64', 'fp32'])
@pytest.mark.parametrize('cond', [10.0, 1e2, 1e3, 5e3])
def test_backward_matches_unrolled_iteration(device, impl, dtype, cond):
    """The analytic backward against autograd through the unrolled
    iteration, at the model's settings: 20 iterations on A = kernel + εI,
    ε = 1e-2, condition numbers 10 to 5e3.

    Agreement measured (relative Frobenius error, m = 64):
    fp64 7.4e-16 / 1.9e-15 / 1.3e-14 / 9.4e-14 at cond 10 / 1e2 / 1e3 / 5e3,
    fp32 3.2e-7 / 9.4e-7 / 7.3e-6 / 5.0e-5. At 20 iterations the fp64
    iteration has converged (residual ‖I − AX‖_F 1.7e-12 at cond 5e3; fp32
    5.2e-4, its rounding floor), so −Xᵀ G Xᵀ is the
    derivative of the iteration as well as of the inverse; in fp32 both
    gradients sit at the same rounding floor, equally far from the exact
    one. Too few iterations break this: see
    :func:`test_backward_disagrees_when_not_converged`.
    """
    a = kernel_matrix_with_cond(cond)
    assert torch.linalg.cond(a).item() == pytest.approx(cond, rel=1e-3)
    error = backward_disagreement(a, impl, device, dtype, 20)
    assert error < BACKWARD_BOUND[dtype](cond), error


@pytest.mark.parametrize('cond,num_iters', [(1e3, 12), (5e3, 15)])
def test_backward_disagrees_when_not_converged(device, impl, cond, num_iters):
    """With too few iterations for the condition number the iteration has
    not converged and −Xᵀ G Xᵀ is not its derivative: the comparison above
    detects it (measured fp64 relative error 2.3e-2 at cond 1e3 after 12
    steps, 3.1e-3 at cond 5e3 after 15; 0.45 at cond 5e3 after 12), far
    above the bound it must meet at 20 steps. At cond 5e3 the default of 20
    steps converges (at 15 it has not), so it has a few steps of margin."""
    a = kernel_matrix_with_cond(cond)
    error = backward_disagreement(a, impl, device, torch.float64, num_iters)
    assert error > 100 * BACKWARD_BOUND[torch.float64](cond)


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 3),
    m=st.integers(1, 80),
    symmetric=st.booleans(),
    seed=st.integers(0, 2**16))
@pytest.mark.compiled
def test_fuzz_shapes(device, impl, batch, m, symmetric, seed):
    a = spd_batch(batch, m, seed)
    if not symmetric:
        a = a + 0.2 * general_matrix(m, 2.0, seed)
    a = a.to(device)
    x, residual = newton_schulz_inverse(
        a, 30, impl=impl, return_residual=True)
    torch.testing.assert_close(
        x.cpu(), newton_schulz_reference(a.cpu(), 30), rtol=1e-9, atol=1e-11)
    assert (residual < 1e-8).all()


@pytest.mark.parametrize(
    'a,kwargs,error,match',
    [
        (torch.zeros(4, 4), {}, ValueError,
         r'newton_schulz_inverse: A must have 3 dimensions, got shape '
         r'\(4, 4\)'),
        (torch.zeros(2, 4, 3), {}, ValueError,
         r'square matrices \(B, m, m\), got shape \(2, 4, 3\)'),
        (torch.zeros(2, 3, 3, dtype=torch.int32), {}, TypeError,
         r'A must be a floating-point tensor, got torch.int32'),
        (torch.zeros(1, 3, 3), dict(num_iters=-1), ValueError,
         r'num_iters must be >= 0, got -1'),
        (torch.zeros(1, 3, 3), dict(num_iters=2.0), TypeError,
         r'num_iters must be an int, got float'),
        (torch.zeros(1, 3, 3), dict(init='eye'), ValueError,
         r"init must be one of \('auto', 'identity', 'transpose'\), got "
         r"'eye'"),
        (torch.zeros(1, 3, 3), dict(impl='cuda'), ValueError,
         r"impl='cuda' runs on cuda tensors, got tensors on cpu"),
        (torch.zeros(1, 3, 3), dict(impl='fast'), ValueError,
         r'impl must be one of'),
    ],
    ids=[
        'rank', 'non-square', 'integer', 'negative-iters', 'float-iters',
        'init', 'impl-device', 'impl'
    ])
def test_bad_inputs(a, kwargs, error, match):
    with pytest.raises(error, match=match):
        newton_schulz_inverse(a, **kwargs)
