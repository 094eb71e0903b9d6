"""What a run shows while it trains: the logging window (mean loss and accuracy since the last log), the throughput
figure, and a progress bar that fits an 80-column terminal."""

from __future__ import annotations

import time
from typing import Protocol

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from lra.core.progress import console as default_console
from lra.core.progress import quiet
from lra.train import distributed as dist
from lra.train.trainer import StepStats


class TimedState(Protocol):
    step_time: float
    timed_steps: int


class Throughput:
    """Training steps per second of step time, over every logging window of this process after its first.

    A window runs from the end of the last other work (logging, evaluation, checkpointing) to the next log point,
    where reading the loss waits for the device, so evaluation and checkpoints are not counted. The first window of
    a process holds warm-up and compilation and is left out, unless the run ends in it. The totals live in `state`
    (a run's RunState: they survive a resume). The progress bar and the summary both show `rate`, so they agree.
    """

    def __init__(self, state: TimedState) -> None:
        self.state = state
        self.windows = 0
        self.last_rate = 0.0
        self.start = time.perf_counter()

    def restart(self) -> None:
        """A new window starts now (after work that is not training steps)."""
        self.start = time.perf_counter()

    def close(self, steps: int, *, final: bool) -> None:
        """The window of `steps` steps ends now; `final`: the run's last step is among them."""
        dt = time.perf_counter() - self.start
        self.last_rate = steps / dt if dt > 0 else 0.0
        if self.windows > 0 or final:
            self.state.step_time += dt
            self.state.timed_steps += steps
        self.windows += 1

    @property
    def rate(self) -> float:
        """Steps/s over the timed windows so far; the last window's rate while none is timed yet."""
        if self.state.step_time > 0:
            return self.state.timed_steps / self.state.step_time
        return self.last_rate


class Window:
    """Sums of loss, correct predictions and examples over the steps since the last log (on the device: no sync)."""

    def __init__(self, device: torch.device) -> None:
        self.sums = torch.zeros(3, dtype=torch.float64, device=device)
        self.steps = 0

    def add(self, stats: StepStats) -> None:
        self.sums[0] += stats.loss
        self.sums[1] += stats.correct
        self.sums[2] += stats.examples
        self.steps += 1

    def collect(self) -> tuple[float, float, int]:
        """(mean loss, accuracy, steps) over the window on all ranks; starts the next window."""
        totals = dist.all_reduce_sum(self.sums)
        steps = self.steps
        mean_loss = totals[0].item() / max(steps * dist.world_size(), 1)
        acc = totals[1].item() / max(totals[2].item(), 1.0)
        self.sums.zero_()
        self.steps = 0
        return mean_loss, acc, steps


def stats_text(loss: float, acc: float, rate: float) -> str:
    """The bar's figures: at most 36 characters for losses below 100 and rates below 1000 steps/s."""
    return f"loss {loss:.3f} acc {acc:.3f} {rate:.2f} steps/s"


def train_progress(*, disable: bool = False, console: Console | None = None) -> Progress:
    """The training bar: `train`, a short bar, steps done/total, time left and `stats_text` (fits 80 columns)."""
    return Progress(
        TextColumn("train"),
        BarColumn(bar_width=10),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[stats]}"),
        console=console or default_console,
        disable=disable or quiet(),
        transient=False,
    )
