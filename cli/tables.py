"""Terminal tables that never cut a value or a header, however narrow the terminal, and never
break a word when the output goes to a file or a pipe.

Rich's default overflow is an ellipsis: a group label or a number can lose its end on an 80-column
terminal. Here every cell folds instead of being cut, and a table too wide for the terminal is
split into several, each repeating the key columns, so numbers stay whole on one line. Written to
a log (``initmem sweep ... > log``), where no one resizes a window, the console is as wide as
the widest table needs (``output_console``): rich's default of 80 columns would fold a group's
label mid-word ("opt=adam,l" / "r=0.001"). ``COLUMNS`` set by hand still wins. A table of prose
(the presets' and plugins' descriptions), whose columns stretch to the console's width, is printed
to a file or a pipe at ``READABLE_WIDTH`` instead (``prose_console``): its sentences wrap where a
reader reads them, rather than every row padded to a thousand characters.
"""

from __future__ import annotations

import os

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

BORDER = 3  # a column's padding and rule in rich's default box
#: A header's words are kept whole up to this length when room is short (the values' words first)
HEADER_WORD = 6
#: The narrowest a column with long words gets before the others fold theirs too
FOLDED = 10
#: The width of a console that is not a terminal: wide enough that no table of ours wraps
LOG_WIDTH = 1000
#: The width of a table of prose that is not on a terminal: its descriptions wrap at a readable width
READABLE_WIDTH = 120


def output_console(stderr: bool = False, **options) -> Console:
    """A rich console on stdout (or stderr): the terminal's width on a terminal, else ``LOG_WIDTH``
    (unless ``COLUMNS`` says otherwise), so that a table piped to a file keeps every word whole."""
    console = Console(stderr=stderr, **options)
    if not console.is_terminal and "width" not in options and not os.environ.get("COLUMNS"):
        console.width = LOG_WIDTH
    return console


def prose_console(stderr: bool = False, **options) -> Console:
    """A rich console for tables whose cells are prose and whose columns stretch (``ratio``,
    ``expand``): the terminal's width on a terminal, else ``READABLE_WIDTH`` (unless ``COLUMNS``
    says otherwise), so that a description piped to a file wraps between words at a width a person
    reads instead of padding each row to ``LOG_WIDTH``."""
    console = Console(stderr=stderr, **options)
    if not console.is_terminal and "width" not in options and not os.environ.get("COLUMNS"):
        console.width = READABLE_WIDTH
    return console


def longest_word(texts: list[str]) -> int:
    return max((cell_len(word) for text in texts for word in text.split()), default=1)


def word_widths(headers: list[str], rows: list[list[str]], width: int) -> list[int] | None:
    """Column widths (text only, no padding) for a table on ``width`` columns that breaks no word:
    each column gets at least its longest word and the room left goes to the columns that wrap
    most, in proportion to what they lack. Where even the longest words do not fit, the columns
    with the longest words give way first (down to ``FOLDED``), and only they fold a word. ``None``
    when the table fits as it is (rich lays it out) or is beyond help (rich folds everything)."""
    columns = range(len(headers))
    natural = [max([cell_len(headers[i]), *(cell_len(r[i]) for r in rows)]) for i in columns]
    # A value's words before a header's: a header is read once, a label or a number in every row.
    least = [max(longest_word([r[i] for r in rows]), min(longest_word([headers[i]]), HEADER_WORD)) for i in columns]
    room = width - BORDER * len(headers) - 1
    if sum(natural) <= room:
        return None
    for i in sorted(columns, key=least.__getitem__, reverse=True):
        excess = sum(least) - room
        if excess <= 0:
            break
        least[i] -= min(excess, max(0, least[i] - FOLDED))
    if sum(least) > room:
        return None
    spare, lacking = room - sum(least), [n - m for n, m in zip(natural, least)]
    widths = [m + spare * lack // sum(lacking) for m, lack in zip(least, lacking)]
    return widths


def one_table(
    title: str,
    headers: list[str],
    rows: list[list[str]],
    width: int | None,
    right: tuple[int, ...] = (),
    caption: str | None = None,
) -> Table:
    """``rows`` as a single table, however narrow ``width`` (``None``: the console's, unknown
    here): cells wrap between words and no word is broken while the terminal has room for the
    longest, so that a claim never sits apart from its verdict, nor a label breaks mid-word."""
    widths = word_widths(headers, rows, width) if width else None
    table = Table(title=title, caption=caption)
    for i, header in enumerate(headers):
        table.add_column(
            header,
            justify="right" if i in right else "left",
            overflow="fold",  # never an ellipsis: only when no room is left for a whole word
            width=widths[i] if widths else None,
        )
    for row in rows:
        table.add_row(*row)
    return table


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
