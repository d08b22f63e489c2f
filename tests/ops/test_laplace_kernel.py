"""Tests of mmlaplacian.ops.laplace_kernel.

Every impl, the PyTorch reference included, is checked against an
independent float64 formula: autograd through the dense
``exp(-|x[:, :, None] - y[:, None]|.sum(-1))``, which shares no code with the
op (the op never forms that (B, N, M, d) tensor).
"""
import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from mmlaplacian.ops import ext_info, laplace_kernel, laplace_kernel_reference
from mmlaplacian.ops.extension import resolve_impl
from mmlaplacian.ops.reference import (laplace_kernel_backward_reference,
                                       laplace_kernel_forward_reference)

# The module, not the function of the same name that mmlaplacian.ops exports.
laplace_kernel_module = importlib.import_module(
    'mmlaplacian.ops.laplace_kernel')

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
    """Output and gradients by the independent dense formula, in fp64 on
    the CPU (autograd: d|t|/dt = sign(t), with sign(0) = 0 as in the op)."""
    x, y = (t.detach().double().cpu().requires_grad_() for t in (x, y))
    out = (x[:, :, None, :] - y[:, None, :, :]).abs().sum(-1).neg().exp()
    out.backward(grad.detach().double().cpu())
    return out.detach(), x.grad, y.grad


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
    """The op's reference math (forward and backward functions) against a
    second independent formula, torch.cdist."""
    x, y = make_inputs((2, 13, 9, 6), torch.float64, 'cpu')
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    expected = torch.exp(-torch.cdist(xr, yr, p=1))
    grad = torch.randn_like(expected)
    expected.backward(grad)
    out = laplace_kernel_forward_reference(x, y)
    dx, dy = laplace_kernel_backward_reference(grad, x, y, out)
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


# d = 16, 32 and 64 take the CPU backward's compile-time specialisations;
# 7 and 33 the generic loop.
@pytest.mark.parametrize('dim', [16, 32, 64, 7, 33])
def test_gradcheck(device, impl, dim):
    # N = 5: two 2-row blocks of the CPU backward and a single-row tail.
    x, y = make_inputs((2, 5, 4, dim), torch.float64, device, seed=dim)
    x.requires_grad_()
    y.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: laplace_kernel(a, b, impl=impl), (x, y))


class _OperatorBackwardCalls(TorchDispatchMode):
    """Records the calls of the backward operator (its flags and which
    gradients came back None) while active."""

    def __init__(self, calls):
        super().__init__()
        self.calls = calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.mmlaplacian.laplace_kernel_backward.default:
            self.calls.append((tuple(args[4:6]), (out[0] is None,
                                                  out[1] is None)))
        return out


@pytest.fixture
def backward_calls(impl, monkeypatch):
    """Records ``((need_x, need_y), (dx is None, dy is None))`` of every
    call of the backward kernel that ``impl`` runs: the operator, or for
    ``'pytorch'`` the reference function."""
    calls = []
    if impl != 'pytorch':
        with _OperatorBackwardCalls(calls):
            yield calls
        return

    def recorded(grad, x, y, out, need_x, need_y):
        dx, dy = laplace_kernel_backward_reference(grad, x, y, out, need_x,
                                                   need_y)
        calls.append(((need_x, need_y), (dx is None, dy is None)))
        return dx, dy

    monkeypatch.setattr(laplace_kernel_module,
                        'laplace_kernel_backward_reference', recorded)
    yield calls


@pytest.mark.parametrize('wanted', ['x', 'y'])
def test_gradient_of_one_input(device, impl, wanted, backward_calls):
    """Only the gradient autograd needs is computed: the kernel is asked for
    one side and returns None for the other, and the computed side equals
    the two-sided result."""
    x, y = make_inputs((2, 9, 4, 32), torch.float64, device)
    grad = torch.randn(2, 9, 4, dtype=torch.float64, device=device)
    leaf = x if wanted == 'x' else y
    leaf.requires_grad_()
    laplace_kernel(x, y, impl=impl).backward(grad)
    ref_out, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    need = (wanted == 'x', wanted == 'y')
    assert backward_calls == [(need, (not need[0], not need[1]))]
    assert (x.grad is None) == (wanted == 'y')
    assert (y.grad is None) == (wanted == 'x')
    scale = sum_scale(grad, ref_out)
    assert_close(leaf.grad, ref_dx if wanted == 'x' else ref_dy,
                 torch.float64, scale)


@pytest.mark.parametrize('need_x,need_y', [(True, False), (False, True),
                                           (False, False)])
@pytest.mark.parametrize('dim', [32, 7])
def test_backward_kernel_one_sided(device, impl, need_x, need_y, dim):
    """The backward kernels themselves (reference, C++ and CUDA): a gradient
    that is not needed comes back as None, and the needed one is the same
    as from the two-sided call, bit for bit."""
    x, y = make_inputs((2, 300, 17, dim), torch.float32, device)
    out = laplace_kernel(x, y, impl=impl)
    grad = torch.randn_like(out)
    backward = (laplace_kernel_backward_reference if impl == 'pytorch' else
                torch.ops.mmlaplacian.laplace_kernel_backward)
    dx, dy = backward(grad, x, y, out, True, True)
    one_dx, one_dy = backward(grad, x, y, out, need_x, need_y)
    assert (one_dx is None) == (not need_x)
    assert (one_dy is None) == (not need_y)
    if need_x:
        assert torch.equal(one_dx, dx)
    if need_y:
        assert torch.equal(one_dy, dy)


def test_noncontiguous_and_expanded_inputs(device, impl):
    x_base, _ = make_inputs((2, 40, 1, 12), torch.float64, device)
    x_base = x_base.transpose(1, 2).contiguous().requires_grad_()  # (2,12,40)
    x = x_base.transpose(1, 2)[:, ::3]  # strided view (2, 14, 12)
    y_one = make_inputs((1, 1, 7, 12), torch.float64, device)[1]
    y_leaf = y_one.clone().requires_grad_()
    y = y_leaf.expand(2, 7, 12)  # stride 0 over the batch
    assert not x.is_contiguous() and y.stride(0) == 0
    out = laplace_kernel(x, y, impl=impl)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref_out, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    assert_close(out, ref_out, torch.float64)
    # dx lands in the strided positions of x's base, zero elsewhere.
    dx_base = x_base.grad.transpose(1, 2)
    assert_close(dx_base[:, ::3], ref_dx, torch.float64)
    untouched = torch.ones(40, dtype=torch.bool)
    untouched[::3] = False
    assert not dx_base[:, untouched].any()
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


NAN, INF = float('nan'), float('inf')


@pytest.mark.parametrize('case', ['nan-x', 'nan-y', 'inf-x', 'neg-inf-y',
                                  'inf-both'])
def test_nonfinite_inputs(device, impl, case):
    """What non-finite inputs do, for every impl as for the formula:

    - NaN in x[b, i]: row i of K[b] is NaN, dx[b, i] is NaN, and all of
      dy[b] (every landmark sums over row i); batch b's other dx rows and
      the other batches stay finite. NaN in y[b, j]: the same with roles
      swapped.
    - ±inf in one of x[b, i], y[b, j]: infinite distance, K = 0 in that row
      (column), and its gradient is exactly 0; everything stays finite.
    - +inf in the same feature of both x[b, i] and y[b, j]: inf - inf is
      NaN, so K[b, i, j] alone is NaN (K[b, i, j'] = K[b, i', j] = 0), and
      dx[b, i] and dy[b, j] are NaN.
    No impl raises or crashes on these inputs.
    """
    x, y = make_inputs((2, 6, 5, 8), torch.float64, device)
    i, j, c = 2, 3, 5
    if case == 'nan-x':
        x[0, i, c] = NAN
    elif case == 'nan-y':
        y[0, j, c] = NAN
    elif case == 'inf-x':
        x[0, i, c] = INF
    elif case == 'neg-inf-y':
        y[0, j, c] = -INF
    else:
        x[0, i, c] = y[0, j, c] = INF
    grad = torch.randn(2, 6, 5, dtype=torch.float64, device=device)
    out, dx, dy = run_fwd_bwd(x, y, grad, impl)
    ref_out, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    assert_close(out, ref_out, torch.float64)
    scale = sum_scale(grad, ref_out.nan_to_num())
    assert_close(dx, ref_dx, torch.float64, scale)
    assert_close(dy, ref_dy, torch.float64, scale)

    out, dx, dy = out.cpu(), dx.cpu(), dy.cpu()
    assert torch.isfinite(out[1]).all() and torch.isfinite(dx[1]).all()
    assert torch.isfinite(dy[1]).all()
    others_i = [r for r in range(6) if r != i]
    others_j = [r for r in range(5) if r != j]
    if case == 'nan-x':
        assert out[0, i].isnan().all() and dx[0, i].isnan().all()
        assert torch.isfinite(out[0, others_i]).all()
        assert torch.isfinite(dx[0, others_i]).all()
        assert dy[0].isnan().all()
    elif case == 'nan-y':
        assert out[0, :, j].isnan().all() and dy[0, j].isnan().all()
        assert torch.isfinite(out[0][:, others_j]).all()
        assert torch.isfinite(dy[0, others_j]).all()
        assert dx[0].isnan().all()
    elif case == 'inf-x':
        assert not out[0, i].any() and not dx[0, i].any()
        assert torch.isfinite(dx).all() and torch.isfinite(dy).all()
    elif case == 'neg-inf-y':
        assert not out[0, :, j].any() and not dy[0, j].any()
        assert torch.isfinite(dx).all() and torch.isfinite(dy).all()
    else:
        assert out[0].isnan().nonzero().tolist() == [[i, j]]
        assert not out[0, i, others_j].any() and not out[0, others_i, j].any()
        assert dx[0, i].isnan().all() and dy[0, j].isnan().all()
        assert torch.isfinite(dx[0, others_i]).all()
        assert torch.isfinite(dy[0, others_j]).all()


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
    """fp16/bf16 values and gradients against the fp32 computation on the
    same (rounded) inputs: accumulated in fp32, so only the roundings of
    the inputs of the backward (grad, K) and of the results remain."""
    x, y = make_inputs((2, 70, 13, 32), dtype, device)
    x.requires_grad_()
    y.requires_grad_()
    out = laplace_kernel(x, y, impl=impl)
    assert out.dtype == dtype
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grad = grad.to(device, dtype)
    out.backward(grad)
    ref, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(out.double().cpu(), ref, rtol=eps, atol=1e-6)
    assert x.grad.dtype == dtype and y.grad.dtype == dtype
    # K is saved in the low dtype (relative error eps / 2 per entry); the
    # sums of ~13 (dx) and ~70 (dy) signed terms can cancel, so the bound is
    # relative to the sum of |terms| (sum_scale), not to the result.
    scale = sum_scale(grad, ref)
    for actual, expected in ((x.grad, ref_dx), (y.grad, ref_dy)):
        torch.testing.assert_close(
            actual.double().cpu(), expected, rtol=eps, atol=eps * scale)


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


def test_batch_above_cuda_grid_limit(device, impl):
    """B = 70,000 exceeds the 65,535 blocks of a CUDA grid's z dimension:
    the kernels loop over the batch in grid z."""
    shape = (70_000, 2, 3, 4)
    x, y = make_inputs(shape, torch.float64, device, seed=3)
    grad = torch.randn(shape[:3], dtype=torch.float64, device=device)
    out, dx, dy = run_fwd_bwd(x, y, grad, impl)
    ref_out, ref_dx, ref_dy = reference_fwd_bwd(x, y, grad)
    assert_close(out, ref_out, torch.float64)
    assert_close(dx, ref_dx, torch.float64, 4.0)
    assert_close(dy, ref_dy, torch.float64, 4.0)


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
