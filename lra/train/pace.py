"""The training loop's view of a time budget: times its windows, evaluations and saves on the budget's clock and
says whether the stretch to the next logging point fits (always, without a budget), or whether a signal asked the
run to stop. Kept apart from the loop (`lra.train.run`) and from the budget's arithmetic (`lra.train.budget`), which
knows nothing of ranks or settings."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sized

from lra.core.signals import STOP
from lra.train import distributed as dist
from lra.train.budget import Pacer, TimeBudget
from lra.train.settings import TrainSettings


class Pace:
    """The loop's view of its `Pacer` (None: no budget, every stretch fits). Rank 0 decides for every rank."""

    def __init__(self, pacer: Pacer | None, train: TrainSettings) -> None:
        self.pacer, self.t = pacer, train
        self.clock = pacer.budget.clock if pacer is not None else time.perf_counter
        self.mark = self.clock()

    def restart(self) -> None:
        self.mark = self.clock()

    def window(self, steps: int) -> None:
        if self.pacer is not None:
            self.pacer.window(steps, self.clock() - self.mark)

    def timed(self, work: Callable[[], None], what: str) -> None:
        """Run `work`; tell the pacer how long it took (`what`: its method, evaluation or saved)."""
        start = self.clock()
        work()
        if self.pacer is not None:
            getattr(self.pacer, what)(self.clock() - start)

    def stop_reason(self, step: int, ckpt_every: int) -> str | None:
        """Why the loop stops after `step`, the same on every rank: the signal's name where one asked
        (lra.core.signals.STOP), 'time' where the steps up to the next logging point (and what comes there) would
        not fit the budget, None to go on."""
        return dist.broadcast_object(STOP.signal or (None if self._fits_next(step, ckpt_every) else "time"))

    def _fits_next(self, step: int, ckpt_every: int) -> bool:
        if self.pacer is None:
            return True
        t = self.t
        nxt = min(_next_multiple(step, every) for every in (t.log_every, t.eval_every, ckpt_every))
        nxt = min(nxt, t.steps)
        final = nxt == t.steps
        return self.pacer.fits(nxt - step, evaluates=final or nxt % t.eval_every == 0, final=final)


def loop_pace(budget: TimeBudget | None, splits: Mapping[str, Sized], train: TrainSettings) -> Pace:
    """The budget's bookkeeping for one loop, its evaluations sized from the splits (validation capped at
    `train.eval_batches`); one that never stops the run when there is no budget."""
    batch = train.batch_size
    steps = {f"{s}_steps": math.ceil(len(splits[s]) / batch) for s in ("val", "test")}
    limit = train.eval_batches
    steps["val_steps"] = min(steps["val_steps"], limit) if limit else steps["val_steps"]
    pacer = None if budget is None else Pacer(budget, eval_steps=steps["val_steps"], test_steps=steps["test_steps"])
    return Pace(pacer, train)


def _next_multiple(step: int, every: int) -> int:
    """The smallest multiple of `every` above `step`."""
    return (step // every + 1) * every
