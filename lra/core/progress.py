"""Rich progress bars for long work (data generation, training, benchmarks); quiet when LRA_QUIET=1."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
console = Console(stderr=True)  # progress and messages
out = Console()  # results: tables a user may pipe or redirect


def quiet() -> bool:
    return os.environ.get("LRA_QUIET", "0") not in ("", "0")


def progress_line(text: str) -> None:
    """`text` as a line of its own where no live progress bar shows (output to a file or a pipe, which a bar only
    reaches at its end), so long work says what it has done; nothing on a terminal or when quiet."""
    if not console.is_terminal and not quiet():
        console.print(text, highlight=False, markup=False, soft_wrap=True)


def make_progress(*extra_columns: TextColumn, disable: bool = False) -> Progress:
    """A progress display with bar, count, elapsed and remaining time, plus `extra_columns` (off when `disable`)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        *extra_columns,
        console=console,
        disable=disable or quiet(),
        transient=False,
    )


def track(items: Iterable[T], total: int | None = None, description: str = "working") -> Iterator[T]:
    """Iterate over `items` with a progress bar."""
    with make_progress() as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
