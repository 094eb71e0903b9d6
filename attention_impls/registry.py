"""The attention interface: what a backend computes, declares and how it is built by name.

Interface (DESIGN.md section 3): `forward(q, k, v, key_padding_mask=None)` with q, k, v shaped
(batch, heads, seq, head_dim) returns the shape of q. `key_padding_mask` is a bool (batch, seq_k) tensor, True where
a token is real. When seq_q == seq_k (self-attention) the same mask marks padded queries, whose output rows are zero;
a query whose keys are all padding gets zeros too, never NaN.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from lra.core.registry import Registry

BACKENDS: Registry[type[AttentionBackend]] = Registry(
    "attention backend", package="attention_impls", fixed=("heads", "head_dim", "seq_len", "dropout")
)
register_backend = BACKENDS.register

ALL_FLOAT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports; the CLI refuses impossible combinations up front from this."""

    devices: tuple[str, ...] = ("cpu", "cuda")
    dtypes: tuple[torch.dtype, ...] = ALL_FLOAT
    exact: bool = True
    head_dims: tuple[int, ...] | None = None  # None: any head dim up to max_head_dim
    max_head_dim: int | None = None
    fixed_seq_len: bool = False  # parameters depend on the sequence length (Linformer)
    triton: bool = False  # a Triton kernel: on CPU it runs only under TRITON_INTERPRET=1
    dropout: bool = True
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        dt = ",".join(str(d).replace("torch.", "").replace("float", "fp").replace("bfp16", "bf16") for d in self.dtypes)
        hd = (
            ",".join(map(str, self.head_dims))
            if self.head_dims
            else f"<={self.max_head_dim}"
            if self.max_head_dim
            else "any"
        )
        parts = [
            "exact" if self.exact else "approx",
            "/".join(self.devices),
            dt,
            f"head_dim {hd}",
        ]
        if self.fixed_seq_len:
            parts.append("fixed seq len")
        if self.triton:
            parts.append("triton")
        return "; ".join(parts)


class AttentionBackend(nn.Module):
    """Base class of every backend. Subclasses set `capabilities` and implement `forward`.

    Construction gets the model's shape (`heads`, `head_dim`, `seq_len`), the attention dropout probability, and the
    backend's own options as keyword arguments (from the config's `attention: {NAME: {...}}` block).
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    has_fallback: ClassVar[bool] = False  # a kernel with a plain-PyTorch fallback (see runs_kernel)

    def __init__(self, heads: int, head_dim: int, seq_len: int, dropout: float = 0.0, scale: float | None = None):
        super().__init__()
        self.heads = heads
        self.head_dim = head_dim
        self.seq_len = seq_len
        self.dropout = float(dropout)
        self.scale = float(scale) if scale is not None else head_dim**-0.5

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        raise NotImplementedError

    # Optional hooks, with defaults that describe a dense, untiled backend. Benchmarks and the numerics study call
    # them on every backend, so a new sparse or tiled backend is measured against its own mask and tiles for free.

    def token_mask(self, seq_q: int, seq_k: int) -> torch.Tensor | None:
        """The (query, key) pairs this backend attends: bool (heads or 1, seq_q, seq_k), or None for all of them.

        Exact attention restricted to a pattern (block-sparse layouts) returns its pattern here, and is then compared
        with naive attention under the same mask.
        """
        return None

    def density(self, seq_len: int | None = None) -> float:
        """The fraction of (query, key) pairs computed at `seq_len` (default: the model's); 1 for dense attention."""
        return 1.0

    def tile_shape(self, dtype: torch.dtype, device_type: str) -> tuple[int, int] | None:
        """(query rows, keys) of the forward tile used for `dtype` on `device_type` (tiled backends), else None."""
        return None

    def runs_kernel(self, device: torch.device) -> bool:
        """Whether the backend's own kernel runs on `device` (False where it falls back to plain PyTorch; backends
        with a fallback set `has_fallback`)."""
        return True

    def extra_repr(self) -> str:
        return f"heads={self.heads}, head_dim={self.head_dim}, seq_len={self.seq_len}, dropout={self.dropout}"


def backend_options(name: str) -> dict[str, Any]:
    """The options backend `name` takes beyond the model shape, with their defaults."""
    return BACKENDS.options(name)


def build_attention(
    name: str,
    *,
    heads: int,
    head_dim: int,
    seq_len: int,
    dropout: float = 0.0,
    options: dict[str, Any] | None = None,
) -> AttentionBackend:
    """Build the backend `name` for a model shape; unknown options fail with the valid ones."""
    return BACKENDS.build(name, options, heads=heads, head_dim=head_dim, seq_len=seq_len, dropout=dropout)


def triton_interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def why_cannot_run(
    name: str, device: str | torch.device, dtype: torch.dtype | None = None, head_dim: int | None = None
) -> str | None:
    """Why backend `name` cannot run here (a message that also says what would work), or None if it can."""
    cls = BACKENDS.get(name)
    caps = cls.capabilities
    dev = torch.device(device).type
    if dev not in caps.devices:
        if caps.triton and dev == "cpu":
            if not triton_interpreting():
                return (
                    f"{name!r} is a Triton GPU kernel and this run is on the CPU; set TRITON_INTERPRET=1 to emulate "
                    f"it on the CPU (slowly, for tests and tiny runs), or use a CUDA device"
                )
        else:
            where = " or ".join(caps.devices)
            cpu_ok = [n for n, c in BACKENDS.items() if dev in c.capabilities.devices and c.capabilities.exact]
            return f"{name!r} runs only on {where}, not on {dev}" + (
                f"; exact backends that run on {dev}: {', '.join(cpu_ok)}" if cpu_ok else ""
            )
    if caps.triton and importlib.util.find_spec("triton") is None:
        return f"{name!r} needs the triton package: pip install triton (CPU emulation needs triton >= 3.9)"
    if dev == "cuda" and not torch.cuda.is_available():
        return "CUDA was asked for but torch.cuda.is_available() is False; run with --device cpu"
    if dtype is not None and dtype not in caps.dtypes:
        return f"{name!r} does not support {dtype}; supported: {', '.join(map(str, caps.dtypes))}"
    if head_dim is not None:
        if caps.head_dims is not None and head_dim not in caps.head_dims:
            return f"{name!r} supports head dims {caps.head_dims}, not {head_dim}; change model.dim or model.heads"
        if caps.max_head_dim is not None and head_dim > caps.max_head_dim:
            return f"{name!r} supports head dims up to {caps.max_head_dim}, not {head_dim}"
    return None
