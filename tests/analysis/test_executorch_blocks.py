"""benchmarks.executorch_blocks: the Laplacian kernel lowered to XNNPACK
once per row-block budget, checked against eager, timed and tabled."""
import pytest

pytest.importorskip('executorch')

from benchmarks import executorch_blocks as tool  # noqa: E402
from mmlaplacian.deployment.executorch_export import \
    XNNPACK_BLOCK_ELEMENTS  # noqa: E402


def _table(out):
    """``{budget cell: other cells}`` of the printed table."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if line.startswith('|') and cells[0][:1].isdigit():
            rows[cells[0]] = cells[1:]
    return rows


def test_budgets_are_lowered_timed_and_tabled(tmp_path, capsys):
    # Stage 3 at 64x64: 16 tokens of 10 heads x 49 landmarks x 32
    # features, 15,680 elements per token: a 16,000 budget takes one
    # token per block, the default all 16 at once.
    status = tool.main([
        '--size', '64x64', '--stage', '3', '--budgets', '16000',
        '--passes', '1', '--threads', '1', '--work-dir',
        str(tmp_path)
    ])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = _table(out)
    default = f'{XNNPACK_BLOCK_ELEMENTS:,} (default)'
    assert set(rows) == {'16,000', default}, out
    assert rows['16,000'][1] == '16' and rows[default][1] == '1'
    assert rows[default][-1] == '1.00'
    assert float(rows['16,000'][3]) > 0
    assert {p.name for p in tmp_path.glob('*.pte')} == {
        f'kernel_{XNNPACK_BLOCK_ELEMENTS}.pte', 'kernel_16000.pte'
    }


def test_budgets_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(['--budgets', '1024', '0'])
    assert '--budgets must be positive' in capsys.readouterr().err
