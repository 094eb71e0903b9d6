"""The live board of a sweep: one row per run (state, step, validation accuracy, ETA), read from each run's
`metrics.jsonl` (one line per evaluation: step, val_acc, time = training seconds so far); and the same progress as
plain lines (`LineLog`) for output that is not a terminal, such as a log file of a sweep started with nohup."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from lra.sweep.grid import Run
from lra.sweep.local_pool import FINAL
from lra.train.rundir import METRICS


@dataclass
class Progress:
    """What a run's metrics say: the last evaluated step, its and the best validation accuracy, steps/s."""

    step: int = 0
    val_acc: float | None = None
    best_acc: float | None = None
    rate: float | None = None  # training steps per second between the last two evaluations


def read_progress(run_dir: Path) -> Progress:
    """The progress recorded in `run_dir` (nothing yet: step 0)."""
    try:
        lines = (run_dir / METRICS).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return Progress()
    rows = [json.loads(line) for line in lines if line.strip()]
    if not rows:
        return Progress()
    last = rows[-1]
    accs = [r["val_acc"] for r in rows if r.get("val_acc") is not None]
    prev = rows[-2] if len(rows) > 1 else {"step": 0, "time": 0.0}
    dt = (last.get("time") or 0.0) - (prev.get("time") or 0.0)
    rate = (last["step"] - prev["step"]) / dt if dt > 0 else None
    return Progress(last["step"], last.get("val_acc"), max(accs) if accs else None, rate)


@dataclass
class Row:
    state: str = "pending"
    where: str = ""
    progress: Progress = field(default_factory=Progress)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def _state(row: Row) -> str:
    return f"{row.state} ({row.where})" if row.where else row.state


def _eta(run: Run, row: Row) -> str:
    p = row.progress
    if row.state in FINAL or not p.rate:
        return ""
    seconds = max(0, int((run.steps - p.step) / p.rate))
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds < 86400 else f"{seconds / 86400:.1f} d"


class Board:
    """Each run's state as the executor reports it (`set`) and the table of all of them (`render`)."""

    def __init__(self, runs: list[Run], title: str) -> None:
        self.runs, self.title = runs, title
        self.rows = {run.name: Row() for run in runs}
        self.started = time.monotonic()

    def set(self, run: Run, state: str, where: str) -> None:
        row = self.rows[run.name]
        row.state, row.where = state, where

    def counts(self) -> Counter:
        return Counter(row.state for row in self.rows.values())

    def steps_left(self) -> int:
        """Training steps the runs still have to take (a done run none): what a sweep carried over several
        sessions still costs, to budget the next ones."""
        left = 0
        for run in self.runs:
            row = self.rows[run.name]
            if row.state != "done":
                left += max(0, run.steps - row.progress.step)
        return left

    def refresh(self) -> None:
        """Re-read the progress of every run not settled yet."""
        for run in self.runs:
            row = self.rows[run.name]
            if row.state not in ("done", "skipped") or row.progress.step == 0:
                row.progress = read_progress(run.run_dir)

    def render(self) -> Table:
        counts = self.counts()
        elapsed = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - self.started))
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        steps = f"{self.steps_left():,} of {sum(run.steps for run in self.runs):,} steps left"
        table = Table(title=self.title, caption=f"{len(self.runs)} runs: {summary}; {steps}; {elapsed} elapsed")
        table.add_column("run", no_wrap=True)
        table.add_column("state")
        for col in ("step", "val acc %", "best %", "ETA"):
            table.add_column(col, justify="right")
        for run in self.runs:
            row = self.rows[run.name]
            p = row.progress
            step = f"{p.step:,}/{run.steps:,}"
            table.add_row(run.name, _state(row), step, _pct(p.val_acc), _pct(p.best_acc), _eta(run, row))
        return table


LOG_EVERY_S = 60.0  # a running run's progress line at most this often in a log


class LineLog:
    """A board's changes as plain lines: one when a run changes state, and while a run's step moves, at most one
    per `every_s` seconds. A live table draws nothing into a file, so a sweep logging to one shows this instead."""

    def __init__(
        self, board: Board, *, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.board, self.every_s, self.clock = board, every_s, clock
        self.seen: dict[str, tuple[str, int, float]] = {}  # run name -> (state, step, time) of its last line

    def lines(self) -> list[str]:
        """The lines due now (call after `board.refresh()`)."""
        now, due = self.clock(), []
        for run in self.board.runs:
            row = self.board.rows[run.name]
            last = self.seen.get(run.name)
            if last is None:
                news = not row.state.startswith("pending")  # a run still waiting is not news
            else:
                moved = row.progress.step != last[1] and now - last[2] >= self.every_s
                news = row.state != last[0] or moved
            if last is None or news:
                self.seen[run.name] = (row.state, row.progress.step, now)
            if news:
                due.append(self._line(run, row))
        return due

    @staticmethod
    def _line(run: Run, row: Row) -> str:
        p = row.progress
        parts = [f"{run.name}: {_state(row)}", f"step {p.step:,}/{run.steps:,}"]
        if p.val_acc is not None:
            parts.append(f"val {_pct(p.val_acc)}% (best {_pct(p.best_acc)}%)")
        eta = _eta(run, row)
        if eta:
            parts.append(f"ETA {eta}")
        return f"{time.strftime('%H:%M:%S')} " + ", ".join(parts)
