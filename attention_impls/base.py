"""The attention interface: what every backend computes (`AttentionBackend`) and declares (`Capabilities`).

`forward(q, k, v, key_padding_mask=None)` with q, k, v shaped (batch, heads, seq, head_dim) returns the shape of q.
`key_padding_mask` is a bool (batch, seq_k) tensor, True where a token is real. When seq_q == seq_k (self-attention)
the same mask marks padded queries, whose output rows are zero; a query whose keys are all padding gets zeros too,
never NaN. Backends are registered and built by name in `attention_impls.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attention_impls.masking import safe_key_mask, score_dtype, zero_padded_outputs
from lra.core.dtypes import dtype_name
from lra.core.errors import ConfigError

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
    dropout: bool = True  # applies attention dropout (the model's model.attention_dropout) in training
    # Where a backend applies no attention dropout because its reference code applies none: that code (file, lines).
    # A run asking for attention dropout then trains without it and says so (the record's attention_dropout_applied:
    # false); with `dropout` False and this empty, such a run is refused up front (why_cannot_run, build_attention).
    dropout_reference: str = ""
    exact_on_mask: bool = False  # exact softmax attention over the pairs of its `token_mask` (block layouts, windows)
    scores_matrix: bool = False  # builds the whole (batch, heads, N, N) score matrix (see `scores_too_big`)
    any_key_mask: bool = False  # takes padding anywhere in a row; False: right-padded masks only (see mask_refusal)
    notes: str = ""  # one line for `lra list`
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for `lra list`: exactness, devices, dtypes, head dims and the flags that are set."""
        dt = ",".join(dtype_name(d) for d in self.dtypes)
        parts = ["exact" if self.exact else "approx", "/".join(self.devices), dt, f"head_dim {self.head_dim_text()}"]
        if self.exact_on_mask:
            parts.append("exact on its mask")
        if not self.dropout:
            parts.append("no attention dropout" + (" (as its reference code)" if self.dropout_reference else ""))
        if self.fixed_seq_len:
            parts.append("fixed seq len")
        if self.triton:
            parts.append("triton")
        return "; ".join(parts)

    def head_dim_text(self) -> str:
        """The supported head dims, short: 'any', '<=256', '8..256 step 8' or '16,32,64'."""
        dims = self.head_dims
        if not dims:
            return f"<={self.max_head_dim}" if self.max_head_dim else "any"
        steps = {b - a for a, b in zip(dims, dims[1:])}
        if len(dims) > 3 and len(steps) == 1:  # a run such as 8, 16, ..., 256
            return f"{dims[0]}..{dims[-1]} step {steps.pop()}"
        return ",".join(map(str, dims))


class AttentionBackend(nn.Module):
    """Base class of every backend. Subclasses set `capabilities` and implement `forward`.

    Construction gets the model's shape (`heads`, `head_dim`, `seq_len`), the attention dropout probability, and the
    backend's own options as keyword arguments (from the config's `attention: {NAME: {...}}` block). A subclass
    takes its own options keyword-only and passes the rest up, so the shared arguments are written once, here:
    `def __init__(self, *args, window: int = 256, **kwargs): super().__init__(*args, **kwargs)`.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    has_fallback: ClassVar[bool] = False  # a kernel with a plain-PyTorch fallback (see runs_kernel)
    inner_padding_option: ClassVar[str | None] = None  # an option that, true, takes padding anywhere (mask_refusal)

    def __init__(self, heads: int, head_dim: int, seq_len: int, dropout: float = 0.0, scale: float | None = None):
        super().__init__()
        if not 0.0 <= float(dropout) < 1.0:  # a module built by hand; a run's config was checked by its declaration
            raise ValueError(f"attention dropout must be in [0, 1), got {dropout}")
        from attention_impls.registry import dropout_refusal  # here: the registry imports this module

        refusal = dropout_refusal(getattr(self, "name", type(self).__name__), dropout, self.capabilities)
        if refusal:
            raise ConfigError(refusal)
        self.heads = heads
        self.head_dim = head_dim
        self.seq_len = seq_len
        self.dropout_asked = float(dropout)  # model.attention_dropout
        # What the backend applies: the asked p, or none where it has none (capabilities.dropout False). A backend
        # whose reference code applies none by choice sets it to 0 itself (an option; see linformer, reformer).
        self.dropout = self.dropout_asked if self.capabilities.dropout else 0.0
        self.scale = float(scale) if scale is not None else head_dim**-0.5

    @property
    def dropout_skipped(self) -> bool:
        """True when attention dropout was asked for (p > 0) and this backend applies none."""
        return self.dropout_asked > 0 and self.dropout == 0

    def dropout_note(self) -> str | None:
        """One line saying that the asked attention dropout is not applied and why, or None when it is applied."""
        if not self.dropout_skipped:
            return None
        return (
            f"attention dropout {self.dropout_asked:g} (model.attention_dropout) is not applied: {self.name!r} applies "
            f"none, as its reference code does ({self.capabilities.dropout_reference or 'none given'})"
        )

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        raise NotImplementedError

    def drop(self, probs: torch.Tensor) -> torch.Tensor:
        """Attention dropout on probabilities, in training only."""
        return F.dropout(probs, p=self.dropout) if self.training and self.dropout > 0 else probs

    def softmax_attend(
        self, logits: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor | None, mask_keys: bool = True
    ) -> torch.Tensor:
        """softmax(logits) V for a backend that materialises its logits (..., Nq, Nk): softmax in fp32 (fp64 for
        fp64 values) over the real keys (all of them when not `mask_keys`: keys that are mixtures of tokens),
        attention dropout, P V in v's dtype, and the interface's zero rows."""
        logits = logits.to(score_dtype(v.dtype))
        if key_padding_mask is not None and mask_keys:
            logits = logits.masked_fill(~safe_key_mask(key_padding_mask)[:, None, None, :], float("-inf"))
        probs = self.drop(torch.softmax(logits, dim=-1))
        return zero_padded_outputs(torch.matmul(probs.to(v.dtype), v), key_padding_mask)

    # Optional hooks, with defaults that describe a dense, untiled backend. Benchmarks and the numerics study call
    # them on every backend, so a new sparse or tiled backend is measured against its own mask and tiles for free.

    def token_mask(self, seq_q: int, seq_k: int) -> torch.Tensor | None:
        """The (query, key) pairs this backend attends: bool (heads or 1, seq_q, seq_k), or None for all of them.

        Exact attention restricted to a fixed pattern (block-sparse layouts, local windows; capabilities
        exact_on_mask) returns its pattern here, and is then compared with naive attention under the same mask.
        """
        return None

    def density(self, seq_len: int | None = None) -> float:
        """The share of the N x N (query, key) pairs the backend scores at N = `seq_len` (default: the model's):
        benchmarks scale dense attention's FLOPs by it. 1 for dense attention."""
        return 1.0

    def tile_shape(self, dtype: torch.dtype, device_type: str) -> tuple[int, int] | None:
        """(query rows, keys) of the forward tile used for `dtype` on `device_type` (tiled backends), else None."""
        return None

    def runs_kernel(self, device: torch.device) -> bool:
        """Whether the backend's own kernel runs on `device` (False where it falls back to plain PyTorch; backends
        with a fallback set `has_fallback`)."""
        return True

    def prepare(self, dtype: torch.dtype, device: torch.device) -> None:
        """Build, eagerly, what the forward computes once per shape (block lists, say) for inputs of `dtype` on
        `device` at the model's length: torch.compile then traces a forward that only looks them up. Default: none."""

    def extra_repr(self) -> str:
        return f"heads={self.heads}, head_dim={self.head_dim}, seq_len={self.seq_len}, dropout={self.dropout}"
