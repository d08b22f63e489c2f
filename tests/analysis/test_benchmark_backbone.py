"""benchmark_backbone.py: one tiny case per model, each in a subprocess."""
import pytest


def test_tiny_case(load_tool, tmp_path, capsys):
    tool = load_tool('benchmark_backbone')
    results = tool.main([
        '--models', 'lf_tiny', 'resnet50', '--sizes', '64x64', '--modes',
        'fwd', '--devices', 'cpu', '--repeat', '1', '--warmup', '0',
        '--threads', '1', '--out-dir', str(tmp_path)
    ])
    out = capsys.readouterr().out
    assert [r['status'] for r in results] == ['ok', 'ok'], results
    assert 'LaplacianFormer-T' in out and 'ResNet-50' in out
    assert all(r['seconds'] > 0 and r['peak_mb'] > 0 for r in results)
    for name in ('results.json', 'benchmark.md', 'time.png', 'memory.png'):
        assert (tmp_path / name).stat().st_size > 0


def test_failing_case_is_reported_not_raised(load_tool):
    tool = load_tool('benchmark_backbone')
    spec = dict(model='lf_tiny', size=[64, 64], mode='fwd', device='cpu',
                threads=1, repeat=1, warmup=0, case_budget=1., profile=False)
    result = tool.launch(spec, timeout=0.01)
    assert result['status'] == 'timeout'


def test_allocators_run_side_by_side(load_tool, tmp_path, capsys):
    tool = load_tool('benchmark_backbone')
    results = tool.main([
        '--models', 'lf_tiny', '--sizes', '64x64', '--modes', 'fwd',
        '--devices', 'cpu', '--repeat', '1', '--warmup', '0', '--threads',
        '1', '--allocators', 'default,no-mmap', '--out-dir', str(tmp_path)
    ])
    assert [(r['allocator'], r['status']) for r in results] == [
        ('default', 'ok'), ('no-mmap', 'ok')]
    out = capsys.readouterr().out
    assert 'LaplacianFormer-T [no-mmap]' in out
    assert tool.series_label(dict(model='lf_tiny')) == 'LaplacianFormer-T'


def test_unknown_allocator_is_refused(load_tool, capsys):
    tool = load_tool('benchmark_backbone')
    with pytest.raises(SystemExit):
        tool.parse_args(['--allocators', 'jemalloc'])
    assert "unknown allocators ['jemalloc']" in capsys.readouterr().err
