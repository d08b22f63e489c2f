"""benchmarks.qk_distance: sampled pairs against distances known or computed in
full."""
import json

import numpy as np
import pytest
import torch

from benchmarks import qk_distance as tool


def write_images(folder, count=2):
    import cv2
    rng = np.random.default_rng(0)
    for index in range(count):
        img = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
        cv2.circle(img, (40, 50), 20, (255, 0, 0), -1)
        cv2.imwrite(str(folder / f'{index}.png'), img)


def test_lf_tiny_random_weights(tmp_path, capsys):
    images = tmp_path / 'images'
    images.mkdir()
    write_images(images)
    report = tool.main([
        '--model', 'lf_tiny', '--images', str(images), '--short-side', '64',
        '--size-divisor', '32',
        '--pairs-per-call', '256', '--out-dir', str(tmp_path / 'out')
    ])
    out = capsys.readouterr().out
    assert 'random initialisation' in out and 'excess kurtosis' in out
    assert report['images'] == 2
    # Three LaplacianAttention stages (attn.q) and the softmax stage (qkv).
    assert sorted(report['stats']) == ['0', '1', '2', '3']
    # Stage 1 has one block: 256 pairs per image; ℓ2² of a pair is at most
    # its ℓ1 squared, so the medians are ordered likewise.
    assert report['stats']['0']['l1']['n'] == 2 * 256
    for per_stage in report['stats'].values():
        assert per_stage['sq_l2']['p50'] <= per_stage['l1']['p50']**2
    saved = json.loads((tmp_path / 'out' / 'qk_distance_lf_tiny.json')
                       .read_text())
    assert saved['weights'].startswith('random initialisation')
    assert (tmp_path / 'out' / 'qk_distance_lf_tiny.png').stat().st_size > 1000


def grid_tokens(batch, tokens, heads):
    """``(B, N, heads·3)``: token i of image b, head h is
    ``(i + 1000·b + 10000·h, 0, 0)``, so two tokens of the same image and
    head are ``|i - j|`` apart in ℓ1, any other pair at least 960."""
    index = torch.arange(tokens, dtype=torch.float64)
    values = (index[None, :, None] + 1000 * torch.arange(batch)[:, None, None]
              + 10000 * torch.arange(heads)[None, None, :])
    out = torch.zeros(batch, tokens, heads, 3, dtype=torch.float64)
    out[..., 0] = values
    return out.reshape(batch, tokens, heads * 3)


def test_pairs_share_image_and_head_and_skip_self_pairs():
    sampler = tool.PairSampler(20000, torch.Generator().manual_seed(0))
    q = grid_tokens(2, 40, 3)
    sampler.add(0, q, q, num_heads=3)  # shared keys: k is q
    l1 = sampler.collect(10**6)[0]['l1']
    assert l1.min() >= 1 and l1.max() <= 39  # never i = j, never across
    # |i - j| over i != j uniform on 40 tokens has mean (40 + 1) / 3.
    assert l1.mean() == pytest.approx(41 / 3, abs=0.3)
    sq = sampler.collect(10**6)[0]['sq_l2']
    np.testing.assert_allclose(sq, l1**2, rtol=1e-6)


def test_sampled_median_matches_all_pairs():
    """Stage 1 of LaplacianFormer-T: the sampled ℓ1 median equals the
    median over every (query, key) pair of the projected tokens."""
    torch.manual_seed(0)
    model = tool.build_backbone('lf_tiny')
    sampler = tool.PairSampler(8192, torch.Generator().manual_seed(0))
    hooked = tool.attach_hooks(model, sampler)
    stage1 = model.get_submodule(
        next(n for n in hooked if tool.STAGE_RE.search(n).group(1) == '0'))
    captured = []
    stage1.q.register_forward_hook(lambda m, i, out: captured.append(out))
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 96))
    sampled = np.median(sampler.collect(10**6)[0]['l1'])
    q = captured[0][0]  # (N, C)
    heads = q.reshape(q.shape[0], stage1.num_heads, -1).transpose(0, 1)
    dist = torch.cdist(heads, heads, p=1)  # (h, N, N)
    off_diagonal = ~torch.eye(q.shape[0], dtype=torch.bool)
    exact = dist[:, off_diagonal].median().item()
    assert sampled == pytest.approx(exact, rel=0.04)


def test_tail_stats_of_a_half_normal():
    values = np.abs(np.random.default_rng(0).normal(size=400000))
    stats = tool.tail_stats(values)
    # Half-normal: p99/p50 = 2.576 / 0.674, excess kurtosis 0.869.
    assert abs(stats['p99_p50'] - 3.82) < 0.05
    assert abs(stats['excess_kurtosis'] - 0.869) < 0.05
