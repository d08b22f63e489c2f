"""benchmarks.forms: the plain path and the chunked attention side by side,
at one small size, timed in one subprocess and measured in one per row."""
from mmlaplacian.models.layers.laplacian_attention import DEFAULT_CHUNK_TOKENS

from benchmarks import forms as tool

# Stage 1 of a 192x256 image holds 48 x 64 = 3072 tokens, more than one
# chunk: 'auto' takes the chunked form there, not the plain path.
HEIGHT, WIDTH = 192, 256


def cells_by_setting(table: str) -> dict:
    """Setting -> {column: cell} of the markdown table's rows."""
    lines = [line for line in table.splitlines() if line.startswith('|')]
    header = [c.strip() for c in lines[0].strip('|').split('|')]
    rows = [dict(zip(header, (c.strip() for c in line.strip('|').split('|'))))
            for line in lines[2:]]
    return {row['setting']: row for row in rows}


def test_table_sets_the_chunked_form_against_the_plain_path(capsys):
    assert (HEIGHT // 4) * (WIDTH // 4) > DEFAULT_CHUNK_TOKENS
    rows = tool.main([
        '--sizes', f'{HEIGHT}x{WIDTH}', '--repeat', '1', '--warmup', '0',
        '--threads', '1'
    ])
    table = capsys.readouterr().out
    assert [r['setting'] for r in rows] == list(tool.SETTINGS)
    measured = {r['setting']: r for r in rows}
    plain = measured[tool.PLAIN]
    cells = cells_by_setting(table)
    assert sorted(cells) == sorted(tool.SETTINGS)
    for setting, row in measured.items():
        # One thread is always busy: one pass per setting, in one round.
        assert len(row['times']) == 1 and row['seconds'] > 0, row
        assert row['delta_mb'] > 0, row
        cell = cells[setting]
        assert cell['size'] == f'{HEIGHT}×{WIDTH}'
        assert cell['busy passes'] == '1/1'
        assert cell['time s'] == f'{row["seconds"]:.2f}'
        assert cell['time ×'] == f'{row["seconds"] / plain["seconds"]:.2f}'
        assert cell['Δpeak MB'] == f'{row["delta_mb"]:.0f}'
        assert cell['Δpeak ×'] == f'{row["delta_mb"] / plain["delta_mb"]:.2f}'
    assert cells[tool.PLAIN]['time ×'] == cells[tool.PLAIN]['Δpeak ×'] == \
        '1.00'
    assert cells[tool.PLAIN]['pays?'] == '—'
    summary = table.rstrip().splitlines()[-1]
    assert summary.startswith('Forms that pay at some size: ')
    for setting in set(tool.SETTINGS) - {tool.PLAIN}:
        row = measured[setting]
        saving = 1 - min(row['seconds'] / plain['seconds'],
                         row['delta_mb'] / plain['delta_mb'])
        assert cells[setting]['pays?'] == ('yes' if saving >= 0.1 else 'no')
        assert (setting in summary) == (saving >= 0.1)
