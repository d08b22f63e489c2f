"""Markdown tables for the reports of the analysis tools."""
from typing import Optional, Sequence


def markdown_table(header: Sequence[str],
                   rows: Sequence[Sequence[str]],
                   align: Optional[str] = None) -> str:
    """A GitHub-flavoured markdown table, without a trailing newline.

    Args:
        header (Sequence[str]): Column titles.
        rows (Sequence[Sequence[str]]): Formatted cells, one sequence per
            row.
        align (str, optional): One letter per column, ``'l'`` or ``'r'``
            (right-aligned, for numbers). Defaults to the renderer's
            default (left).

    Returns:
        str: The header line, the separator line and one line per row.

    Raises:
        ValueError: A row or ``align`` of another length than ``header``.
    """
    if align is not None and (len(align) != len(header)
                              or set(align) - set('lr')):
        raise ValueError(f'align must be one l or r per column '
                         f'({len(header)}), got {align!r}')
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f'row {list(row)} has {len(row)} cells, the '
                             f'header {len(header)}')
    separator = ['---:' if a == 'r' else '---' for a in align or
                 'l' * len(header)]
    lines = ['| ' + ' | '.join(header) + ' |',
             '|' + '|'.join(separator) + '|']
    lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
    return '\n'.join(lines)
