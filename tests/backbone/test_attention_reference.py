"""LaplacianAttention against an independent dense float64 formula in the
regime the model runs in: pooled landmarks (m < N), odd grids, both kernels,
separate keys, no whitening, the full and the chunked form."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmlaplacian.models.layers import LaplacianAttention, landmark_grid


def _pool(tokens: torch.Tensor, hw_shape, grid) -> torch.Tensor:
    """Adaptive average pooling written out: cell (i, j) averages rows
    [floor(i·H/gh), ceil((i+1)·H/gh)) and the same for columns."""
    height, width = hw_shape
    maps = tokens.reshape(tokens.shape[0], height, width, -1)
    cells = []
    for i in range(grid[0]):
        top, bottom = (i * height) // grid[0], -(-(i + 1) * height //
                                                grid[0])
        for j in range(grid[1]):
            left, right = (j * width) // grid[1], -(-(j + 1) * width //
                                                  grid[1])
            cells.append(maps[:, top:bottom, left:right].mean(dim=(1, 2)))
    return torch.stack(cells, dim=1)  # (B, m, C)


def _kernel(a: torch.Tensor, b: torch.Tensor, kernel: str) -> torch.Tensor:
    diff = a[..., :, None, :] - b[..., None, :, :]
    if kernel == 'laplacian':
        return torch.exp(-diff.abs().sum(-1))
    return torch.exp(-0.5 * diff.square().sum(-1))


def _newton_schulz(a: torch.Tensor, iters: int) -> torch.Tensor:
    symmetric = torch.allclose(a, a.transpose(-1, -2))
    eye = torch.eye(a.shape[-1], dtype=a.dtype)
    inf_norm = a.abs().sum(-1).amax(-1)[..., None, None]
    if symmetric:
        x = eye / inf_norm
    else:
        one_norm = a.abs().sum(-2).amax(-1)[..., None, None]
        x = a.transpose(-1, -2) / (one_norm * inf_norm)
    for _ in range(iters):
        x = 2 * x - x @ a @ x
    return x


def dense_reference(attn: LaplacianAttention, x: torch.Tensor,
                    hw_shape) -> torch.Tensor:
    """``proj(Z · X · Kkᵀ V / N + mean V + DWConv(V))`` with every matrix
    formed, per head, in float64."""
    batch, num_tokens, channels = x.shape
    heads, dims = attn.num_heads, attn.head_dims
    lam = torch.exp(attn.log_lam.detach()).double()
    q = F.linear(x, attn.q.weight, attn.q.bias)
    k = q if attn.share_qk else F.linear(x, attn.k.weight, attn.k.bias)
    v = F.linear(x, attn.v.weight, attn.v.bias)
    grid = landmark_grid(hw_shape, attn.num_landmarks)
    q_land, k_land = _pool(q, hw_shape, grid), _pool(k, hw_shape, grid)
    outs = []
    for h in range(heads):
        part = slice(h * dims, (h + 1) * dims)
        qh, kh, vh = q[..., part] / lam[h], k[..., part] / lam[h], v[..., part]
        qlh, klh = q_land[..., part] / lam[h], k_land[..., part] / lam[h]
        sim_q = _kernel(qh, klh, attn.kernel)  # (B, N, m)
        sim_k = _kernel(kh, qlh, attn.kernel)
        mat = _kernel(qlh, klh, attn.kernel) + attn.eps * torch.eye(
            qlh.shape[1], dtype=x.dtype)
        inv = (torch.linalg.inv(mat) if attn.inverse == 'exact' else
               _newton_schulz(mat, attn.ns_iters))
        if attn.feature_map == 'whiten':
            mean = sim_q.mean(1, keepdim=True)
            var = ((sim_q - mean)**2).mean(1, keepdim=True)
            feats = (sim_q - mean) / torch.sqrt(var + attn.whiten_eps)
        else:
            feats = sim_q
        context = inv @ (sim_k.transpose(1, 2) @ vh) / num_tokens
        outs.append(feats @ context + vh.mean(1, keepdim=True))
    out = torch.cat(outs, dim=-1)
    if attn.dwconv is not None:
        v_map = v.transpose(1, 2).reshape(batch, channels, *hw_shape)
        local = F.conv2d(v_map, attn.dwconv.weight, attn.dwconv.bias,
                         padding=attn.dwconv.padding, groups=channels)
        out = out + local.flatten(2).transpose(1, 2)
    return F.linear(out, attn.proj.weight, attn.proj.bias)


# (options, odd token grid): each grid pools to fewer landmarks than tokens.
CASES = [
    (dict(), (13, 11)),
    (dict(kernel='gaussian'), (9, 31)),
    (dict(share_qk=False), (9, 31)),
    (dict(feature_map='none'), (13, 11)),
    (dict(inverse='exact', share_qk=False, kernel='gaussian'), (13, 11)),
    (dict(learnable_lam=True, lam=2.5, num_landmarks=20,
          conv_kernel_size=5), (9, 31)),
]


@pytest.mark.parametrize('options,hw_shape', CASES)
@pytest.mark.parametrize('mode', ['full', 'chunked'])
def test_attention_equals_dense_reference(options, hw_shape, mode):
    torch.manual_seed(0)
    attn = LaplacianAttention(
        64, 2, mode=mode, chunk_tokens=37, **options).double().eval()
    if options.get('learnable_lam'):
        with torch.no_grad():
            attn.log_lam.copy_(torch.tensor([math.log(2.5), math.log(6.)]))
    num_tokens = hw_shape[0] * hw_shape[1]
    grid = landmark_grid(hw_shape, attn.num_landmarks)
    assert grid[0] * grid[1] < num_tokens  # pooled landmarks, m < N
    x = torch.randn(2, num_tokens, 64, dtype=torch.double)
    expected = dense_reference(attn, x, hw_shape)
    with torch.no_grad():
        out = attn(x, hw_shape)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('options', [
    dict(),
    dict(share_qk=False, learnable_lam=True),
    dict(kernel='gaussian', feature_map='none', inverse='exact'),
])
def test_attention_gradcheck_float64(options):
    """Every input and parameter, the fused ops' backward included.
    (Gaussian landmark matrices are too ill-conditioned for Newton–Schulz to
    converge at this size, so that kernel is checked with the exact
    inverse; the non-converged regime is tested in tests/ops.)"""
    torch.manual_seed(0)
    attn = LaplacianAttention(
        8, 2, num_landmarks=6, ns_iters=80, conv_kernel_size=3,
        **options).double()
    # 15 tokens, 3x2 pooled landmarks; 80 Newton–Schulz iterations converge
    # here, so the analytic inverse gradient is the true one.
    hw_shape = (3, 5)
    x = torch.randn(2, 15, 8, dtype=torch.double, requires_grad=True)
    params = [p for p in attn.parameters()]

    def fn(inputs, *weights):
        return attn(inputs, hw_shape)

    assert torch.autograd.gradcheck(
        fn, (x, *params), eps=1e-6, atol=1e-6, fast_mode=True)
