"""benchmarks.time_breakdown: per-module forward time against input size."""
import json

import pytest

from benchmarks import time_breakdown as tool


def test_block_index_is_dropped():
    assert tool.group_name('stages.0.1.attn') == 'stages.0.attn'
    assert tool.group_name('stages.1.blocks.2.attn') == 'stages.1.blocks.attn'
    assert tool.group_name('stages.2.0') == 'stages.2'
    assert tool.group_name('stem.1') == 'stem.1'
    assert tool.group_name('norm3') == 'norm3'


def test_ratio_if_rest_linear():
    # Rest: (5 - 1) s growing 4x = 16 s; the part grows to 10 s: 26 / 5.
    assert tool.ratio_if_rest_linear(1., 10., 5., 4.) == pytest.approx(5.2)
    # A part that grows with the pixels leaves the ratio at the pixel ratio.
    assert tool.ratio_if_rest_linear(2., 8., 5., 4.) == pytest.approx(4.)


def test_parts_add_up_to_the_pass(tmp_path, capsys):
    results = tool.main([
        'lf_tiny', '--sizes', '64x64', '96x80', '--repeat', '1', '--warmup',
        '0', '--threads', '1', '--out-dir', str(tmp_path)
    ])
    assert [r['size'] for r in results] == [[64, 64], [96, 80]]
    for result in results:
        parts = result['parts']
        # Own times: the parts never exceed the pass, and hooks cost little.
        assert 0.7 * result['total'] < sum(parts.values()) <= result['total']
        # A module that calls no child (BN folded into a conv in CPU
        # inference) still has its time counted.
        assert parts['stages.1.downsample'] > 0
        assert parts['stages.0.blocks.attn'] > 0
        assert not any('blocks.0' in name for name in parts)
    out = capsys.readouterr().out
    assert '| stages.0.blocks.attn |' in out and '| total |' in out
    saved = json.loads((tmp_path / 'breakdown.json').read_text())
    assert saved['results'] == results
    for name in ('breakdown.md', 'breakdown.png'):
        assert (tmp_path / name).stat().st_size > 0
