"""benchmarks.runtime_speed: every runtime timed side by side, its memory
in a process of its own, the ExecuTorch program profiled, and a runtime
that fails to export reported while the others go on."""
import pytest

pytest.importorskip('onnxruntime')
pytest.importorskip('executorch')

from benchmarks import runtime_speed as tool  # noqa: E402


def table_rows(text: str) -> dict:
    """``{first cell: other cells}`` of a markdown table's body."""
    rows = [line.strip('|').split('|') for line in text.splitlines()
            if line.startswith('| ')]
    return {cells[0].strip(): [c.strip() for c in cells[1:]]
            for cells in rows[1:]}


def test_backbone_in_four_runtimes_with_a_failed_int8(tmp_path, capsys,
                                                      monkeypatch):
    # int8 needs calibration images: from a folder that does not exist it
    # fails to export, which the table reports.
    status = tool.main([
        '--models', 'backbone', '--shapes', '64x64', '--runtimes', 'eager',
        'onnxruntime-fp32', 'onnxruntime-int8', 'executorch-fp32',
        'executorch-operator-fp32', '--passes', '2', '--threads', '1',
        '--calibration-images',
        str(tmp_path / 'no_images'), '--work-dir', str(tmp_path)
    ])
    assert status == 0
    assert 'onnxruntime-int8 failed to export' in capsys.readouterr().out
    assert (tmp_path / 'backbone_64x64.fp32.onnx').is_file()
    assert (tmp_path / 'backbone_64x64.fp32.pte').is_file()
    assert (tmp_path / 'backbone_64x64.fp32.operator.pte').is_file()
    speed, profile = (tmp_path / 'runtime_speed.md').read_text().split(
        '\n\n**')
    assert speed.startswith('**LaplacianFormer-T backbone, 64x64, 1 threads')
    rows = table_rows(speed)
    for runtime in ('eager', 'onnxruntime-fp32', 'executorch-fp32',
                    'executorch-operator-fp32'):
        ms, _, peak = rows[runtime]
        assert float(ms) > 0 and float(peak) > 0, runtime
    assert rows['eager'][1] == '1.00'
    assert rows['onnxruntime-int8'][0].startswith(
        'fails to export (FileNotFoundError')
    # ExecuTorch's profiler: the program's time split between XNNPACK (no
    # int8 kernel in a float program) and the portable kernels, then the
    # slowest XNNPACK kernels.
    title, split, kernels = profile.split('\n\n')
    assert 'ExecuTorch profiler, 1 threads' in title
    execute, xnnpack, int8, portable, share = table_rows(
        split)['executorch-fp32'][:5]
    assert float(xnnpack) + float(portable) <= float(execute) * 1.01
    assert float(int8) == 0 and share.endswith('%')
    # No kernel of ours in the standard-operator program; the operator
    # program's calls of it timed apart from the portable kernels.
    assert table_rows(split)['executorch-fp32'][5] == '—'
    assert float(table_rows(split)['executorch-operator-fp32'][5]) > 0
    assert 'F32' in table_rows(kernels)['executorch-fp32'][0]

    # With every program in place, a second run builds no model.
    def build_model(name):
        raise AssertionError(f'{name} built again')

    monkeypatch.setattr(tool, 'build_model', build_model)
    made = ['onnxruntime-fp32', 'executorch-fp32', 'executorch-operator-fp32']
    paths, failures = tool.export_all('backbone', (64, 64), made,
                                      str(tmp_path), str(tmp_path / 'none'))
    assert not failures and sorted(paths) == sorted(made)


def test_shape_must_be_multiple_of_32():
    with pytest.raises(SystemExit):
        tool.parse_args(['--shapes', '100x64'])
