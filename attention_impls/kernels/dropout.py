"""Attention dropout of the kernel family, host side: the quantised probability and the RNG state (no triton here).

The kernels draw each keep decision as one byte of Philox4x32-7 output against an 8-bit threshold, so the drop
probability they apply is p rounded to a multiple of 1/256: `quantize_dropout(p) = round(256 p)` (ties up) and
`effective_dropout(p) = quantize_dropout(p) / 256` (p = 0.1 gives 26/256 = 0.1015625). Kept probabilities are
scaled by 1 / (1 - effective p), the same quantised value, so the expectation of the output is exact.

The RNG state is an int64 device tensor (seed, offset): the Philox key is the seed, and the offset is one of the four
counter words (the others are the 16-key group, the query row and batch * heads + head). `draw_rng_state` takes a
fresh one from torch's generator with a device op, so there is no host round trip: a CUDA graph replays it with a new
draw every time, torch.manual_seed reproduces the stream, and a resumed run continues it from the saved RNG state.
"""

from __future__ import annotations

import torch

from lra.core.errors import ConfigError

DROPOUT_LEVELS = 256  # one byte per keep decision
_SEED_LIMIT = 2**62  # drawn seeds and offsets stay well inside int64


def quantize_dropout(p: float) -> int:
    """The 8-bit drop threshold for probability `p`: round(256 p), ties up; a clear error outside [0, 1)."""
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"attention dropout must be in [0, 1), got {p}")
    level = int(p * DROPOUT_LEVELS + 0.5)
    if level >= DROPOUT_LEVELS:
        raise ConfigError(
            f"dropout_p {p} rounds to 1 at the kernels' 1/{DROPOUT_LEVELS} resolution (every weight dropped); "
            f"use p <= {(DROPOUT_LEVELS - 1) / DROPOUT_LEVELS:.4f}"
        )
    return level


def effective_dropout(p: float) -> float:
    """The drop probability the kernels apply for a requested `p` (a multiple of 1/256)."""
    return quantize_dropout(p) / DROPOUT_LEVELS


def keep_scale(level: int) -> float:
    """1 / (1 - level / 256): the factor on kept probabilities for drop threshold `level`."""
    return DROPOUT_LEVELS / (DROPOUT_LEVELS - level)


def draw_rng_state(device: torch.device | str) -> torch.Tensor:
    """A fresh (seed, offset) int64 tensor on `device`, drawn from torch's generator for that device."""
    return torch.randint(0, _SEED_LIMIT, (2,), dtype=torch.int64, device=device)


def rng_state(seed: int, offset: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """The (seed, offset) state tensor for fixed values (tests, reproducing a mask)."""
    if not (0 <= seed < 2**63 and 0 <= offset < 2**32):
        raise ConfigError(f"seed must be in [0, 2**63) and offset in [0, 2**32), got {seed}, {offset}")
    return torch.tensor([seed, offset], dtype=torch.int64, device=device)
