"""The forward study: each implementation's attention output against the golden value on the same inputs.

An implementation is a registered backend (`naive`, `flash`, `sdpa_flash`, ...) or an emulation `emu:PRESET`
(lra.numerics.emulation, through the `flash_emulated` backend). Per (implementation, tiles, dtype, length) a row
holds max |out - golden| and the mean and standard deviation of |out - golden| over elements and over draws
(Golden et al.'s measures; golden = naive attention in fp64 on the inputs rounded to the dtype, so that it isolates
the arithmetic from the rounding of the inputs); max |out - naive| at the same dtype (their Fig. 3: flash against
baseline at one format); and for fp16/bf16 the control FlashAttention's author recommends, max |out - naive_fp32|
beside max |naive_low - naive_fp32|. Backends whose output is attention restricted to a pattern (`token_mask`) are
compared with naive attention under that mask; tiled ones (`block_m`/`block_n` options) run once per tile shape.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attention_impls.base import AttentionBackend
from attention_impls.registry import BACKENDS, backend_options, build_attention, why_cannot_run
from lra.core.dtypes import DTYPES, LOW_PRECISION, dtype_name
from lra.core.errors import ConfigError, is_oom
from lra.numerics.backend import implementation
from lra.numerics.inputs import Tiles, check_input_kind, draw_inputs, parse_dtypes, tiles_label
from lra.numerics.metrics import DrawStats, deviation
from lra.numerics.reference import naive_reference

Key = tuple[str, str, str, int]  # (implementation, tiles label or '-', dtype, length)


@dataclass
class ForwardSpec:
    """What `forward_study` sweeps. `tiles` entries are (block_m, block_n) or None for the backend's own tiles;
    `options` are per implementation label."""

    backends: list[str]
    dtypes: list[str] = field(default_factory=lambda: list(DTYPES))
    seqs: list[int] = field(default_factory=lambda: [256, 512, 1024])
    head_dim: int = 64
    heads: int = 8
    batch: int = 1
    draws: int = 5
    inputs: str = "normal"
    tiles: list[Tiles] = field(default_factory=lambda: [None])
    device: str = "cpu"
    seed: int = 0
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.backends:
            raise ConfigError("no implementations to study; name some with --attn (see `lra list`, and emu:PRESET)")
        for label in self.backends:
            BACKENDS.get(implementation(label)[0])  # unknown names fail with the known ones
        parse_dtypes(self.dtypes)
        check_input_kind(self.inputs)
        for key in ("head_dim", "heads", "batch", "draws"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"{key} must be a positive integer, got {getattr(self, key)!r}")
        if not self.seqs or min(self.seqs) < 1:
            raise ConfigError(f"sequence lengths must be positive integers, got {self.seqs}")
        if torch.device(self.device).type == "cuda" and not torch.cuda.is_available():
            raise ConfigError("--device cuda was asked for but torch.cuda.is_available() is False; use --device cpu")
        unknown = sorted(set(self.options) - set(self.backends))
        if unknown:
            raise ConfigError(f"options given for implementation(s) not studied: {', '.join(unknown)}")

    def settings(self) -> dict[str, Any]:
        """The sweep's settings as a record stores them."""
        keys = ("dtypes", "seqs", "head_dim", "heads", "batch", "draws", "inputs", "seed", "options")
        return {**{k: getattr(self, k) for k in keys}, "tiles": [tiles_label(t) for t in self.tiles]}


def has_tile_options(name: str) -> bool:
    """Whether backend `name` takes block_m and block_n options (the tiled FlashAttention family)."""
    opts = backend_options(name)
    return "block_m" in opts and "block_n" in opts


@dataclass
class _Acc:
    """Per-draw figures of one (implementation, tiles, dtype, length) cell."""

    draws: list[DrawStats] = field(default_factory=list)
    peer: list[float] = field(default_factory=list)  # max |out - naive at the same dtype|
    ctrl_backend: list[float] = field(default_factory=list)
    ctrl_naive: list[float] = field(default_factory=list)
    status: str = "ok"
    tiles_used: Tiles = None
    impl: str | None = None  # backends with a kernel and a PyTorch fallback: which one ran
    masked: bool = False  # a sparse layout: its golden is masked, so dense naive is no peer for it


@dataclass
class _Cell:
    """A built implementation with the allowed-pairs mask of its golden (None: dense) and that mask's cache key."""

    attn: AttentionBackend
    mask: torch.Tensor | None
    mask_key: str | None


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return float(np.mean(xs)), float(np.std(xs)) if len(xs) > 1 else 0.0


def _row(key: Key, acc: _Acc, numel: int) -> dict[str, Any]:
    backend, tiles, dtype, seq = key
    row: dict[str, Any] = {"backend": backend, "tiles": tiles, "dtype": dtype, "seq": seq, "status": acc.status}
    row["tiles_used"] = tiles_label(acc.tiles_used) if acc.tiles_used else None
    row.update({k: v for k, v in (("impl", acc.impl), ("masked", acc.masked)) if v})
    if acc.status != "ok" or not acc.draws:
        return row
    maxes = [d.max for d in acc.draws]
    mean, mean_std = _mean_std([d.mean for d in acc.draws])
    sq = float(np.mean([d.sq_mean for d in acc.draws]))
    row.update(draws=len(acc.draws), elements=numel, max=max(maxes), nonfinite=sum(d.nonfinite for d in acc.draws))
    row["max_mean"], row["max_std"] = _mean_std(maxes)
    row.update(mean=mean, mean_std=mean_std, rel_l2=float(np.mean([d.rel for d in acc.draws])))
    row["std"] = math.sqrt(max(sq - mean * mean, 0.0)) if math.isfinite(sq) else float("inf")
    if acc.peer:
        row["peer_max_mean"], row["peer_max_std"] = _mean_std(acc.peer)
    if acc.ctrl_backend:
        cb, cn = max(acc.ctrl_backend), max(acc.ctrl_naive)
        row.update(ctrl_backend_vs_naive32=cb, ctrl_naive_vs_naive32=cn, ctrl_ratio=cb / cn if cn > 0 else None)
    return row


def _mask_key(mask: torch.Tensor | None) -> str | None:
    if mask is None:
        return None
    return hashlib.sha1(mask.cpu().numpy().tobytes() + str(tuple(mask.shape)).encode()).hexdigest()


def _cells(spec: ForwardSpec) -> list[tuple[str, Tiles]]:
    """(implementation, tiles) pairs: tiled ones once per requested tile shape, the others once."""
    out = []
    for label in spec.backends:
        if has_tile_options(implementation(label)[0]):
            out += [(label, t) for t in spec.tiles]
        else:
            out.append((label, None))
    return out


def _cell_key(label: str, tiles: Tiles, dname: str, seq: int) -> Key:
    return (label, tiles_label(tiles) if has_tile_options(implementation(label)[0]) else "-", dname, seq)


def _build(label: str, tiles: Tiles, spec: ForwardSpec, seq: int) -> _Cell | str:
    """The implementation for one (implementation, tiles) cell at length `seq`, or why it cannot be built."""
    name, options = implementation(label)
    options = {**options, **spec.options.get(label, {})}
    if tiles is not None:
        options.update(block_m=tiles[0], block_n=tiles[1])
    try:
        attn = build_attention(name, heads=spec.heads, head_dim=spec.head_dim, seq_len=seq, options=options)
        attn = attn.to(spec.device).eval()
        mask = attn.token_mask(seq, seq)
        mask = None if mask is None else mask.to(device=spec.device, dtype=torch.bool)
    except Exception as e:  # e.g. a tile shape the kernel refuses: the row says why
        return f"error: {type(e).__name__}: {e}"
    return _Cell(attn, mask, _mask_key(mask))


@torch.no_grad()
def forward_study(spec: ForwardSpec) -> list[dict[str, Any]]:
    """Run the sweep; one row per (implementation, tiles, dtype, length) with its deviation figures or its status."""
    from rich.progress import TextColumn

    from lra.core.progress import make_progress

    spec.validate()
    device = torch.device(spec.device)
    cells = _cells(spec)
    accs: dict[Key, _Acc] = defaultdict(_Acc)
    numel: dict[int, int] = {}
    total = len(spec.seqs) * spec.draws * len(spec.dtypes) * len(cells)
    with make_progress(TextColumn("{task.fields[what]}")) as progress:
        bar = progress.add_task("numerics forward", total=total, what="")
        for seq in spec.seqs:
            numel[seq] = spec.batch * spec.heads * seq * spec.head_dim
            built = {cell: _build(*cell, spec, seq) for cell in cells}
            for draw in range(spec.draws):
                q, k, v = draw_inputs(spec.batch, spec.heads, seq, spec.head_dim, spec.inputs, spec.seed, draw)
                for dname in spec.dtypes:
                    xs = tuple(x.to(device=device, dtype=DTYPES[dname]) for x in (q, k, v))
                    refs: dict[str | None, dict[str, Any]] = {}
                    for label, tiles in cells:
                        key = _cell_key(label, tiles, dname, seq)
                        progress.update(bar, what=f"{label} {key[1]} {dname} N={seq} draw {draw + 1}/{spec.draws}")
                        _run_cell(accs[key], built[(label, tiles)], xs, refs, spec, device)
                        progress.advance(bar)
    rows = [_row(key, acc, numel[key[3]]) for key, acc in accs.items()]
    add_ratios(rows)
    return rows


def _run_cell(acc: _Acc, cell: _Cell | str, xs, refs, spec: ForwardSpec, device: torch.device) -> None:
    """One draw of one cell, unless the cell already failed or cannot run here."""
    from lra.core.progress import console

    if acc.status == "ok" and isinstance(cell, str):
        acc.status = cell
    if acc.status == "ok":
        reason = why_cannot_run(type(cell.attn).name, device, xs[0].dtype, spec.head_dim)
        acc.status = f"skipped: {reason}" if reason else "ok"
    if acc.status == "ok":
        _measure(acc, cell, xs, refs, device)
        if acc.status != "ok":
            console.print(f"[yellow]{type(cell.attn).name} {dtype_name(xs[0].dtype)}:[/] {acc.status}")


def _measure(acc: _Acc, cell: _Cell, xs, refs: dict[str | None, dict[str, Any]], device: torch.device) -> None:
    """One draw of one cell: references (shared by cells with the same mask), the output, its figures."""
    q, k, v = xs
    try:
        if cell.mask_key not in refs:
            refs[cell.mask_key] = _references(q, k, v, cell.attn.scale, cell.mask)
        out = _call(cell.attn, q, k, v)
    except Exception as e:  # one failing cell is a row of the study, not the end of it
        if not is_oom(e):
            acc.status = f"error: {type(e).__name__}: {e}"
            return
        acc.status = "oom: the references (fp64 golden) did not fit" if cell.mask_key not in refs else "oom"
        torch.cuda.empty_cache()
        return
    r = refs[cell.mask_key]
    acc.masked = cell.mask is not None
    acc.tiles_used = cell.attn.tile_shape(q.dtype, device.type) if cell.attn.runs_kernel(device) else None
    if cell.attn.has_fallback:
        acc.impl = "kernel" if cell.attn.runs_kernel(device) else "fallback"
    acc.draws.append(deviation(out, r["golden"]))
    acc.peer.append(deviation(out, r["naive"]).max)
    if "naive32" in r:
        acc.ctrl_backend.append(deviation(out, r["naive32"]).max)
        acc.ctrl_naive.append(r["ctrl_naive"])


def _call(attn: AttentionBackend, q, k, v) -> torch.Tensor:
    if any(p.is_floating_point() for p in list(attn.parameters()) + list(attn.buffers())):
        attn.to(q.dtype)
    out = attn(q, k, v)
    if out.device.type == "cuda":
        torch.cuda.synchronize(out.device)
    return out


def _references(q, k, v, scale: float, mask: torch.Tensor | None) -> dict[str, Any]:
    """The golden (naive in fp64 on these inputs), naive at the inputs' dtype and, for fp16/bf16, naive in fp32 and
    naive's own control gap."""
    golden = naive_reference(q, k, v, torch.float64, scale, mask)
    refs: dict[str, Any] = {"golden": golden}
    refs["naive"] = golden if q.dtype == torch.float64 else naive_reference(q, k, v, q.dtype, scale, mask)
    if dtype_name(q.dtype) in LOW_PRECISION:
        refs["naive32"] = naive_reference(q, k, v, torch.float32, scale, mask)
        refs["ctrl_naive"] = deviation(refs["naive"], refs["naive32"]).max
    return refs


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """ratio_vs_naive: a row's deviation from the golden (mean over draws of the max) over naive's at the same dtype
    and length (the paper's 'about 10x'); not for masked rows, whose golden differs from dense naive's."""
    naive = {(r["dtype"], r["seq"]): r.get("max_mean") for r in rows if r["backend"] == "naive" and r["status"] == "ok"}
    for r in rows:
        base = naive.get((r["dtype"], r["seq"]))
        if r["status"] == "ok" and not r.get("masked") and base and math.isfinite(base) and base > 0:
            r["ratio_vs_naive"] = r["max_mean"] / base
