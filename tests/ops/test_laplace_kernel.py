"""Tests of mmlaplacian.ops.laplace_kernel: each impl against the reference."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmlaplacian.ops import ext_info, laplace_kernel, laplace_kernel_reference
from mmlaplacian.ops.ext_loader import resolve_impl
from mmlaplacian.ops.reference import (laplace_kernel_backward_reference,
                                       laplace_kernel_forward_reference)

TOL = {
    torch.float64: dict(rtol=1e-11, atol=1e-13),
    torch.float32: dict(rtol=2e-5, atol=1e-6),
}
# Shapes (B, N, M, d) that are not multiples of any tile size.
SHAPES = [(1, 1, 1, 1), (2, 7, 5, 3), (3, 63, 65, 32), (2, 129, 1, 16),
          (1, 65, 129, 7), (2, 33, 49, 33), (1, 300, 17, 64)]


def make_inputs(shape, dtype, device, seed=0):
    """x, y with L1 distances of order 1, so K is far from 0 and 1."""
    batch, rows, cols, dim = shape
    g = torch.Generator().manual_seed(seed)
    scale = 1.5 / max(dim, 1)
    x = torch.randn(batch, rows, dim, generator=g, dtype=torch.float64) * scale
    y = torch.randn(batch, cols, dim, generator=g, dtype=torch.float64) * scale
    return x.to(device, dtype), y.to(device, dtype)


def reference_fwd_bwd(x, y, grad):
    """fp64 reference output and gradients, on CPU."""
    x, y, grad = (t.detach().double().cpu() for t in (x, y, grad))
    out = laplace_kernel_forward_reference(x, y)
    dx, dy = laplace_kernel_backward_reference(grad, x, y, out)
    return out, dx, dy


def run_fwd_bwd(x, y, grad, impl):
    x = x.detach().clone().requires_grad_()
    y = y.detach().clone().requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    out.backward(grad)
    return out, x.grad, y.grad


def assert_close(actual, expected, dtype, scale=1.0):
    """Compare with the dtype's tolerance; ``scale`` widens atol for sums."""
    tol = dict(TOL[dtype])
    tol['atol'] = tol['atol'] * max(float(scale), 1.0)
    torch.testing.assert_close(
        actual.double().cpu(), expected, **tol, equal_nan=True)


def sum_scale(grad, out):
    """Largest sum of |grad * K| behind one gradient entry: rounding errors
    of the sums in dx and dy grow with it."""
    weight = (grad.double().cpu() * out).abs()
    if weight.numel() == 0:
        return 1.0
    return max(weight.sum(1).max().item(), weight.sum(2).max().item())


def test_reference_matches_cdist():
    x, y = make_inputs((2, 13, 9, 6), torch.float64, 'cpu')
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    expected = torch.exp(-torch.cdist(xr, yr, p=1))
    grad = torch.randn_like(expected)
    expected.backward(grad)
    out, dx, dy = reference_fwd_bwd(x, y, grad)
    torch.testing.assert_close(out, expected.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(dy, yr.grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('shape', SHAPES, ids=str)
def test_matches_reference(device, impl, dtype, shape):
    x, y = make_inputs(shape, dtype, device)
    grad = torch.randn(shape[:3], dtype=dtype, device=device)
    out, dx, dy = run_fwd_bwd(x, y, grad, impl)
    ref_out, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    assert out.dtype == dtype and out.shape == shape[:3]
    assert_close(out, ref_out, dtype)
    scale = sum_scale(grad, ref_out)
    assert_close(dx, ref_dx, dtype, scale)
    assert_close(dy, ref_dy, dtype, scale)


def test_gradcheck(device, impl):
    x, y = make_inputs((2, 6, 5, 4), torch.float64, device, seed=1)
    x.requires_grad_()
    y.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: laplace_kernel(a, b, impl=impl), (x, y))


def test_gradient_of_one_input(device, impl):
    x, y = make_inputs((1, 9, 4, 5), torch.float64, device)
    y.requires_grad_()
    laplace_kernel(x, y, impl=impl).sum().backward()
    _, _, ref_dy = reference_fwd_bwd(x, y, torch.ones(1, 9, 4))
    assert x.grad is None
    assert_close(y.grad, ref_dy, torch.float64)


def test_noncontiguous_and_expanded_inputs(device, impl):
    x_full, _ = make_inputs((2, 40, 1, 12), torch.float64, device)
    x = x_full.transpose(1, 2).contiguous().transpose(1, 2)[:, ::3]  # strided
    y_one = make_inputs((1, 1, 7, 12), torch.float64, device)[1]
    y = y_one.expand(2, 7, 12)  # stride 0 over the batch
    assert not x.is_contiguous() and y.stride(0) == 0
    y_leaf = y_one.clone().requires_grad_()
    out = laplace_kernel(x, y_leaf.expand(2, 7, 12), impl=impl)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref_out, _, ref_dy = reference_fwd_bwd(x.contiguous(), y.contiguous(),
                                           grad)
    assert_close(out, ref_out, torch.float64)
    assert_close(y_leaf.grad, ref_dy.sum(0, keepdim=True), torch.float64)


@pytest.mark.parametrize('shape', [(2, 0, 5, 4), (2, 6, 0, 4), (0, 3, 2, 4),
                                   (2, 3, 4, 0)],
                         ids=str)
def test_empty_inputs(device, impl, shape):
    x, y = make_inputs(shape, torch.float32, device)
    x.requires_grad_()
    y.requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    assert out.shape == shape[:3]
    # exp(-0) = 1 when d = 0.
    assert torch.equal(out, torch.ones_like(out))
    out.sum().backward()
    assert x.grad.shape == x.shape and y.grad.shape == y.shape
    assert not x.grad.any() and not y.grad.any()


def test_nan_propagates(device, impl):
    x, y = make_inputs((1, 5, 6, 8), torch.float32, device)
    x[0, 2, 3] = float('nan')
    out = laplace_kernel(x, y, impl=impl)
    assert torch.isnan(out[0, 2]).all()
    assert torch.isfinite(out[0, [0, 1, 3, 4]]).all()


def test_autocast_computes_in_fp32(device, impl):
    low = torch.bfloat16
    x, y = make_inputs((2, 37, 11, 32), torch.float32, device)
    with torch.autocast(device_type=device, dtype=low):
        out = laplace_kernel(x, y, impl=impl)
        # Mixed fp32/bf16 inputs are accepted, as for torch ops.
        mixed = laplace_kernel(x.to(low), y, impl=impl)
    assert out.dtype == torch.float32 and mixed.dtype == torch.float32
    ref, _, _ = reference_fwd_bwd(x, y, torch.zeros(out.shape))
    # A bf16 computation would be off by ~1e-2 relative.
    assert_close(out, ref, torch.float32)
    ref_mixed, _, _ = reference_fwd_bwd(x.to(low), y, torch.zeros(out.shape))
    assert_close(mixed, ref_mixed, torch.float32)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_reduced_precision_inputs(device, impl, dtype):
    x, y = make_inputs((2, 70, 13, 32), dtype, device)
    x.requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    assert out.dtype == dtype
    ref, _, _ = reference_fwd_bwd(x, y, torch.zeros(out.shape))
    # Accumulated in fp32: only the final rounding to fp16/bf16 remains.
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(out.double().cpu(), ref, rtol=eps, atol=1e-6)
    out.sum().backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad).all()


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(1, 3),
    rows=st.integers(0, 70),
    cols=st.integers(0, 70),
    dim=st.integers(1, 40),
    seed=st.integers(0, 2**16))
@pytest.mark.compiled
def test_fuzz_shapes(device, impl, batch, rows, cols, dim, seed):
    shape = (batch, rows, cols, dim)
    x, y = make_inputs(shape, torch.float64, device, seed=seed)
    grad = torch.randn(shape[:3], dtype=torch.float64, device=device)
    out, dx, dy = run_fwd_bwd(x, y, grad, impl)
    ref_out, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    assert_close(out, ref_out, torch.float64)
    scale = sum_scale(grad, ref_out)
    assert_close(dx, ref_dx, torch.float64, scale)
    assert_close(dy, ref_dy, torch.float64, scale)


def test_no_bnmd_intermediate(impl):
    """Forward and backward never allocate anything near B·N·M·d values."""
    batch, rows, cols, dim = 2, 1000, 40, 32
    x, y = make_inputs((batch, rows, cols, dim), torch.float64, 'cpu')
    x.requires_grad_()
    y.requires_grad_()
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            profile_memory=True) as prof:
        laplace_kernel(x, y, impl=impl).sum().backward()
    largest = max(e.cpu_memory_usage for e in prof.events())
    bnm_bytes = batch * rows * cols * 8
    assert 0 < largest <= 2 * bnm_bytes, (largest, bnm_bytes)


def test_impl_resolution():
    cpu = torch.device('cpu')
    ext = ext_info()
    expected = 'cpp' if 'cpu' in ext['devices'] else 'pytorch'
    assert resolve_impl('laplace_kernel', 'auto', cpu) == expected
    assert resolve_impl('laplace_kernel', 'pytorch', cpu) == 'pytorch'
    cuda = torch.device('cuda')  # only the device type is read
    if 'cuda' in ext['devices']:
        assert resolve_impl('laplace_kernel', 'cuda', cuda) == 'cuda'
    else:
        assert resolve_impl('laplace_kernel', 'auto', cuda) == 'pytorch'
        with pytest.raises(RuntimeError, match="impl='cuda' is not available"
                           if ext['loaded'] else 'could not be imported'):
            resolve_impl('laplace_kernel', 'cuda', cuda)


def test_ext_info():
    info = ext_info()
    assert set(info) == {
        'loaded', 'error', 'devices', 'cuda_version', 'cuda_arch_list'
    }
    assert info['loaded'] == (info['error'] is None)
    assert set(info['devices']) <= {'cpu', 'cuda'}
    if 'cuda' in info['devices']:
        assert info['cuda_version'] and info['cuda_arch_list']
    else:
        assert info['cuda_version'] is None and info['cuda_arch_list'] is None


def test_reference_alias():
    x, y = make_inputs((1, 4, 3, 2), torch.float64, 'cpu')
    assert torch.equal(
        laplace_kernel_reference(x, y), laplace_kernel(x, y, impl='pytorch'))


@pytest.mark.parametrize(
    'x,y,error,match',
    [
        (torch.zeros(5, 3), torch.zeros(1, 4, 3), ValueError,
         r'laplace_kernel: x must have 3 dimensions, got shape \(5, 3\)'),
        (torch.zeros(1, 5, 3), torch.zeros(1, 4, 2), ValueError,
         r'agree in B and d, got x \(1, 5, 3\) and y \(1, 4, 2\)'),
        (torch.zeros(2, 5, 3), torch.zeros(1, 4, 3), ValueError,
         r'agree in B and d, got x \(2, 5, 3\) and y \(1, 4, 3\)'),
        (torch.zeros(1, 5, 3), torch.zeros(1, 4, 3, dtype=torch.float64),
         TypeError, r'same dtype.*torch.float32.*torch.float64'),
        (torch.zeros(1, 5, 3, dtype=torch.int64), torch.zeros(1, 4, 3),
         TypeError, r'laplace_kernel: x must be a floating-point tensor, got '
         r'torch.int64'),
        ([[[0.0]]], torch.zeros(1, 1, 1), TypeError,
         r'laplace_kernel: x must be a torch.Tensor, got list'),
        (torch.zeros(1, 5, 3), torch.zeros(1, 4, 3, device='meta'),
         ValueError, r'same device.*cpu.*meta'),
    ],
    ids=['rank', 'dim', 'batch', 'dtype', 'integer', 'not-tensor', 'device'])
def test_bad_inputs(x, y, error, match):
    with pytest.raises(error, match=match):
        laplace_kernel(x, y)


def test_bad_impl():
    x = torch.zeros(1, 2, 3)
    with pytest.raises(ValueError, match="impl must be one of"):
        laplace_kernel(x, x, impl='triton')
    with pytest.raises(ValueError, match="impl='cuda' runs on cuda tensors"):
        laplace_kernel(x, x, impl='cuda')
    meta = x.to('meta')
    with pytest.raises(ValueError, match="impl='cpp' runs on cpu tensors"):
        laplace_kernel(meta, meta, impl='cpp')
