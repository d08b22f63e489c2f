"""benchmarks.executorch_blocks: the Laplacian kernel lowered to XNNPACK
once per feature sum and row-block budget, checked against eager, timed and
tabled."""
import pytest

pytest.importorskip('executorch')

from benchmarks import executorch_blocks as tool  # noqa: E402
from mmlaplacian.deployment.executorch_export import (  # noqa: E402
    XNNPACK_BLOCK_ELEMENTS, XNNPACK_FEATURE_SUM)

DEFAULT = f'{XNNPACK_FEATURE_SUM} (default)'


def _table(out):
    """``{(feature sum cell, budget cell): other cells}`` of the printed
    table."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if line.startswith('|') and len(cells) > 1 and cells[1][:1].isdigit():
            rows[cells[0], cells[1]] = cells[2:]
    return rows


def _run(tmp_path, capsys, *extra):
    # Stage 3 at 64x64: 16 tokens of 10 heads x 49 landmarks x 32
    # features, 15,680 elements per token: a 16,000 budget takes one
    # token per block, the default all 16 at once.
    status = tool.main([
        '--size', '64x64', '--stage', '3', '--passes', '1', '--threads',
        '1', '--work-dir',
        str(tmp_path), *extra
    ])
    out = capsys.readouterr().out
    assert status == 0, out
    return _table(out), out


def test_budgets_are_lowered_timed_and_tabled(tmp_path, capsys):
    rows, out = _run(tmp_path, capsys, '--budgets', '16000')
    default = (DEFAULT, f'{XNNPACK_BLOCK_ELEMENTS:,}')
    small = (XNNPACK_FEATURE_SUM, '16,000')
    assert set(rows) == {small, default}, out
    assert rows[small][1] == '16' and rows[default][1] == '1'
    assert rows[default][-1] == '1.00'
    assert float(rows[small][3]) > 0
    assert {p.name for p in tmp_path.glob('*.pte')} == {
        f'kernel_{XNNPACK_FEATURE_SUM}_{XNNPACK_BLOCK_ELEMENTS}.pte',
        f'kernel_{XNNPACK_FEATURE_SUM}_16000.pte'
    }


def test_feature_sums_are_compared_with_the_default(tmp_path, capsys):
    """Each feature sum is lowered, checked against eager (the tool fails
    otherwise) and timed against the export's default."""
    rows, out = _run(tmp_path, capsys, '--budgets',
                     str(XNNPACK_BLOCK_ELEMENTS), '--feature-sums', 'matmul',
                     'reduce')
    budget = f'{XNNPACK_BLOCK_ELEMENTS:,}'
    assert set(rows) == {('matmul', budget), ('reduce', budget),
                         (DEFAULT, budget)}, out
    assert rows[DEFAULT, budget][-1] == '1.00'
    assert 'largest difference from eager' in out


def test_budgets_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(['--budgets', '1024', '0'])
    assert '--budgets must be positive' in capsys.readouterr().err


def test_unknown_feature_sum_is_refused(capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(['--feature-sums', 'einsum'])
    assert 'einsum' in capsys.readouterr().err
