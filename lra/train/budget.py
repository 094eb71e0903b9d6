"""A wall-clock budget for one command (`--time-limit 25m`): train until it is nearly spent, then stop cleanly.

A run on a lent machine (30 device minutes, 10 per command) cannot finish Path-X in one go, so `train()` takes a
`TimeBudget`: at every logging point it asks `Pacer.fits` whether the stretch to the next logging point (its steps,
the evaluation, the final test and a checkpoint that may come with it) still fits. When it does not, the run writes
its full state (`last.pt`) and returns; `--resume` continues it exactly. Stopping only at logging points keeps the
logged training loss of every window whole, so a resumed run's history equals an uninterrupted one's. No RNG state
needs saving: the batches of step s and its dropout masks are functions of (seed, s) (lra.train.batches, trainer).

The clock is injectable (tests step a fake one); the budget counts from its creation, so a command that creates it
first counts its data preparation and compilation too.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lra.core.errors import ConfigError

Clock = Callable[[], float]
SAFETY = 1.25  # estimated durations are stretched by this much
_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """'25m' -> 1500.0; '90s', '1.5h', '1h30m', '600' (seconds) too; anything else is a ConfigError."""
    spec = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", spec):
        seconds = float(spec)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", spec)
        if not parts or "".join(n + u for n, u in parts) != spec:
            raise ConfigError(f"--time-limit {text!r} is not a duration; use e.g. 25m, 90s, 1h30m or seconds (600)")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError(f"--time-limit {text!r} must be more than zero")
    return seconds


def format_duration(seconds: float) -> str:
    """1500 -> '25m', 5430 -> '1h30m30s', 42.5 -> '42s'."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s or not (h or m) else "")
    return out


@dataclass
class TimeBudget:
    """`limit_s` seconds of wall clock from `start` (default: now on `clock`)."""

    limit_s: float
    clock: Clock = time.monotonic
    start: float = field(default=math.nan)

    def __post_init__(self) -> None:
        if math.isnan(self.start):
            self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return self.limit_s - self.elapsed()

    def margin(self) -> float:
        """Seconds kept free at the end for leaving (writing the ledger, the interpreter's exit)."""
        return min(30.0, max(2.0, 0.02 * self.limit_s))

    def describe(self) -> str:
        return format_duration(self.limit_s)


class Pacer:
    """Measures what a run's stretches cost and says whether the next one fits in the budget.

    `eval_steps` / `test_steps`: the validation and test splits in training batches. Before an evaluation has been
    seen, one is guessed as that many training steps plus what the first window took beyond its steps (its
    compilation: an evaluation's new shape compiles again).
    """

    def __init__(self, budget: TimeBudget, *, eval_steps: int, test_steps: int) -> None:
        self.budget = budget
        self.eval_steps, self.test_steps = eval_steps, test_steps
        self.first: tuple[int, float] | None = None  # (steps, seconds) of this process's first window
        self.step_s = 0.0  # seconds per step: the latest window's (the first one's until there is another)
        self.first_extra = 0.0  # what the first window took beyond its steps: compilation, a guess for a new shape
        self.eval_s: float | None = None
        self.save_s = 1.0

    def window(self, steps: int, seconds: float) -> None:
        """A logging window of `steps` steps took `seconds` (evaluation and checkpoint excluded)."""
        if steps <= 0:
            return
        self.step_s = seconds / steps
        if self.first is None:
            self.first = (steps, seconds)
        else:
            self.first_extra = max(0.0, self.first[1] - self.first[0] * self.step_s)

    def evaluation(self, seconds: float) -> None:
        self.eval_s = seconds

    def saved(self, seconds: float) -> None:
        self.save_s = seconds

    def needed(self, steps: int, *, evaluates: bool, final: bool) -> float:
        """Seconds the next stretch of `steps` steps needs, with its evaluation (and the final test) and a save."""
        need = steps * self.step_s + self.save_s
        if self.eval_s is not None:
            eval_s, per_eval_step = self.eval_s, self.eval_s / max(self.eval_steps, 1)
        else:  # none seen yet: an evaluation step costs at most a training step, and a new shape compiles again
            eval_s, per_eval_step = self.eval_steps * self.step_s + self.first_extra, self.step_s
        if evaluates:
            need += eval_s
        if final:
            need += self.test_steps * per_eval_step
        return SAFETY * need

    def fits(self, steps: int, *, evaluates: bool, final: bool) -> bool:
        """Whether the next stretch fits in what is left of the budget (less its margin)."""
        need = self.needed(steps, evaluates=evaluates, final=final)
        return need <= self.budget.remaining() - self.budget.margin()
