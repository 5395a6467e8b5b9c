"""Terminal tables that never cut a value or a header, however narrow the terminal.

Rich's default overflow is an ellipsis: a group label or a number can lose its end on an 80-column
terminal. Here every cell folds instead of being cut, and a table too wide for the terminal is
split into several, each repeating the key columns, so numbers stay whole on one line.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.table import Table

BORDER = 3  # a column's padding and rule in rich's default box


def column_width(header: str, values: list[str]) -> int:
    """The width a column needs: its longest value, or its header wrapped onto two lines."""
    words = header.split()
    lines = min(
        (max(cell_len(" ".join(words[:i])), cell_len(" ".join(words[i:]))) for i in range(1, len(words))),
        default=cell_len(header),
    )
    return max([lines, *(cell_len(v) for v in values)]) + BORDER


def fitted_tables(
    title: str, headers: list[str], rows: list[list[str]], width: int, keys: int = 1, right: tuple[int, ...] = ()
) -> list[Table]:
    """``rows`` under ``headers`` as one table if it fits ``width``, else as several: each holds
    the first ``keys`` columns and as many of the others as fit. ``right``: right-aligned column indexes."""
    widths = [column_width(h, [r[i] for r in rows]) for i, h in enumerate(headers)]
    key_width = sum(widths[:keys]) + 1
    chunks: list[list[int]] = [[]]
    for i in range(keys, len(headers)):
        if chunks[-1] and key_width + sum(widths[j] for j in chunks[-1]) + widths[i] > width:
            chunks.append([])
        chunks[-1].append(i)
    tables = []
    for number, chunk in enumerate(chunks):
        table = Table(title=title if number == 0 else f"{title} (continued)")
        for i in [*range(keys), *chunk]:
            # Fixed widths: left to itself rich squeezes a number to fit a header on one line.
            table.add_column(
                headers[i],
                justify="right" if i in right else "left",
                overflow="fold",
                width=min(widths[i], width - 1) - BORDER,
            )
        for row in rows:
            table.add_row(*(row[i] for i in [*range(keys), *chunk]))
        tables.append(table)
    return tables
