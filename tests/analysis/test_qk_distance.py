"""qk_distance.py on two generated images: statistics per stage."""
import json

import numpy as np


def write_images(folder, count=2):
    import cv2
    rng = np.random.default_rng(0)
    for index in range(count):
        img = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
        cv2.circle(img, (40, 50), 20, (255, 0, 0), -1)
        cv2.imwrite(str(folder / f'{index}.png'), img)


def test_lf_tiny_random_weights(load_tool, tmp_path, capsys):
    images = tmp_path / 'images'
    images.mkdir()
    write_images(images)
    tool = load_tool('qk_distance')
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
    for per_stage in report['stats'].values():
        for stats in per_stage.values():
            assert stats['p99_p50'] >= 1 and np.isfinite(
                stats['excess_kurtosis'])
    saved = json.loads((tmp_path / 'out' / 'qk_distance_lf_tiny.json')
                       .read_text())
    assert saved['weights'].startswith('random initialisation')
    assert (tmp_path / 'out' / 'qk_distance_lf_tiny.png').stat().st_size > 1000


def test_tail_stats_of_a_half_normal(load_tool):
    tool = load_tool('qk_distance')
    values = np.abs(np.random.default_rng(0).normal(size=400000))
    stats = tool.tail_stats(values)
    # Half-normal: p99/p50 = 2.576 / 0.674, excess kurtosis 0.869.
    assert abs(stats['p99_p50'] - 3.82) < 0.05
    assert abs(stats['excess_kurtosis'] - 0.869) < 0.05
