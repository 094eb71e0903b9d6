"""Learning-rate schedules as multipliers of the base rate, by step (1-based as in the LRA code)."""

from __future__ import annotations

import math
from collections.abc import Callable


def lr_factor(schedule: str, warmup: int, total_steps: int) -> Callable[[int], float]:
    """The multiplier of the base learning rate at a step.

    rsqrt (LRA's "constant * linear_warmup * rsqrt_decay"): min(1, step/warmup) / sqrt(max(step, warmup)).
    cosine: linear warm-up to 1, then half a cosine down to 0 at the last step. constant: warm-up, then 1.
    """
    warmup = max(int(warmup), 0)

    def rsqrt(step: int) -> float:
        step = max(step, 1)
        ramp = min(1.0, step / warmup) if warmup else 1.0
        return ramp / math.sqrt(max(step, warmup, 1))

    def cosine(step: int) -> float:
        step = max(step, 1)
        if warmup and step <= warmup:
            return step / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    def constant(step: int) -> float:
        step = max(step, 1)
        return min(1.0, step / warmup) if warmup else 1.0

    try:
        return {"rsqrt": rsqrt, "cosine": cosine, "constant": constant}[schedule]
    except KeyError:
        raise ValueError(f"unknown schedule {schedule!r}; known: rsqrt, cosine, constant") from None
