"""Learning-rate schedules as multipliers of the base rate, by step (1-based as in the LRA code).

onecycle also sets Adam's beta1 by step (`beta1_at`); the other schedules leave the configured betas alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lra.core.errors import ConfigError

SCHEDULES = ("rsqrt", "cosine", "linear", "constant", "onecycle")

# torch.optim.lr_scheduler.OneCycleLR's defaults, which Xiong et al.'s run_tasks.py keeps.
ONECYCLE_DIV = 25.0  # the first step's lr is lr / 25
ONECYCLE_FINAL_DIV = 1e4  # the last step's lr is lr / 25 / 1e4
ONECYCLE_BETA1 = (0.95, 0.85)  # beta1 at the ends of the cycle and at its peak (max_momentum, base_momentum)


def lr_factor(schedule: str, *, warmup: int, total_steps: int) -> Callable[[int], float]:
    """The multiplier of the base learning rate at a step.

    rsqrt (LRA's "constant * linear_warmup * rsqrt_decay"): min(1, step/warmup) / sqrt(max(step, warmup)).
    cosine: linear warm-up to 1, then half a cosine down to 0 at the last step.
    linear: linear warm-up to 1, then a straight line down to 0 at the last step (the FlashAttention paper's LRA
    recipe, after Xiong et al.'s Nystromformer code). constant: warm-up, then 1.
    onecycle (torch's OneCycleLR with linear annealing and its defaults, as Xiong et al.'s run_tasks.py trains): a
    line from 1/25 at step 1 to 1 at step `warmup`, then a line down to 1/25/1e4 at the last step; it also cycles
    beta1 (`beta1_at`). It needs 2 <= warmup < total_steps.
    """
    check_schedule(schedule, warmup=warmup, total_steps=total_steps)
    warmup = max(int(warmup), 0)

    def ramp(step: int) -> float:
        return min(1.0, step / warmup) if warmup else 1.0

    def decay_progress(step: int) -> float:
        return min(1.0, (step - warmup) / max(1, total_steps - warmup))

    def rsqrt(step: int) -> float:
        step = max(step, 1)
        return ramp(step) / math.sqrt(max(step, warmup, 1))

    def cosine(step: int) -> float:
        step = max(step, 1)
        if step <= warmup:
            return ramp(step)
        return 0.5 * (1.0 + math.cos(math.pi * decay_progress(step)))

    def linear(step: int) -> float:
        step = max(step, 1)
        if step <= warmup:
            return ramp(step)
        return 1.0 - decay_progress(step)

    def constant(step: int) -> float:
        return ramp(max(step, 1))

    def onecycle(step: int) -> float:
        start = 1.0 / ONECYCLE_DIV
        return _onecycle(step, warmup, total_steps, (start, 1.0, start / ONECYCLE_FINAL_DIV))

    factors = {"rsqrt": rsqrt, "cosine": cosine, "linear": linear, "constant": constant, "onecycle": onecycle}
    return factors[schedule]


def beta1_at(schedule: str, *, warmup: int, total_steps: int) -> Callable[[int], float] | None:
    """Adam's beta1 at a step under `schedule`, or None when the schedule leaves the configured betas alone.

    onecycle cycles it against the learning rate, as OneCycleLR's cycle_momentum does: a line from 0.95 at step 1
    to 0.85 at step `warmup`, then back to 0.95 at the last step. train.betas[0] is then ignored (OneCycleLR
    overwrites it too); betas[1] still applies.
    """
    check_schedule(schedule, warmup=warmup, total_steps=total_steps)
    if schedule != "onecycle":
        return None
    high, low = ONECYCLE_BETA1
    return lambda step: _onecycle(step, warmup, total_steps, (high, low, high))


def check_schedule(schedule: str, *, warmup: int, total_steps: int) -> None:
    """A ConfigError unless `schedule` is known and `warmup` suits it (onecycle: two phases of at least 1 step)."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if schedule != "onecycle":
        return
    if warmup < 2:
        raise ConfigError(
            f"train.warmup = {warmup} is too short for train.schedule = onecycle: its learning rate rises from "
            f"lr/{ONECYCLE_DIV:g} at step 1 to lr at step train.warmup, so train.warmup must be at least 2"
        )
    if warmup >= total_steps:
        raise ConfigError(
            f"train.warmup = {warmup} leaves no decay for train.schedule = onecycle: it must be below "
            f"train.steps = {total_steps}"
        )


def _onecycle(step: int, warmup: int, total_steps: int, values: tuple[float, float, float]) -> float:
    """The two-phase line through values[0] at step 1, values[1] at `warmup` and values[2] at `total_steps`.

    As OneCycleLR, whose step count is ours minus one: phase one ends at its step warmup - 1, so that
    pct_start = warmup / total_steps."""
    first, peak, last = values
    step = min(max(step, 1), total_steps)
    if step <= warmup:
        return _line(first, peak, (step - 1) / (warmup - 1))
    return _line(peak, last, (step - warmup) / (total_steps - warmup))


def _line(start: float, end: float, pct: float) -> float:
    return (end - start) * pct + start
