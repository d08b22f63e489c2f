"""Markdown tables for the reports of the analysis tools."""
from typing import Sequence


def markdown_table(header: Sequence[str],
                   rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table, without a trailing newline.

    Args:
        header (Sequence[str]): Column titles.
        rows (Sequence[Sequence[str]]): Formatted cells, one sequence per
            row.

    Returns:
        str: The header line, the separator line and one line per row.
    """
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
    return '\n'.join(lines)
