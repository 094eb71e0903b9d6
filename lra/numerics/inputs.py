"""The study's inputs: seeded q, k, v draws (N(0, 1) or the FlashAttention-3 paper's outlier mix) and the parsing of
the dtypes and tile shapes a sweep runs over."""

from __future__ import annotations

import numpy as np
import torch

from lra.core.dtypes import DTYPES
from lra.core.errors import ConfigError

INPUT_KINDS = ("normal", "outlier")
OUTLIER_P = 0.001  # FlashAttention-3 paper: Bernoulli(0.001)
OUTLIER_STD = 10.0  # N(0, 100): variance 100
DEFAULT_TILES = "default"

Tiles = tuple[int, int] | None  # (block_m, block_n), or None for a backend's own


def parse_dtypes(names: list[str]) -> list[str]:
    """Validated dtype short names (fp64, fp32, fp16, bf16), duplicates dropped."""
    bad = [n for n in names if n not in DTYPES]
    if bad:
        raise ConfigError(f"unknown dtype(s) {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    return list(dict.fromkeys(names))


def parse_tiles(items: list[str]) -> list[Tiles]:
    """'default', '64x64', '128x64' -> None (the backend's own tiles), (64, 64), (128, 64)."""
    out: list[Tiles] = []
    for item in items:
        text = item.strip().lower()
        if text == DEFAULT_TILES:
            out.append(None)
            continue
        parts = text.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ConfigError(f"tile shape {item!r} must be BLOCK_MxBLOCK_N (e.g. 128x64) or 'default'")
        out.append((int(parts[0]), int(parts[1])))
    return list(dict.fromkeys(out)) or [None]


def tiles_label(tiles: Tiles) -> str:
    return DEFAULT_TILES if tiles is None else f"{tiles[0]}x{tiles[1]}"


def check_input_kind(kind: str) -> None:
    if kind not in INPUT_KINDS:
        raise ConfigError(f"inputs must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")


def draw_inputs(
    batch: int, heads: int, seq: int, head_dim: int, kind: str, seed: int, draw: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v in fp64 on the CPU, a pure function of (seed, draw, shape): N(0,1) or the FA3 outlier mix
    N(0, 1) + N(0, 100) * Bernoulli(0.001) (0.1% of entries get an extra term of standard deviation 10)."""
    check_input_kind(kind)
    state = np.random.SeedSequence([seed, draw, batch, heads, seq, head_dim]).generate_state(1)[0]
    g = torch.Generator().manual_seed(int(state))
    shape = (3, batch, heads, seq, head_dim)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "outlier":
        hit = torch.rand(shape, generator=g, dtype=torch.float64) < OUTLIER_P
        x = x + OUTLIER_STD * torch.randn(shape, generator=g, dtype=torch.float64) * hit
    return x[0], x[1], x[2]
