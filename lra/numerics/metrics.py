"""The study's measures: elementwise deviation of an output from a reference, the exact 1-D Wasserstein-1 distance
between two tensors' value distributions, and least-squares growth rates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lra.core.errors import ConfigError


@dataclass
class DrawStats:
    """|out - ref| of one draw: max, mean and mean square over elements, the relative error ||out - ref|| / ||ref||
    (Frobenius), and how many elements were not finite."""

    max: float
    mean: float
    sq_mean: float
    nonfinite: int
    rel: float = 0.0


def deviation(out: torch.Tensor, ref: torch.Tensor) -> DrawStats:
    """Elementwise |out - ref| in fp64, summarised (a NaN or inf element makes every figure inf and is counted)."""
    ref = ref.double()
    diff = (out.double() - ref).abs()
    nonfinite = int((~torch.isfinite(diff)).sum().item())
    if nonfinite:
        return DrawStats(float("inf"), float("inf"), float("inf"), nonfinite, float("inf"))
    norm = ref.norm().item()
    rel = diff.norm().item() / norm if norm > 0 else diff.norm().item()
    return DrawStats(diff.max().item(), diff.mean().item(), (diff * diff).mean().item(), 0, rel)


def wasserstein1(a: torch.Tensor, b: torch.Tensor) -> float:
    """The Wasserstein-1 distance between the empirical distributions of two tensors' values (one size).

    In one dimension the optimal transport plan between two equal-weight samples of n points matches them in sorted
    order (the quantile functions), so W1 = (1/n) * sum_i |sort(a)_i - sort(b)_i|, exactly; this equals the
    integral of |F_a(x) - F_b(x)| over x, the CDF form scipy's `wasserstein_distance` evaluates.
    """
    if a.numel() != b.numel():
        raise ConfigError(f"Wasserstein-1 here compares tensors of one size, got {a.numel()} and {b.numel()} values")
    sa = torch.sort(a.detach().double().flatten()).values
    sb = torch.sort(b.detach().double().flatten()).values
    return (sa - sb).abs().mean().item()


def weight_distances(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Per weight tensor: max |W_A - W_B| and the Wasserstein-1 distance of their value distributions."""
    if set(a) != set(b):
        raise ConfigError(f"the two models' weights differ in names: {sorted(set(a) ^ set(b))}")
    out = {}
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            raise ConfigError(f"weight {name} has shape {tuple(x.shape)} in one run and {tuple(y.shape)} in the other")
        out[name] = {"max_abs": (x - y).abs().max().item(), "w1": wasserstein1(x, y)}
    return out


def slope(steps: list[int], values: list[float]) -> float | None:
    """Least-squares slope of values over steps (per step); through the origin with a single point."""
    if not steps:
        return None
    if len(steps) == 1:
        return values[0] / steps[0] if steps[0] else None
    x = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


def ratio(x: float | None, y: float | None) -> float | None:
    """x / y, or None when either is missing or y is zero."""
    if x is None or y is None or y == 0:
        return None
    return x / y
