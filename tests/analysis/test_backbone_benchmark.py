"""benchmarks.backbone: one tiny case per model, each in a subprocess."""
import pytest

from benchmarks import backbone as tool


def params_m(tool, model):
    built = tool.build_backbone(model)
    return sum(p.numel() for p in built.parameters()) / 1e6


def test_small_cases(tmp_path, capsys):
    results = tool.main([
        '--models', 'resnet50', '--sizes', '64x64', '256x256', '--modes',
        'fwd', '--device', 'cpu', '--repeat', '2', '--warmup', '1',
        '--threads', '1', '--out-dir', str(tmp_path)
    ])
    out = capsys.readouterr().out
    assert [r['status'] for r in results] == ['ok'] * 2, results
    assert 'ResNet-50' in out
    small, large = sorted(results, key=lambda r: r['size'][0])
    # The case ran the model it names: its parameters are that backbone's.
    assert small['params_m'] == pytest.approx(params_m(tool, 'resnet50'))
    assert len(small['times']) == 2
    # 16x the arithmetic at 256x256 (fixed per-layer costs weigh at 64x64):
    # one thread's CPU time grows by more than any disturbance explains.
    assert large['cpu_seconds'] > 2.5 * small['cpu_seconds'], results
    for name in ('results.json', 'benchmark.md', 'time.png', 'memory.png'):
        assert (tmp_path / name).stat().st_size > 0


def test_failing_case_is_reported_not_raised():
    spec = dict(model='lf_tiny', size=[64, 64], mode='fwd', device='cpu',
                threads=1, repeat=1, warmup=0, case_budget=1., profile=False)
    result = tool.launch(spec, timeout=0.01)
    assert result['status'] == 'timeout'


def test_allocators_run_side_by_side(tmp_path, capsys):
    results = tool.main([
        '--models', 'lf_tiny', '--sizes', '64x64', '--modes', 'fwd',
        '--devices', 'cpu', '--repeat', '1', '--warmup', '0', '--threads',
        '1', '--allocators', 'default,no-mmap,huge-pages', '--out-dir',
        str(tmp_path)
    ])
    assert [(r['allocator'], r['status']) for r in results] == [
        ('default', 'ok'), ('no-mmap', 'ok'), ('huge-pages', 'ok')]
    assert results[0]['params_m'] == pytest.approx(params_m(tool, 'lf_tiny'))
    out = capsys.readouterr().out
    assert 'LaplacianFormer-T [no-mmap]' in out
    assert tool.series_label(dict(model='lf_tiny')) == 'LaplacianFormer-T'


def test_each_allocator_unsets_the_others_variables():
    names = {name for env in tool.ALLOCATOR_ENV.values() for name in env}
    assert {'MALLOC_MMAP_THRESHOLD_', 'THP_MEM_ALLOC_ENABLE'} <= names
    for allocator, env in tool.ALLOCATOR_ENV.items():
        assert set(env) == names, allocator
    assert all(v is None for v in tool.ALLOCATOR_ENV['default'].values())
    assert tool.ALLOCATOR_ENV['huge-pages']['THP_MEM_ALLOC_ENABLE'] == '1'
    assert tool.ALLOCATOR_ENV['huge-pages']['MALLOC_MMAP_THRESHOLD_'] is None


def test_unknown_allocator_is_refused(capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(['--allocators', 'jemalloc'])
    assert "unknown allocators ['jemalloc']" in capsys.readouterr().err
