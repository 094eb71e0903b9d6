"""Learning-rate schedules as multipliers of the base rate, by step (1-based as in the LRA code)."""

from __future__ import annotations

import math
from collections.abc import Callable

from lra.core.errors import ConfigError

SCHEDULES = ("rsqrt", "cosine", "linear", "constant")


def lr_factor(schedule: str, *, warmup: int, total_steps: int) -> Callable[[int], float]:
    """The multiplier of the base learning rate at a step.

    rsqrt (LRA's "constant * linear_warmup * rsqrt_decay"): min(1, step/warmup) / sqrt(max(step, warmup)).
    cosine: linear warm-up to 1, then half a cosine down to 0 at the last step.
    linear: linear warm-up to 1, then a straight line down to 0 at the last step (the FlashAttention paper's LRA
    recipe, after Xiong et al.'s Nystromformer code). constant: warm-up, then 1.
    """
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

    factors = {"rsqrt": rsqrt, "cosine": cosine, "linear": linear, "constant": constant}
    if schedule not in factors:
        raise ConfigError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    return factors[schedule]
