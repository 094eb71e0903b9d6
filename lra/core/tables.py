"""Rich tables that fit the terminal without cutting a name or a number: columns that say the same in every row
move to the title, then optional columns are dropped (the least useful first) until the rest fits; only long text
(statuses, lists of peers) wraps, at spaces. `wide=True` keeps every column (for a wide terminal, or a file)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

MIN_WRAP = 12  # the narrowest a wrapping column gets before columns are dropped for it


@dataclass(frozen=True)
class Column:
    """A column: its header, justification, whether its text may wrap, and when it is dropped to fit (0: never;
    else higher goes first)."""

    header: str
    justify: str = "left"
    wrap: bool = False
    drop: int = 0


def fitted_table(
    title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], *, width: int, wide: bool = False
) -> Table:
    """The table of `rows` (one text per column) fitted into `width` columns, or all of it (`wide`)."""
    keep = list(range(len(columns)))
    notes = []
    if not wide:
        for i, col in enumerate(columns):
            values = {row[i] for row in rows}
            if col.drop and len(values) == 1 and len(rows) > 1:
                keep.remove(i)
                if values != {"-"}:
                    notes.append(f"{col.header} {values.pop()}")
        while _width(columns, rows, keep) > width and any(columns[i].drop for i in keep):
            keep.remove(max((i for i in keep if columns[i].drop), key=lambda i: columns[i].drop))
    table = Table(title=title + (f" ({', '.join(notes)})" if notes else ""))
    for i in keep:
        col = columns[i]
        table.add_column(col.header, justify=col.justify, no_wrap=not col.wrap, overflow="fold" if col.wrap else None)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def print_table(console: Console, table: Table, *, wide: bool = False) -> None:
    """Print `table`; `wide`: at its full width even where that is wider than the console (lines may then wrap)."""
    if not wide:
        console.print(table)
        return
    full = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
    wider = Console(file=console.file, width=max(full, console.width), force_terminal=console.is_terminal)
    wider.print(table, crop=False)


def _width(columns: Sequence[Column], rows: Sequence[Sequence[str]], keep: list[int]) -> int:
    """The characters a table of the `keep` columns takes per line (borders and padding included); wrapping columns
    count at their narrowest."""
    total = 1
    for i in keep:
        texts = [columns[i].header, *(Text.from_markup(row[i]).plain for row in rows)]
        longest = max(len(t) for t in texts)
        if columns[i].wrap:
            longest = min(longest, max(MIN_WRAP, *(len(w) for t in texts for w in t.split())))
        total += longest + 3
    return total
