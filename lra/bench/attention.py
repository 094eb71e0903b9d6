"""Attention benchmark: every backend timed in the same process on the same shapes, forward and forward+backward.

`bench_attention(...)` returns one row per (backend, head dim, sequence length, mode): milliseconds (median of
CUDA-event timings after warm-up, fresh random non-zero inputs), TFLOP/s (forward 4*B*H*N^2*D, backward 2.5x the
forward, both times the layout density for block-sparse backends), peak memory, the attention dropout asked for and
the one the backend applies (flash quantises p to 1/256), the backend's options (a `Variant`: `flash[block_m=64]`
beside `flash`), and a status: "ok", "oom" (recorded, not raised) or
"unsupported: why". A CUDA run on a machine without CUDA is refused before anything runs. `format_attention_table`
renders the rows with each backend's speed-up over every peer at the same shape. Shapes, unless given: a fixed number
of tokens per batch (batch = batch_tokens // seq, 131,072 tokens by default) at a model width of 512 (heads =
512 // head_dim: 8 at head dim 64), so every length does the same work per token.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from rich.markup import escape

from attention_impls.registry import BACKENDS, backend_options, build_attention, scores_too_big, why_cannot_run
from lra.bench.variants import Variant, check_unique
from lra.core.dtypes import dtype_name, parse_dtype
from lra.core.errors import ConfigError, RunSetupError, is_oom
from lra.core.progress import make_progress, progress_line
from lra.core.records import backend_label
from lra.core.tables import Column, fitted_table
from lra.train.settings import FRACTION

MODES = ("fwd", "fwd_bwd")
BWD_FACTOR = 2.5  # backward FLOPs per forward FLOP (FlashAttention paper's convention)
CPU_MAX_REPS = 50


def attention_flops(batch: int, heads: int, seq: int, head_dim: int, mode: str, density: float = 1.0) -> float:
    """FLOPs of one call: forward 4*B*H*N^2*D; forward+backward (1 + 2.5) times that; times the layout density."""
    fwd = 4.0 * batch * heads * seq * seq * head_dim * density
    return fwd if mode == "fwd" else fwd * (1.0 + BWD_FACTOR)


def require_device(device: str) -> None:
    """Refuse a benchmark on a device this machine does not have, before anything is measured or stored."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise RunSetupError(
            f"bench on {device}: CUDA is not available on this machine; run with --device cpu (slow: small shapes; "
            "Triton kernels need TRITON_INTERPRET=1 there)"
        )


def time_ms(fn: Callable[[], Any], device: str, warmup_ms: float, rep_ms: float, grads: list[torch.Tensor],
             on_rep: Callable[[int, int], None] | None = None) -> float:  # fmt: skip
    """Median milliseconds of fn(): CUDA events via triton's do_bench, else wall clock over at least 3 calls and
    at most `rep_ms` (on_rep(done, planned) after each CPU call, for progress)."""
    if device == "cuda":
        import triton.testing

        return float(
            triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grads, return_mode="median")
        )
    times: list[float] = []
    deadline = time.perf_counter() + rep_ms / 1000.0
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < CPU_MAX_REPS):
        for g in grads:
            g.grad = None
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
        if on_rep is not None:
            planned = max(3, min(CPU_MAX_REPS, len(times) + int((deadline - time.perf_counter()) * 1000 / times[-1])))
            on_rep(len(times), planned)
    return statistics.median(times)


def bench_attention(
    backends: Sequence[str | Variant],
    seqs: Iterable[int],
    head_dims: Iterable[int],
    dtype: str | torch.dtype = "bf16",
    batch_tokens: int = 131072,
    heads: int | None = None,
    modes: Sequence[str] = MODES,
    layout: Any = None,
    device: str = "cuda",
    options: dict[str, dict[str, Any]] | None = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    batch: int | None = None,
    dropout: float = 0.0,
) -> list[dict[str, Any]]:
    """Time each backend at each (head dim, seq, mode) in this process; one row per measurement (see module doc).

    `backends`: names or `Variant`s (a backend with options; one backend may come with several). `layout` goes to
    every backend that takes a `layout` option (block-sparse ones) and sets none; `options` maps a backend name to
    options of all its variants (a variant's own win); `batch` overrides batch_tokens // seq (e.g. the Pathfinder
    shape B=512 at N=1024); `dropout` is the attention dropout of every backend (applied in forward-only rows too).
    """
    dt = parse_dtype(dtype)
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ConfigError(f"unknown mode(s) {bad}; use {MODES}")
    FRACTION.check("--dropout", dropout)  # the rule of model.attention_dropout
    require_device(device)
    variants = [_variant(b, options) for b in backends]  # unknown names fail here, listing the known ones
    check_unique(variants)
    seqs, head_dims = list(seqs), list(head_dims)
    _check_sizes({"--seq": seqs, "--head-dim": head_dims, "--batch-tokens": [batch_tokens], "--heads": [heads],
                  "--batch": [batch]})  # fmt: skip
    dev_name = torch.cuda.get_device_name() if device == "cuda" else device
    shape = {"layout": layout, "device": device, "dropout": dropout}
    timing = {"warmup_ms": warmup_ms, "rep_ms": rep_ms}
    rows: list[dict[str, Any]] = []
    with make_progress() as progress:
        overall = progress.add_task("bench attention", total=len(seqs) * len(head_dims) * len(variants) * len(modes))
        current = progress.add_task("row", total=None)
        for d in head_dims:
            h = heads if heads is not None else max(1, 512 // d)
            for n in seqs:
                b = batch if batch is not None else max(1, batch_tokens // n)
                for variant in variants:
                    for mode in modes:
                        what = escape(f"{variant.label} N={n} D={d} B={b} {mode}")
                        progress.reset(current, total=None, description=what)

                        def on_rep(done: int, planned: int) -> None:
                            progress.update(current, completed=done, total=planned)

                        row = _bench_one(variant, n, d, h, b, dt, mode, **shape, **timing, on_rep=on_rep)
                        row["device"] = dev_name
                        rows.append(row)
                        progress.advance(overall)
                        _row_line(row, len(rows), progress.tasks[overall].total)
    return rows


def _variant(backend: str | Variant, options: dict[str, dict[str, Any]] | None) -> Variant:
    """`backend` as a Variant (a registered name), with the `options` given for its name under its own."""
    variant = backend if isinstance(backend, Variant) else Variant(backend)
    BACKENDS.get(variant.backend)
    return Variant(variant.backend, {**(options or {}).get(variant.backend, {}), **variant.options})


def _row_line(row: dict[str, Any], done: int, total: float | None) -> None:
    """The row just measured, as a `progress_line`."""
    result = f"{row['ms']:.3f} ms" if row["status"] == "ok" else row["status"]
    what = f"{backend_label(row)} N={row['seq']} D={row['head_dim']} B={row['batch']} {row['mode']}"
    progress_line(f"bench attention {done}/{total:.0f}: {what}: {result}")


def _check_sizes(sizes: dict[str, list[int | None]]) -> None:
    """Every size given (None: not given) is a positive integer; else a ConfigError naming the option."""
    for flag, values in sizes.items():
        bad = [v for v in values if v is not None and v < 1]
        if bad or (flag in ("--seq", "--head-dim") and not values):
            raise ConfigError(f"{flag} {','.join(map(str, bad)) or '(none)'}: give positive integers, e.g. 1024,4096")


def _row(variant, n, d, h, b, dt, mode, dropout) -> dict[str, Any]:
    return {
        "backend": variant.backend,
        "options": dict(variant.options),
        "seq": n,
        "head_dim": d,
        "heads": h,
        "batch": b,
        "dtype": dtype_name(dt),
        "mode": mode,
        "dropout": dropout,
        "dropout_effective": dropout,
        "ms": None,
        "tflops": None,
        "peak_mem_mb": None,
        "density": 1.0,
        "layout": None,
        "status": "ok",
    }


def _bench_one(variant, n, d, h, b, dt, mode, *, layout, device, dropout, warmup_ms, rep_ms,
               on_rep=None) -> dict[str, Any]:  # fmt: skip
    name = variant.backend
    row = _row(variant, n, d, h, b, dt, mode, dropout)
    reason = why_cannot_run(name, device, dt, d)
    if reason is not None:
        row["status"] = f"unsupported: {reason}"
        return row
    too_big = scores_too_big(name, batch=b, heads=h, seq_len=n, device=device)
    if too_big is not None:
        row["status"] = f"oom: {too_big}"  # refused before allocating (the same row as an out-of-memory one)
        return row
    opts = dict(variant.options)
    if layout is not None and "layout" in backend_options(name):
        opts.setdefault("layout", layout)
    if opts.get("layout") is not None:
        row["layout"] = opts["layout"] if isinstance(opts["layout"], str) else json.dumps(opts["layout"], default=str)
    tensors: list[torch.Tensor] = []
    try:
        attn = build_attention(name, heads=h, head_dim=d, seq_len=n, dropout=dropout, options=opts).to(device)
        attn.train(mode == "fwd_bwd" or dropout > 0)
        row["density"] = float(attn.density(n))
        row["dropout_effective"] = float(getattr(attn, "effective_dropout", attn.dropout))  # 0: applies none
        fn, grads, tensors = _call(attn, b, h, n, d, dt, mode, device)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        fn()  # warm-up: compiles (Triton, torch.compile) and measures memory
        if device == "cuda":
            torch.cuda.synchronize()
            row["peak_mem_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        ms = time_ms(fn, device, warmup_ms, rep_ms, grads, on_rep)
        row["ms"] = float(f"{ms:.5g}")
        row["tflops"] = float(f"{attention_flops(b, h, n, d, mode, row['density']) / (ms * 1e-3) / 1e12:.4g}")
    except Exception as err:  # noqa: BLE001 - a benchmark row records the failure and the sweep goes on
        if is_oom(err):
            row["status"] = "oom"
        else:
            row["status"] = f"error: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    finally:
        del tensors
        if device == "cuda":
            torch.cuda.empty_cache()
    return row


def _call(attn, b, h, n, d, dt, mode, device):
    """(the timed call, the tensors whose .grad it fills, every tensor it holds) on fresh random inputs."""
    gen = torch.Generator(device=device).manual_seed(torch.seed() % 2**31)
    q, k, v = (torch.randn(b, h, n, d, device=device, dtype=dt, generator=gen) for _ in range(3))
    if mode == "fwd":

        def fwd():
            with torch.no_grad():
                attn(q, k, v)

        return fwd, [], [q, k, v]
    for t in (q, k, v):
        t.requires_grad_(True)
    dout = torch.randn(b, h, n, d, device=device, dtype=dt, generator=gen)

    def fwd_bwd():
        attn(q, k, v).backward(dout)

    return fwd_bwd, [q, k, v], [q, k, v, dout]


def peer_ratios(rows: Sequence[dict[str, Any]]) -> dict[tuple, dict[str, float]]:
    """For each measured row, its speed-up over every other backend (with its options: `backend_label`) at the same
    shape: peer_ms / ms."""
    groups: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("ms"):
            key = (r["seq"], r["head_dim"], r["heads"], r["batch"], r["dtype"], r["mode"])
            groups.setdefault(key, {})[backend_label(r)] = r["ms"]
    out: dict[tuple, dict[str, float]] = {}
    for key, times in groups.items():
        for name, ms in times.items():
            out[(name, *key)] = {peer: round(pms / ms, 3) for peer, pms in times.items() if peer != name}
    return out


ATTENTION_COLUMNS = (
    Column("backend"), Column("N", "right"), Column("D", "right"), Column("H", "right", drop=6),
    Column("B", "right", drop=5), Column("dtype", drop=7), Column("mode"), Column("p", "right", drop=8),
    Column("density", "right", drop=9), Column("ms", "right"), Column("TFLOP/s", "right", drop=3),
    Column("peak MB", "right", drop=4), Column("vs peers", wrap=True),
)  # fmt: skip


def format_attention_table(
    rows: Sequence[dict[str, Any]], title: str = "attention benchmark", *, width: int = 80, wide: bool = False
):
    """A rich Table of the rows, with each backend's speed-up over its peers (x > 1: faster than that peer), fitted
    into `width` columns (`lra.core.tables`; `wide`: every column)."""
    ratios = peer_ratios(rows)
    order = sorted(rows, key=lambda r: (r["head_dim"], r["seq"], r["mode"], backend_label(r)))
    cells = []
    for r in order:
        label = backend_label(r)
        key = (label, r["seq"], r["head_dim"], r["heads"], r["batch"], r["dtype"], r["mode"])
        vs = ", ".join(f"{p} {x:.2f}x" for p, x in sorted(ratios.get(key, {}).items()))
        ok = r["status"] == "ok"
        cells.append([
            escape(label), str(r["seq"]), str(r["head_dim"]), str(r["heads"]), str(r["batch"]), r["dtype"], r["mode"],
            f"{r.get('dropout_effective', r.get('dropout', 0.0)):.4g}", f"{r.get('density', 1.0):.3f}",
            f"{r['ms']:.3f}" if ok else "-", f"{r['tflops']:.1f}" if ok else "-",
            f"{r['peak_mem_mb']:.0f}" if ok and r.get("peak_mem_mb") is not None else "-",
            escape(vs if ok else r["status"]),
        ])  # fmt: skip
    return fitted_table(title, ATTENTION_COLUMNS, cells, width=width, wide=wide)
