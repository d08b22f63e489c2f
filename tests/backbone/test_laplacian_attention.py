"""LaplacianAttention: exactness, memory, switches, determinism."""
import math

import pytest
import torch

from mmlaplacian.models.layers import (LaplacianAttention, landmark_grid,
                                       pool_landmarks)


def _exact_kernel_attention(attn: LaplacianAttention, x: torch.Tensor,
                            hw_shape) -> torch.Tensor:
    """The layer's formula with every token a landmark and an exact inverse."""
    batch, num_tokens, channels = x.shape
    heads, dims = attn.num_heads, attn.head_dims
    q = attn.q(x).reshape(batch, num_tokens, heads, dims).transpose(1, 2)
    v = attn.v(x).reshape(batch, num_tokens, heads, dims).transpose(1, 2)
    q = q / torch.exp(attn.log_lam).view(1, -1, 1, 1)
    dist = (q[:, :, :, None, :] - q[:, :, None, :, :]).abs().sum(-1)
    kmat = torch.exp(-dist)  # (B, h, N, N)
    eye = torch.eye(num_tokens, dtype=x.dtype)
    inv = torch.linalg.inv(kmat + attn.eps * eye)
    mean = kmat.mean(-2, keepdim=True)
    var = kmat.var(-2, keepdim=True, unbiased=False)
    z = (kmat - mean) / torch.sqrt(var + attn.whiten_eps)
    out = z @ (inv @ (kmat.transpose(-1, -2) @ v / num_tokens))
    out = out + v.mean(-2, keepdim=True)
    out = out.transpose(1, 2).reshape(batch, num_tokens, channels)
    v_map = attn.v(x).transpose(1, 2).reshape(batch, channels, *hw_shape)
    out = out + attn.dwconv(v_map).flatten(2).transpose(1, 2)
    return attn.proj(out)


@pytest.mark.parametrize('hw_shape', [(5, 7), (6, 6), (1, 9)])
def test_all_tokens_as_landmarks_is_exact_kernel_attention(hw_shape):
    torch.manual_seed(0)
    num_tokens = hw_shape[0] * hw_shape[1]
    attn = LaplacianAttention(
        32, 2, num_landmarks=num_tokens, ns_iters=40, lam=2.0).double()
    x = torch.randn(2, num_tokens, 32, dtype=torch.double)
    expected = _exact_kernel_attention(attn, x, hw_shape)
    torch.testing.assert_close(
        attn(x, hw_shape), expected, rtol=1e-6, atol=1e-6)
    attn.inverse = 'exact'
    torch.testing.assert_close(
        attn(x, hw_shape), expected, rtol=1e-8, atol=1e-8)


def test_landmark_grid_keeps_aspect_and_cap():
    assert landmark_grid((7, 7), 49) == (7, 7)
    assert landmark_grid((3, 5), 49) == (3, 5)
    grid = landmark_grid((200, 334), 49)
    assert grid[0] * grid[1] <= 49 and grid[0] < grid[1]
    for hw in [(1, 1000), (1000, 1), (13, 17), (56, 56), (250, 417)]:
        gh, gw = landmark_grid(hw, 49)
        assert 1 <= gh <= hw[0] and 1 <= gw <= hw[1] and gh * gw <= 49


def test_landmark_grid_is_the_floor_of_the_aspect_square_root():
    """``floor(sqrt(L·H/W))`` rows, computed exactly in integers: no float
    rounding at perfect squares."""
    for hw in [(200, 334), (100, 100), (49, 1), (4, 9), (9, 4), (60, 97),
               (250, 417), (7, 1000)]:
        rows = int(math.isqrt(49 * hw[0] // hw[1]))
        expected = max(1, min(hw[0], 49, rows))
        assert landmark_grid(hw, 49)[0] == expected, hw


def test_pool_landmarks_is_an_average():
    tokens = torch.arange(16 * 6, dtype=torch.float).reshape(1, 16, 6)
    pooled = pool_landmarks(tokens, (4, 4), (2, 2), num_heads=2)
    assert pooled.shape == (1, 2, 4, 3)
    grid = tokens.reshape(1, 4, 4, 2, 3)
    torch.testing.assert_close(pooled[0, :, 0],
                               grid[0, :2, :2].mean((0, 1)))
    # The token grid itself: every token is a landmark.
    same = pool_landmarks(tokens, (4, 4), (4, 4), num_heads=2)
    torch.testing.assert_close(same[0, 1], tokens[0, :, 3:])


def test_memory_is_linear_no_n_by_n_tensor(max_numel_probe):
    torch.manual_seed(0)
    hw_shape = (48, 64)
    num_tokens = hw_shape[0] * hw_shape[1]
    attn = LaplacianAttention(64, 2, impl='pytorch')
    x = torch.randn(1, num_tokens, 64, requires_grad=True)
    with max_numel_probe() as probe:
        attn(x, hw_shape).sum().backward()
    # The largest tensors are O(N·m·h) or O(N·C): with N = 3072 > 2·49 this
    # bound excludes any N×N tensor (9.4M elements).
    assert probe.max_numel <= 2 * num_tokens * 49


@pytest.mark.parametrize('options', [
    dict(kernel='gaussian'),
    dict(feature_map='none'),
    dict(inverse='exact'),
    dict(share_qk=False),
    dict(learnable_lam=True, lam=2.0),
    dict(num_landmarks=16, ns_iters=8, eps=0.1),
    dict(conv_kernel_size=0),
])
def test_ablation_switches_run_and_backpropagate(options):
    torch.manual_seed(0)
    attn = LaplacianAttention(64, 2, **options)
    x = torch.randn(2, 9 * 11, 64, requires_grad=True)
    out = attn(x, (9, 11))
    assert out.shape == x.shape and torch.isfinite(out).all()
    out.square().mean().backward()
    for name, param in attn.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
    if options.get('learnable_lam'):
        assert math.isclose(attn.log_lam.exp()[0].item(), 2.0, rel_tol=1e-6)
        assert (attn.log_lam.grad.abs() > 0).all()
        before = attn.log_lam.detach().clone()
        torch.optim.SGD([attn.log_lam], lr=1.0).step()
        # Each head's λ moved against its own gradient.
        torch.testing.assert_close(attn.log_lam.detach(),
                                   before - attn.log_lam.grad)
        assert (attn.log_lam.detach() != before).all()


def test_train_and_eval_agree_and_batch_independent():
    """Per-sample whitening: a sample's output depends neither on the mode
    nor on the other samples of its batch (batch statistics would fail)."""
    torch.manual_seed(0)
    attn = LaplacianAttention(64, 2)
    x = torch.randn(3, 12 * 10, 64)
    train_out = attn.train()(x, (12, 10))
    eval_out = attn.eval()(x, (12, 10))
    torch.testing.assert_close(train_out, eval_out)
    single = attn(x[1:2], (12, 10))
    torch.testing.assert_close(single, eval_out[1:2], rtol=1e-5, atol=1e-5)
    shuffled = attn(x[[2, 0, 1]], (12, 10))
    torch.testing.assert_close(shuffled[1], eval_out[0], rtol=1e-5,
                               atol=1e-5)
    # The comparison can fail: dropout makes training differ.
    dropout = LaplacianAttention(64, 2, proj_drop=0.5)
    dropout.load_state_dict(attn.state_dict())
    assert not torch.allclose(dropout.train()(x, (12, 10)), eval_out)
    torch.testing.assert_close(dropout.eval()(x, (12, 10)), eval_out)


@pytest.mark.parametrize('bad', [
    dict(kernel='cosine'),
    dict(feature_map='relu'),
    dict(inverse='cholesky'),
    dict(lam=0.),
    dict(num_landmarks=0),
    dict(eps=-1e-3),
    dict(whiten_eps=-1e-6),
    dict(ns_iters=0),
    dict(conv_kernel_size=4),
])
def test_bad_options_name_the_problem(bad):
    key = next(iter(bad))
    with pytest.raises(ValueError, match=key):
        LaplacianAttention(64, 2, **bad)


def test_token_count_must_fill_grid():
    attn = LaplacianAttention(64, 2)
    with pytest.raises(ValueError, match='4x5 grid'):
        attn(torch.randn(1, 21, 64), (4, 5))
