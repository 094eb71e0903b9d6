"""The one table of floating-point dtypes and their short names (bf16, fp16, fp32, fp64)."""

from __future__ import annotations

import torch

from lra.core.errors import ConfigError

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
LOW_PRECISION = ("fp16", "bf16")


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'bf16' / 'fp16' / 'fp32' / 'fp64' (also 'float32', 'bfloat16') or a torch dtype -> the torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().replace("torch.", "").replace("bfloat", "bf").replace("float", "fp")
    try:
        return DTYPES[key]
    except KeyError:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bf16'."""
    for name, dt in DTYPES.items():
        if dt == dtype:
            return name
    raise ConfigError(f"no short name for {dtype}; known: {', '.join(DTYPES)}")
