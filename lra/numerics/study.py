"""The numeric-deviation study of "Is Flash Attention Stable?" (Golden et al. 2024), for every registered backend.

`forward_study`: each backend's attention output against a golden value, naive attention evaluated in fp64 on the
same inputs (the inputs rounded to the dtype under test, then widened, so that the golden isolates the arithmetic of
the backend from the rounding of its inputs). Per (backend, tile shape, dtype, sequence length) it reports
max |out - golden| and the mean and standard deviation of |out - golden| over elements and over repeated draws, and,
for fp16/bf16, the control FlashAttention's author recommends: max |backend_low - naive_fp32| beside
max |naive_low - naive_fp32| on the same inputs. Inputs are N(0, 1), or the FlashAttention-3 paper's outlier mix
N(0, 1) + N(0, 100) * Bernoulli(0.001) (N(mean, variance): 0.1% of entries get an extra term of standard deviation 10).

`weights_study`: the same model trained twice from the same initialisation and data order, with backend A and with
backend B; at every evaluation, per weight tensor, max |W_A - W_B| and the 1-D Wasserstein-1 distance between the two
tensors' value distributions (exact: the mean of |sort(W_A) - sort(W_B)|). Controls run the same way: `naive` with two
seeds, and `naive` in bf16 autocast against `naive` in fp32. A, B and the seed control train at the config's
`train.amp` (bf16 autocast by default, as in the paper; on the CPU too, unlike `lra run`). The ratio of the slopes of
these curves over steps is the paper's second figure (flash 2-5x below low-precision training).

A backend whose output is attention restricted to a pattern exposes it through a method `token_mask(seq_q, seq_k)`
-> bool (heads or 1, seq_q, seq_k), or, like block_sparse_flash, through `layout(seq_q, seq_k)` and `block`; its
golden is then the naive attention under that mask (and so are the fp32/low-precision naive controls).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attention_impls.masking import masked_attention
from attention_impls.registry import BACKENDS, AttentionBackend, backend_options, build_attention, why_cannot_run
from lra.core.atomic import atomic_path
from lra.core.dtypes import DTYPES, LOW_PRECISION, dtype_name

INPUT_KINDS = ("normal", "outlier")
OUTLIER_P = 0.001  # FlashAttention-3 paper: Bernoulli(0.001)
OUTLIER_STD = 10.0  # N(0, 100): variance 100
DEFAULT_TILES = "default"
CONTROLS = ("seeds", "amp")


def parse_dtypes(names: list[str]) -> list[str]:
    """Validated dtype short names (fp64, fp32, fp16, bf16)."""
    bad = [n for n in names if n not in DTYPES]
    if bad:
        raise ValueError(f"unknown dtype(s) {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    return list(dict.fromkeys(names))


def parse_tiles(items: list[str]) -> list[tuple[int, int] | None]:
    """'default', '64x64', '128x64' -> None (the backend's own tiles), (64, 64), (128, 64)."""
    out: list[tuple[int, int] | None] = []
    for item in items:
        text = item.strip().lower()
        if text == DEFAULT_TILES:
            out.append(None)
            continue
        parts = text.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"tile shape {item!r} must be BLOCK_MxBLOCK_N (e.g. 128x64) or 'default'")
        out.append((int(parts[0]), int(parts[1])))
    return list(dict.fromkeys(out)) or [None]


def tiles_label(tiles: tuple[int, int] | None) -> str:
    return DEFAULT_TILES if tiles is None else f"{tiles[0]}x{tiles[1]}"


def has_tile_options(name: str) -> bool:
    """Whether backend `name` takes block_m and block_n options (the tiled FlashAttention family)."""
    opts = backend_options(name)
    return "block_m" in opts and "block_n" in opts


def effective_tiles(attn: AttentionBackend, dtype: torch.dtype, device: torch.device) -> tuple[int, int] | None:
    """The (block_m, block_n) a tiled backend actually uses for `dtype` on `device`, or None if it has no tiles."""
    return attn.tile_shape(dtype, device.type) if attn.runs_kernel(device) else None


def draw_inputs(
    batch: int, heads: int, seq: int, head_dim: int, kind: str, seed: int, draw: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v in fp64 on the CPU, a pure function of (seed, draw, shape): N(0,1) or the FA3 outlier mix."""
    if kind not in INPUT_KINDS:
        raise ValueError(f"inputs must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
    state = np.random.SeedSequence([seed, draw, batch, heads, seq, head_dim]).generate_state(1)[0]
    g = torch.Generator().manual_seed(int(state))
    shape = (3, batch, heads, seq, head_dim)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "outlier":
        hit = torch.rand(shape, generator=g, dtype=torch.float64) < OUTLIER_P
        x = x + OUTLIER_STD * torch.randn(shape, generator=g, dtype=torch.float64) * hit
    return x[0], x[1], x[2]


def _chunk_rows(batch: int, heads: int, seq_k: int, device: torch.device) -> int:
    budget = 2 * 2**30 if device.type == "cuda" else 256 * 2**20
    per_row = batch * heads * seq_k * 8 * 3  # fp64 scores, probabilities and a temporary
    return max(1, budget // per_row)


@torch.no_grad()
def naive_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dtype: torch.dtype,
    scale: float | None = None,
    token_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Naive attention of q, k, v cast to `dtype`, evaluated a block of query rows at a time (bounded memory).

    With `dtype=torch.float64` this is the golden value. Without a token mask it runs the registered `naive` backend
    itself; query rows are independent in attention, so evaluating them in blocks changes nothing but memory.
    """
    b, h, nq, d = q.shape
    nk = k.shape[2]
    scale = d**-0.5 if scale is None else scale
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    naive = build_attention("naive", heads=h, head_dim=d, seq_len=nk, options={"scale": scale}).eval()
    rows = _chunk_rows(b, h, nk, q.device)
    parts = []
    for start in range(0, nq, rows):
        stop = min(start + rows, nq)
        if token_mask is None:
            parts.append(naive(q[:, :, start:stop], k, v))
        else:
            parts.append(masked_attention(q[:, :, start:stop], k, v, token_mask[None, :, start:stop], scale))
    return torch.cat(parts, dim=2)


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
    """Elementwise |out - ref| in fp64, summarised (a NaN or inf element makes max inf and is counted)."""
    ref = ref.double()
    diff = (out.double() - ref).abs()
    finite = torch.isfinite(diff)
    nonfinite = int((~finite).sum().item())
    if nonfinite:
        return DrawStats(float("inf"), float("inf"), float("inf"), nonfinite, float("inf"))
    norm = ref.norm().item()
    rel = diff.norm().item() / norm if norm > 0 else diff.norm().item()
    return DrawStats(diff.max().item(), diff.mean().item(), (diff * diff).mean().item(), 0, rel)


@dataclass
class ForwardSpec:
    """What `forward_study` sweeps. `tiles` entries are (block_m, block_n) or None for the backend's own tiles."""

    backends: list[str]
    dtypes: list[str] = field(default_factory=lambda: list(DTYPES))
    seqs: list[int] = field(default_factory=lambda: [256, 512, 1024])
    head_dim: int = 64
    heads: int = 8
    batch: int = 1
    draws: int = 5
    inputs: str = "normal"
    tiles: list[tuple[int, int] | None] = field(default_factory=lambda: [None])
    device: str = "cpu"
    seed: int = 0
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.backends:
            raise ValueError("no backends to study; name some with --attn (see `lra list`)")
        for name in self.backends:
            BACKENDS.get(name)  # unknown names fail with the known ones
        parse_dtypes(self.dtypes)
        if self.inputs not in INPUT_KINDS:
            raise ValueError(f"inputs must be one of {', '.join(INPUT_KINDS)}, got {self.inputs!r}")
        for key in ("head_dim", "heads", "batch", "draws"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be a positive integer, got {getattr(self, key)!r}")
        if not self.seqs or min(self.seqs) < 1:
            raise ValueError(f"sequence lengths must be positive integers, got {self.seqs}")
        dev = torch.device(self.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda was asked for but torch.cuda.is_available() is False; use --device cpu")
        unknown = sorted(set(self.options) - set(self.backends))
        if unknown:
            raise ValueError(f"options given for backend(s) not studied: {', '.join(unknown)}")


@dataclass
class _Acc:
    """Per-draw figures of one (backend, tiles, dtype, seq) cell."""

    draws: list[DrawStats] = field(default_factory=list)
    ctrl_backend: list[float] = field(default_factory=list)
    ctrl_naive: list[float] = field(default_factory=list)
    status: str = "ok"
    tiles_used: tuple[int, int] | None = None
    impl: str | None = None  # backends with a kernel and a PyTorch fallback: which one ran
    masked: bool = False  # a sparse layout: its golden is masked, so dense naive is no peer for it


def _std(xs: list[float]) -> float:
    return float(np.std(xs)) if len(xs) > 1 else 0.0


def _row(key: tuple[str, str, str, int], acc: _Acc, numel: int) -> dict[str, Any]:
    backend, tiles, dtype, seq = key
    row: dict[str, Any] = {"backend": backend, "tiles": tiles, "dtype": dtype, "seq": seq, "status": acc.status}
    row["tiles_used"] = tiles_label(acc.tiles_used) if acc.tiles_used else None
    if acc.impl:
        row["impl"] = acc.impl
    if acc.masked:
        row["masked"] = True
    if acc.status != "ok" or not acc.draws:
        return row
    maxes = [d.max for d in acc.draws]
    means = [d.mean for d in acc.draws]
    sq = float(np.mean([d.sq_mean for d in acc.draws]))
    mean = float(np.mean(means))
    row.update(
        draws=len(acc.draws),
        elements=numel,
        max=max(maxes),
        max_mean=float(np.mean(maxes)),
        max_std=_std(maxes),
        mean=mean,
        mean_std=_std(means),
        std=math.sqrt(max(sq - mean * mean, 0.0)) if math.isfinite(sq) else float("inf"),
        nonfinite=sum(d.nonfinite for d in acc.draws),
        rel_l2=float(np.mean([d.rel for d in acc.draws])),
    )
    if acc.ctrl_backend:
        cb, cn = max(acc.ctrl_backend), max(acc.ctrl_naive)
        row.update(ctrl_backend_vs_naive32=cb, ctrl_naive_vs_naive32=cn, ctrl_ratio=cb / cn if cn > 0 else None)
    return row


def _mask_key(mask: torch.Tensor | None) -> str | None:
    if mask is None:
        return None
    return hashlib.sha1(mask.cpu().numpy().tobytes() + str(tuple(mask.shape)).encode()).hexdigest()


def _token_mask(attn: AttentionBackend, seq: int, device: torch.device) -> torch.Tensor | None:
    """The allowed (query, key) pairs of a pattern-restricted backend (its `token_mask`); None for dense backends."""
    mask = attn.token_mask(seq, seq)
    return None if mask is None else mask.to(device=device, dtype=torch.bool)


def _cells(spec: ForwardSpec) -> list[tuple[str, tuple[int, int] | None]]:
    """(backend, tiles) pairs: tiled backends once per requested tile shape, the others once."""
    out = []
    for name in spec.backends:
        if has_tile_options(name):
            out += [(name, t) for t in spec.tiles]
        else:
            out.append((name, None))
    return out


@torch.no_grad()
def forward_study(spec: ForwardSpec) -> list[dict[str, Any]]:
    """Run the forward sweep; one row per (backend, tiles, dtype, seq) with its deviation figures or its status."""
    from rich.progress import TextColumn

    from lra.core.progress import console, make_progress

    spec.validate()
    device = torch.device(spec.device)
    cells = _cells(spec)
    accs: dict[tuple[str, str, str, int], _Acc] = defaultdict(_Acc)
    numel: dict[int, int] = {}
    total = len(spec.seqs) * spec.draws * len(spec.dtypes) * len(cells)
    with make_progress(TextColumn("{task.fields[what]}")) as progress:
        bar = progress.add_task("numerics forward", total=total, what="")
        for seq in spec.seqs:
            numel[seq] = spec.batch * spec.heads * seq * spec.head_dim
            built = {cell: _build(*cell, spec, seq) for cell in cells}
            for draw in range(spec.draws):
                q64, k64, v64 = (
                    x.to(device)
                    for x in draw_inputs(spec.batch, spec.heads, seq, spec.head_dim, spec.inputs, spec.seed, draw)
                )
                for dname in spec.dtypes:
                    dtype = DTYPES[dname]
                    q, k, v = q64.to(dtype), k64.to(dtype), v64.to(dtype)
                    refs: dict[str | None, dict[str, Any]] = {}
                    for name, tiles in cells:
                        key = (name, tiles_label(tiles) if has_tile_options(name) else "-", dname, seq)
                        progress.update(bar, what=f"{name} {key[1]} {dname} N={seq} draw {draw + 1}/{spec.draws}")
                        acc, cell = accs[key], built[(name, tiles)]
                        if acc.status == "ok" and isinstance(cell, str):
                            acc.status = cell
                        if acc.status == "ok":
                            reason = why_cannot_run(name, device, dtype, spec.head_dim)
                            acc.status = f"skipped: {reason}" if reason else "ok"
                        if acc.status == "ok":
                            _measure(acc, cell, q, k, v, refs, device)
                            if acc.status != "ok":
                                console.print(f"[yellow]{name} {key[1]} {dname} N={seq}:[/] {acc.status}")
                        progress.advance(bar)
                    del refs
    rows = [_row(key, acc, numel[key[3]]) for key, acc in accs.items()]
    _add_ratios(rows)
    return rows


@dataclass
class _Cell:
    """A built backend with the allowed-pairs mask of its golden (None: dense) and that mask's cache key."""

    attn: torch.nn.Module
    mask: torch.Tensor | None
    mask_key: str | None


def _build(name: str, tiles: tuple[int, int] | None, spec: ForwardSpec, seq: int) -> _Cell | str:
    """The backend for one (backend, tiles) cell at length `seq`, or a status string when it cannot be built."""
    options = dict(spec.options.get(name, {}))
    if tiles is not None:
        options.update(block_m=tiles[0], block_n=tiles[1])
    try:
        attn = build_attention(name, heads=spec.heads, head_dim=spec.head_dim, seq_len=seq, options=options)
        attn = attn.to(spec.device).eval()
        mask = _token_mask(attn, seq, torch.device(spec.device))
    except Exception as e:  # e.g. a tile shape the kernel refuses: the row says why
        return f"error: {type(e).__name__}: {e}"
    return _Cell(attn, mask, _mask_key(mask))


def _measure(acc: _Acc, cell: _Cell, q, k, v, refs: dict[str | None, dict[str, Any]], device: torch.device) -> None:
    """One draw of one cell: references (shared by cells with the same mask), the backend's output, its figures."""
    dname = dtype_name(q.dtype)
    try:
        if cell.mask_key not in refs:
            refs[cell.mask_key] = _references(q, k, v, dname, cell.attn.scale, cell.mask)
    except torch.OutOfMemoryError:
        acc.status = "oom: the naive references (fp64 golden) did not fit"
        torch.cuda.empty_cache()
        return
    try:
        out = _call(cell.attn, q, k, v, q.dtype)
    except torch.OutOfMemoryError:
        acc.status = "oom"
        torch.cuda.empty_cache()
        return
    except Exception as e:  # one failing cell is a row of the study, not the end of it
        acc.status = f"error: {type(e).__name__}: {e}"
        return
    r = refs[cell.mask_key]
    acc.masked = cell.mask is not None
    acc.tiles_used = effective_tiles(cell.attn, q.dtype, device)
    if cell.attn.has_fallback:
        acc.impl = "kernel" if cell.attn.runs_kernel(device) else "fallback"
    acc.draws.append(deviation(out, r["golden"]))
    if "naive32" in r:
        acc.ctrl_backend.append(deviation(out, r["naive32"]).max)
        acc.ctrl_naive.append(r["ctrl_naive"])


def _call(attn: torch.nn.Module, q, k, v, dtype: torch.dtype) -> torch.Tensor:
    if any(p.is_floating_point() for p in list(attn.parameters()) + list(attn.buffers())):
        attn.to(dtype)
    out = attn(q, k, v)
    if out.device.type == "cuda":
        torch.cuda.synchronize(out.device)
    return out


def _references(q, k, v, dname: str, scale: float, mask: torch.Tensor | None) -> dict[str, Any]:
    """The golden (naive in fp64 on these inputs) and, for fp16/bf16, naive in fp32 and naive's own control gap."""
    refs: dict[str, Any] = {"golden": naive_reference(q, k, v, torch.float64, scale, mask)}
    if dname in LOW_PRECISION:
        naive32 = naive_reference(q, k, v, torch.float32, scale, mask)
        naive_low = naive_reference(q, k, v, q.dtype, scale, mask)
        refs["naive32"] = naive32
        refs["ctrl_naive"] = deviation(naive_low, naive32).max
    return refs


def _add_ratios(rows: list[dict[str, Any]]) -> None:
    """ratio_vs_naive: a row's max deviation over naive's at the same dtype and length (the paper's 'about 10x');
    not for masked (sparse) rows, whose golden differs from dense naive's: their `ctrl_ratio` is the comparison."""
    naive = {(r["dtype"], r["seq"]): r.get("max") for r in rows if r["backend"] == "naive" and r["status"] == "ok"}
    for r in rows:
        base = naive.get((r["dtype"], r["seq"]))
        if r["status"] == "ok" and not r.get("masked") and base and math.isfinite(base) and base > 0:
            r["ratio_vs_naive"] = r["max"] / base


def _representative(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row set shown in the leaderboard for one backend: default tiles (or the first), the longest length."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return {"seq": None, "tiles": None, "deviation": {}}
    labels = [r["tiles"] for r in ok]
    tiles = "-" if "-" in labels else DEFAULT_TILES if DEFAULT_TILES in labels else labels[0]
    ok = [r for r in ok if r["tiles"] == tiles]
    seq = max(r["seq"] for r in ok)
    dev = {}
    for r in ok:
        if r["seq"] == seq:
            dev[r["dtype"]] = {k: r[k] for k in ("max", "mean", "std", "max_std", "rel_l2") if k in r}
            if "ctrl_ratio" in r:
                dev[r["dtype"]]["ctrl_ratio"] = r["ctrl_ratio"]
            if "ratio_vs_naive" in r:
                dev[r["dtype"]]["ratio_vs_naive"] = r["ratio_vs_naive"]
    return {"seq": seq, "tiles": tiles, "deviation": dev}


def forward_records(rows: list[dict[str, Any]], spec: ForwardSpec, env: dict[str, Any]) -> list[dict[str, Any]]:
    """One result record per backend (kind 'numerics_forward'), in the format `lra leaderboard` tabulates."""
    by_backend: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_backend[r["backend"]].append(r)
    settings = {
        "dtypes": spec.dtypes,
        "seqs": spec.seqs,
        "head_dim": spec.head_dim,
        "heads": spec.heads,
        "batch": spec.batch,
        "draws": spec.draws,
        "inputs": spec.inputs,
        "tiles": [tiles_label(t) for t in spec.tiles],
        "seed": spec.seed,
        "options": spec.options,
    }
    out = []
    for backend, brows in by_backend.items():
        rep = _representative(brows)
        metrics = {"deviation": rep["deviation"], "seq": rep["seq"], "tiles": rep["tiles"], "rows": brows}
        out.append(
            {
                "kind": "numerics_forward",
                **env,
                "backend": backend,
                "inputs": spec.inputs,
                "study": settings,
                "metrics": metrics,
            }
        )
    return out


def _fmt(x: float | None, spec: str = ".2e") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def format_forward_table(rows: list[dict[str, Any]], title: str = "numeric deviation vs fp64 golden"):
    """A rich table of the forward rows (the control's two terms are in the records; the table shows their ratio).

    Cells that did not run show a one-word status; `status_lines(rows)` says why.
    """
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("backend", "tiles", "dtype", "N", "max", "+-draws", "mean", "std", "rel L2", "/naive", "ctrl"):
        t.add_column(col, no_wrap=True)
    order = {d: i for i, d in enumerate(DTYPES)}
    for r in sorted(rows, key=lambda r: (r["backend"], r["tiles"], order[r["dtype"]], r["seq"])):
        tiles = r["tiles"] if r["tiles"] != DEFAULT_TILES or not r.get("tiles_used") else f"({r['tiles_used']})"
        if r["status"] != "ok":
            t.add_row(r["backend"], tiles, r["dtype"], str(r["seq"]), r["status"].split(":")[0], *[""] * 6)
            continue
        cells = [_fmt(r[k], ".1e") for k in ("max", "max_std", "mean", "std", "rel_l2")]
        t.add_row(
            r["backend"],
            tiles,
            r["dtype"],
            str(r["seq"]),
            *cells,
            _fmt(r.get("ratio_vs_naive"), ".2f"),
            _fmt(r.get("ctrl_ratio"), ".2f"),
        )
    return t


def status_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per distinct reason a cell did not run, with the cells it covers."""
    why: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            why[(r["backend"], r["tiles"], r["status"])].append(f"{r['dtype']}/N={r['seq']}")
    return [f"{b} {t}: {status} ({', '.join(cells)})" for (b, t, status), cells in why.items()]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_forward(rows: list[dict[str, Any]], path: str | Path) -> Path | None:
    """Max deviation against sequence length, one panel per dtype, one line per (backend, tiles); None without
    matplotlib (the `plots` extra)."""
    plt = _pyplot()
    if plt is None:
        return None
    ok = [r for r in rows if r["status"] == "ok" and math.isfinite(r["max"]) and r["max"] > 0]
    dtypes = [d for d in DTYPES if any(r["dtype"] == d for r in ok)]
    if not dtypes:
        return None

    def label(r: dict[str, Any]) -> str:
        return r["backend"] if r["tiles"] in ("-", DEFAULT_TILES) else f"{r['backend']} {r['tiles']}"

    labels = sorted({label(r) for r in ok})
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colors = {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.5 * len(dtypes), 4), squeeze=False)
    for ax, d in zip(axes[0], dtypes):
        lines: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
        for r in ok:
            if r["dtype"] == d:
                lines[label(r)].append((r["seq"], r["max_mean"], r["max_std"]))
        for lab, pts in sorted(lines.items()):
            pts.sort()
            xs, ys, es = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
            ax.errorbar(xs, ys, yerr=es, marker="o", color=colors[lab], label=lab, capsize=2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("max |out - golden| (mean over draws)")
        ax.set_title(d)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colors[lab], marker="o", label=lab) for lab in labels]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 6), 1, 1))
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# weights


def wasserstein1(a: torch.Tensor, b: torch.Tensor) -> float:
    """The 1-D Wasserstein-1 distance between the empirical distributions of two tensors' values (same size):
    the mean of |sort(a) - sort(b)|, exact for equal-size samples."""
    if a.numel() != b.numel():
        raise ValueError(f"Wasserstein-1 here compares tensors of one size, got {a.numel()} and {b.numel()} values")
    sa = torch.sort(a.detach().double().flatten()).values
    sb = torch.sort(b.detach().double().flatten()).values
    return (sa - sb).abs().mean().item()


def weight_distances(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Per weight tensor: max |W_A - W_B| and the Wasserstein-1 distance of their value distributions."""
    if set(a) != set(b):
        raise ValueError(f"the two models' weights differ in names: {sorted(set(a) ^ set(b))}")
    out = {}
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            raise ValueError(f"weight {name} has shape {tuple(x.shape)} in one run and {tuple(y.shape)} in the other")
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


@dataclass(frozen=True)
class RunSpec:
    """One training run of the weights study: backend, seed and precision ('none' = fp32, 'bf16', 'fp16')."""

    backend: str
    seed: int
    amp: str


@contextlib.contextmanager
def _cpu_autocast(device: torch.device, amp: str) -> Iterator[None]:
    """Make the training loop autocast on the CPU too while a run of the study trains (it does so only on CUDA).

    The loop picks its autocast context through `lra.train._autocast`; for a bf16 (fp16) run on the CPU this swaps in
    torch.autocast('cpu', bfloat16 (float16)) for the duration of the run, so that CPU and CUDA studies compare the
    same precisions.
    """
    import lra.train.run as train_mod

    if device.type != "cpu" or amp == "none":
        yield
        return
    original = getattr(train_mod, "_autocast", None)
    if original is None:
        raise RuntimeError("lra.train no longer has _autocast; the CPU autocast control needs updating")
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16

    def cpu_autocast(dev: torch.device, run_amp: str):
        if dev.type == "cpu" and run_amp != "none":
            return torch.autocast(device_type="cpu", dtype=dtype)
        return original(dev, run_amp)

    train_mod._autocast = cpu_autocast
    try:
        yield
    finally:
        train_mod._autocast = original


@contextlib.contextmanager
def _deterministic(enabled: bool) -> Iterator[None]:
    """Deterministic kernels while the study trains (CUDA's atomics-based backward ops would otherwise add
    run-to-run noise to every pair, and the zero control would not be zero). Ops without one only warn."""
    if not enabled:
        yield
        return
    prev, prev_warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's condition for reproducible results
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)


def _snapshotter(folder: Path):
    """An on_eval hook that stores the model's parameters at each evaluation step (atomically, on the CPU)."""
    folder.mkdir(parents=True, exist_ok=True)

    def on_eval(step: int, model: torch.nn.Module) -> None:
        state = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}
        with atomic_path(folder / f"step_{step:08d}.pt") as tmp:
            torch.save(state, tmp)

    return on_eval


def _snapshots(folder: Path) -> dict[int, Path]:
    return {int(p.stem.split("_")[1]): p for p in sorted(folder.glob("step_*.pt"))}


def weights_plan(
    attn_a: str, attn_b: str, seed: int, base_amp: str, controls: list[str], low: str = "bf16"
) -> tuple[dict[str, RunSpec], dict[str, tuple[str, str]]]:
    """The runs (label -> spec) and the pairs compared (pair -> (label, label)).

    A and B always train separately, even when they are the same spec (the zero control). A control reuses a run
    already planned with the same spec.
    """
    bad = sorted(set(controls) - set(CONTROLS))
    if bad:
        raise ValueError(f"unknown control(s) {', '.join(bad)}; choose from {', '.join(CONTROLS)} (or none)")
    runs: dict[str, RunSpec] = {"a": RunSpec(attn_a, seed, base_amp), "b": RunSpec(attn_b, seed, base_amp)}

    def label_for(spec: RunSpec, label: str) -> str:
        for existing, s in runs.items():
            if s == spec:
                return existing
        runs[label] = spec
        return label

    pairs = {f"{attn_a} vs {attn_b}": ("a", "b")}
    if "seeds" in controls:
        first = label_for(RunSpec("naive", seed, base_amp), "naive_seed")
        pairs[f"naive seed {seed} vs {seed + 1}"] = (
            first,
            label_for(RunSpec("naive", seed + 1, base_amp), "naive_seed2"),
        )
    if "amp" in controls:
        full = label_for(RunSpec("naive", seed, "none"), "naive_fp32")
        pairs[f"naive fp32 vs {low}"] = (full, label_for(RunSpec("naive", seed, low), f"naive_{low}"))
    return runs, pairs


def pair_curves(snap_a: dict[int, Path], snap_b: dict[int, Path]) -> dict[str, Any]:
    """Distances at every step both runs evaluated: aggregated curves, slopes and the per-tensor figures."""
    steps = sorted(set(snap_a) & set(snap_b))
    curve: dict[str, Any] = {"steps": steps, "max_abs": [], "w1_mean": [], "w1_max": [], "per_tensor": {}}
    for step in steps:
        a = torch.load(snap_a[step], map_location="cpu", weights_only=True)
        b = torch.load(snap_b[step], map_location="cpu", weights_only=True)
        dist = weight_distances(a, b)
        curve["max_abs"].append(max(d["max_abs"] for d in dist.values()))
        curve["w1_mean"].append(float(np.mean([d["w1"] for d in dist.values()])))
        curve["w1_max"].append(max(d["w1"] for d in dist.values()))
        for name, d in dist.items():
            per = curve["per_tensor"].setdefault(name, {"max_abs": [], "w1": []})
            per["max_abs"].append(d["max_abs"])
            per["w1"].append(d["w1"])
    curve["slope_max_abs"] = slope(steps, curve["max_abs"])
    curve["slope_w1_mean"] = slope(steps, curve["w1_mean"])
    return curve


def _ratio(x: float | None, y: float | None) -> float | None:
    if x is None or y is None or y == 0:
        return None
    return x / y


def weights_study(
    task: str,
    preset: str | None = "tiny",
    overrides: list[str] | None = None,
    attn_a: str = "naive",
    attn_b: str = "flash",
    controls: list[str] | tuple[str, ...] = CONTROLS,
    device: str | None = None,
    data_dir: str | None = None,
    keep_runs: str | Path | None = None,
    low: str = "bf16",
    deterministic: bool = True,
) -> dict[str, Any]:
    """Train the planned runs (A, B and the controls), compare their weights at every evaluation; returns the record.

    Runs go to a temporary runs root (or `keep_runs`) and write no result records of their own. `deterministic`
    turns on torch's deterministic algorithms during the runs, so that only the compared difference moves weights.
    """
    from lra.core.environment import environment
    from lra.core.progress import console
    from lra.train.config import head_dim_of, load_config
    from lra.train.run import RunSetupError, resolve_device, train

    if low not in LOW_PRECISION:
        raise ValueError(f"the low-precision control runs in fp16 or bf16, not {low!r}")
    config = load_config(task, preset, list(overrides or []))
    dev = resolve_device(device)
    for name in (attn_a, attn_b, "naive"):
        reason = why_cannot_run(name, dev, None, head_dim_of(config))
        if reason:
            raise RunSetupError(reason)
    seed = int(config["train"]["seed"])
    # A, B and the seed control train at train.amp (bf16 autocast by default: the paper's setting) on every device;
    # `lra run` ignores amp on the CPU, the study applies it there too (_cpu_autocast)
    base_amp = config["train"]["amp"]
    runs, pairs = weights_plan(attn_a, attn_b, seed, base_amp, list(controls), low)

    tmp = None
    if keep_runs is None:
        tmp = tempfile.TemporaryDirectory(prefix="lra-numerics-")
        root = Path(tmp.name)
    else:
        root = Path(keep_runs)
    try:
        snaps: dict[str, dict[int, Path]] = {}
        for i, (label, spec) in enumerate(runs.items(), 1):
            console.print(
                f"[bold]numerics weights[/] run {i}/{len(runs)}: {spec.backend}, seed {spec.seed}, "
                f"{'fp32' if spec.amp == 'none' else spec.amp + ' autocast'}"
            )
            cfg = copy.deepcopy(config)
            cfg["train"]["seed"] = spec.seed
            cfg["train"]["amp"] = spec.amp
            with _cpu_autocast(dev, spec.amp), _deterministic(deterministic):
                train(
                    cfg,
                    spec.backend,
                    out_dir=root / label,
                    device=str(dev),
                    data_dir=data_dir,
                    save_result=False,
                    on_eval=_snapshotter(root / label / "weights"),
                )
            snaps[label] = _snapshots(root / label / "weights")
        curves = {}
        for pair, (la, lb) in pairs.items():
            curves[pair] = pair_curves(snaps[la], snaps[lb])
            curves[pair]["runs"] = [asdict(runs[la]), asdict(runs[lb])]
    finally:
        if tmp is not None:
            tmp.cleanup()

    ab = curves[f"{attn_a} vs {attn_b}"]
    ratios: dict[str, Any] = {}
    for name, key in (("seeds", f"naive seed {seed} vs {seed + 1}"), ("amp", f"naive fp32 vs {low}")):
        if key in curves:
            ratios[f"ab_over_{name}"] = {
                "w1_mean": _ratio(ab["slope_w1_mean"], curves[key]["slope_w1_mean"]),
                "max_abs": _ratio(ab["slope_max_abs"], curves[key]["slope_max_abs"]),
            }
    return {
        "kind": "numerics_weights",
        **environment(dev),
        "task": config["task"],
        "backend": attn_b,
        "backend_a": attn_a,
        "backend_b": attn_b,
        "preset": config["preset"],
        "steps": config["train"]["steps"],
        "controls": list(controls),
        "low_precision": low,
        "deterministic": deterministic,
        "metrics": {"pairs": curves, "slope_ratios": ratios},
        "config": config,
    }


def format_weights_tables(record: dict[str, Any]) -> list[Any]:
    """Rich tables: the curves over steps (max |dW| and mean W1 per pair) and the slopes with their ratios."""
    from rich.table import Table

    pairs = record["metrics"]["pairs"]
    curves = Table(title=f"weight deviation over training: {record['task']} ({record['preset']})")
    curves.add_column("step")
    for pair in pairs:
        curves.add_column(f"{pair}: max|dW|")
        curves.add_column(f"{pair}: W1 mean")
    steps = sorted({s for c in pairs.values() for s in c["steps"]})
    for step in steps:
        cells = [str(step)]
        for c in pairs.values():
            if step in c["steps"]:
                i = c["steps"].index(step)
                cells += [_fmt(c["max_abs"][i]), _fmt(c["w1_mean"][i])]
            else:
                cells += ["-", "-"]
        curves.add_row(*cells)
    slopes = Table(title="growth per step (least-squares slope over evaluations)")
    for col in ("pair", "slope max|dW|", "slope W1 mean"):
        slopes.add_column(col)
    for pair, c in pairs.items():
        slopes.add_row(pair, _fmt(c["slope_max_abs"]), _fmt(c["slope_w1_mean"]))
    for name, r in record["metrics"]["slope_ratios"].items():
        slopes.add_row(f"ratio {name.replace('_', ' ')}", _fmt(r["max_abs"], ".3g"), _fmt(r["w1_mean"], ".3g"))
    return [curves, slopes]


def plot_weights(record: dict[str, Any], path: str | Path) -> Path | None:
    """max |dW| and mean W1 against step, one line per pair (log scale); None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for pair, c in record["metrics"]["pairs"].items():
        for ax, key in zip(axes, ("max_abs", "w1_mean")):
            pts = [(s, v) for s, v in zip(c["steps"], c[key]) if v > 0]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=pair)
    for ax, ylabel in zip(axes, ("max |W_A - W_B| over tensors", "Wasserstein-1, mean over tensors")):
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"weight deviation: {record['task']} ({record['preset']})")
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return path
