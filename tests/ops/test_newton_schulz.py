"""Tests of mmlaplacian.ops.newton_schulz_inverse."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmlaplacian.ops import (laplace_kernel_reference, newton_schulz_inverse,
                             newton_schulz_reference)


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


@pytest.mark.compiled
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('m', [1, 7, 33, 63, 65, 97, 128, 129])
def test_matches_reference(device, impl, dtype, m):
    a = torch.cat([spd_batch(2, m, seed=m), general_matrix(m, 5.0)[None]])
    a = a.to(device, dtype)
    x = newton_schulz_inverse(a, impl=impl)
    expected = newton_schulz_reference(a.cpu())
    assert x.dtype == dtype and x.shape == a.shape
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(
        rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x.cpu(), expected, **tol)


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


def test_nan_propagates(device, impl):
    a = spd_batch(2, 5).to(device)
    a[0, 1, 2] = float('nan')
    x = newton_schulz_inverse(a, impl=impl)
    assert torch.isnan(x[0]).all()
    assert torch.isfinite(x[1]).all()


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
