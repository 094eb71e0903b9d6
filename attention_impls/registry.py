"""Attention backends by name: `BACKENDS`, `build_attention`, and the checks that say why a backend cannot run.

The interface every backend implements is `attention_impls.base.AttentionBackend`.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from torch import nn

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.layouts import build_layout, layout_density, layout_reach
from lra.core.dtypes import dtype_name
from lra.core.environment import triton_interpreting
from lra.core.numbers import ceil_div
from lra.core.registry import Registry

BACKENDS: Registry[type[AttentionBackend]] = Registry(
    "attention backend", package="attention_impls", fixed=("heads", "head_dim", "seq_len", "dropout")
)
register_backend = BACKENDS.register


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
    """Build the backend `name` for a model shape; unknown options fail with the valid ones, and attention dropout
    asked of a backend that has none and no reference code without it fails rather than being ignored (the
    module's own check, `dropout_refusal`; a run meets the same rule earlier, in lra.train.gate)."""
    return BACKENDS.build(name, options, heads=heads, head_dim=head_dim, seq_len=seq_len, dropout=dropout)


def mask_refusal(name: str, pads_inside: bool, options: dict[str, Any] | None = None) -> str | None:
    """Why backend `name` with `options` cannot train data whose padding sits between real tokens (`pads_inside`),
    or None. A backend takes such data when it declares `any_key_mask`, or when an option of its makes it do so
    (`AttentionBackend.inner_padding_option`, set to true)."""
    cls = BACKENDS.get(name)
    opt = cls.inner_padding_option
    if not pads_inside or cls.capabilities.any_key_mask or (opt and (options or {}).get(opt) is True):
        return None
    peers = [n for n, c in BACKENDS.items() if c.capabilities.any_key_mask]
    opted = [f"{n} with --set attention.{n}.{c.inner_padding_option}=true" for n, c in BACKENDS.items()
             if c.inner_padding_option]  # fmt: skip
    return (
        f"{name!r} is declared for right-padded key masks only, but this run's data has padding inside its "
        f"sequences (black pixels, say); use a backend that takes any mask: {', '.join(peers + opted)}"
    )


def dropout_refusal(name: str, dropout: float | None, caps: Capabilities | None = None) -> str | None:
    """Why backend `name` (of capabilities `caps`, default: the registered ones) cannot train with attention dropout
    `dropout` (and what would), or None if it can.

    The one rule: a backend that applies attention dropout, or applies none as its reference code does
    (`Capabilities.dropout_reference`; it trains without, and the run says so), can; any other is refused."""
    caps = caps or BACKENDS.get(name).capabilities
    if not dropout or caps.dropout or caps.dropout_reference:
        return None
    peers = [n for n, c in BACKENDS.items() if c.capabilities.dropout and c.capabilities.exact == caps.exact]
    return (
        f"{name!r} has no attention dropout, but attention dropout {dropout} was asked for (model.attention_dropout); "
        f"train it with --set model.attention_dropout=0, or use a backend with attention dropout: " + ", ".join(peers)
    )


def dropout_applied(module: nn.Module) -> bool | None:
    """Whether the attention backends inside `module` (a model) apply the attention dropout they were built with:
    None when none was asked for (p = 0), False when one of them applies none (see AttentionBackend.dropout_note)."""
    backends = [m for m in module.modules() if isinstance(m, AttentionBackend)]
    if not any(b.dropout_asked > 0 for b in backends):
        return None
    return not any(b.dropout_skipped for b in backends)


def dropout_notes(module: nn.Module) -> list[str]:
    """The distinct `dropout_note` lines of the attention backends inside `module` (one per backend kind)."""
    notes = [m.dropout_note() for m in module.modules() if isinstance(m, AttentionBackend)]
    return list(dict.fromkeys(n for n in notes if n))


def layout_notes(module: nn.Module, seq_len: int) -> list[str]:
    """One line per distinct block layout inside `module` (a model): its density at `seq_len` tokens and the share of
    block pairs that the model's attention layers join (layout_reach), which a sparse layout on a shallow model can
    leave far below 100% (docs/path_x_campaign.md: the butterfly over Path-X's 21 packed blocks, two layers, 56%)."""
    backends = [m for m in module.modules() if isinstance(m, AttentionBackend)]
    lines = []
    for m in backends:
        spec = getattr(m, "layout_spec", None)
        if spec is None:
            continue
        blocks = ceil_div(seq_len, m.block)
        layout = build_layout(spec, blocks, heads=m.heads, seed=m.seed)
        lines.append(
            f"{m.name} layout {spec.describe()}: {blocks} blocks of {m.block} at {seq_len:,} tokens, "
            f"{layout_density(layout):.0%} of the block pairs kept; the model's {len(backends)} attention layers "
            f"join {layout_reach(layout, len(backends)):.0%} of them (the rest never reach each other)"
        )
    return list(dict.fromkeys(lines))


def why_cannot_run(
    name: str,
    device: str | torch.device,
    dtype: torch.dtype | None = None,
    head_dim: int | None = None,
    dropout: float | None = None,
) -> str | None:
    """Why backend `name` cannot run here with these settings (a message that also says what would work), or None.

    `dropout` is the attention dropout the run trains with (model.attention_dropout); None or 0 asks for none.
    """
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
        supported = ", ".join(dtype_name(d) for d in caps.dtypes)
        return f"{name!r} does not support {dtype}; supported: {supported}"
    if head_dim is not None:
        if caps.head_dims is not None and head_dim not in caps.head_dims:
            dims = caps.head_dim_text()
            return f"{name!r} supports head dims {dims}, not {head_dim}; change model.dim or model.heads"
        if caps.max_head_dim is not None and head_dim > caps.max_head_dim:
            return f"{name!r} supports head dims up to {caps.max_head_dim}, not {head_dim}"
    return dropout_refusal(name, dropout)


SCORE_BYTES = 4  # the scores are fp32 (softmax precision) whatever the input dtype


def scores_too_big(
    name: str, *, batch: int, heads: int, seq_len: int, device: str | torch.device, lower: str = "batch or length"
) -> str | None:
    """Why backend `name` cannot hold its (batch, heads, N, N) fp32 score matrix on `device` (a message that says
    what would work: `lower` names the settings to lower), or None. Checked before anything is allocated, against
    the device's total memory: a training step needs several such matrices and one is the least it allocates, so a
    run this lets through may still run out of memory, but none it refuses could have run."""
    cls, dev = BACKENDS.get(name), torch.device(device).type
    caps = cls.capabilities
    # A kernel with a PyTorch fallback takes it on the CPU unless TRITON_INTERPRET=1 emulates the kernel: for
    # block_sparse_flash that is dense-masked attention, scores and all.
    fallback = cls.has_fallback and dev == "cpu" and not triton_interpreting()
    if not (caps.scores_matrix or fallback):
        return None
    need, have = batch * heads * seq_len * seq_len * SCORE_BYTES, _total_memory(torch.device(device))
    if have is None or need <= have:
        return None
    others = [n for n, c in BACKENDS.items() if _builds_no_scores(c.capabilities, dev)][:4]
    how = " (on the CPU, without its Triton kernel: a CUDA device runs the kernel)" if fallback else ""
    return (
        f"{name!r}{how} materialises a ({batch}, {heads}, {seq_len}, {seq_len}) fp32 score matrix of "
        f"{need / 1e9:,.1f} GB, more than this {dev} device's {have / 1e9:,.1f} GB; lower the {lower}"
        + (f", or use a backend that does not build it ({', '.join(others)})" if others else "")
    )


def _builds_no_scores(caps: Capabilities, dev: str) -> bool:
    """An exact backend that runs on `dev` without the N x N scores (Triton kernels count on CUDA only)."""
    return dev in caps.devices and caps.exact and not caps.scores_matrix and not (caps.triton and dev == "cpu")


def _total_memory(device: torch.device) -> int | None:
    """The device's total memory in bytes (the host's physical memory for the CPU); None when unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device.index or 0).total_memory if torch.cuda.is_available() else None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
