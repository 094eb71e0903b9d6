"""Tile tuner for the flash kernels (`lra bench tiles`): the fastest tiles per head dim on this machine.

For each head dim, at a shape of that head dim's LRA workload (or `shape`), it times every forward candidate (forward
only), then every backward candidate with the best forward (forward + backward: the forward is the same in each, so
the ranking is the backward's). All timing goes through `flash_attention`, the kernels' public entry point, with
the same dropout as training when asked. With `jobs` > 1 the candidates are compiled first in that many spawned
processes (into Triton's on-disk cache), so the timing process mostly loads kernels. The result is one record:
every candidate's time and the best `Tiles` per head dim, to paste into attention_impls/kernels/tiles.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import torch

from attention_impls.kernels import TILE_OPTIONS, Tiles, default_tiles
from lra.bench.attention import attention_flops, require_device, time_ms
from lra.core.dtypes import dtype_name, parse_dtype
from lra.core.environment import environment
from lra.core.errors import ConfigError
from lra.core.pools import run_jobs
from lra.core.progress import make_progress
from lra.core.records import bench_tiles_record

# Head dim -> (batch, heads, seq): the shapes the defaults were tuned at. Head dims 32-128: `lra bench attention`'s
# default shapes (131,072 tokens a batch, heads = 512 // head_dim) at 4K or 8K tokens; 8: Pathfinder (N=1K, H=4,
# B=512); 16: Path-X's heads and batch (H=2, B=64) at 4K tokens, a shorter proxy (docs/flash_kernel.md, final tables).
SHAPES: dict[int, tuple[int, int, int]] = {
    8: (512, 4, 1024),
    16: (64, 2, 4096),
    32: (32, 16, 4096),
    64: (16, 8, 8192),
    128: (32, 4, 4096),
}
# Forward candidates, columns (block_m, block_n, num_warps, num_stages); backward (bwd_block_m, bwd_block_n, ...).
_FWD_SMALL = [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 3), (64, 128, 4, 3), (128, 64, 8, 2)]
_FWD_64 = [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3), (64, 64, 4, 3), (128, 32, 4, 4)]
_FWD_128 = [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3), (128, 64, 4, 2), (64, 128, 4, 2)]
_BWD = [(32, 128, 4, 3), (64, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 2), (16, 128, 4, 3), (32, 128, 8, 2)]
# Head dims below 32 (the Pathfinder family's 8 and 16), where the exponentials and the dropout RNG bound the
# kernels rather than the matrix units: narrower key tiles, more rows per program, fewer warps.
_FWD_TINY = [(256, 32, 8, 3), (64, 32, 4, 3), (128, 16, 4, 3), (64, 32, 2, 3), (256, 64, 8, 2)]
_BWD_TINY = [(16, 64, 4, 3), (32, 32, 4, 3), (16, 256, 8, 2), (32, 64, 2, 3), (64, 32, 4, 3)]


def _fwd(values: Sequence[int]) -> dict[str, int]:
    return dict(zip(TILE_OPTIONS[:4], values))


def _bwd(values: Sequence[int]) -> dict[str, int]:
    return dict(zip(TILE_OPTIONS[4:], values))


def candidates(
    head_dim: int, dtype: torch.dtype, *, dropout: bool = False
) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """(forward, backward) candidate options for a head dim: a fixed grid plus the current default (with or without
    dropout), deduplicated."""
    grid = _FWD_SMALL if head_dim < 64 else _FWD_64 if head_dim < 128 else _FWD_128
    base = default_tiles(head_dim, dtype, "cuda", dropout=dropout).values()
    tiny = head_dim < 32
    fwd = [_fwd(base[:4])] + [_fwd(c) for c in grid + (_FWD_TINY if tiny else [])]
    bwd = [_bwd(base[4:])] + [_bwd(c) for c in _BWD + (_BWD_TINY if tiny else [])]
    return _unique(fwd), _unique(bwd)


def _unique(options: list[dict[str, int]]) -> list[dict[str, int]]:
    seen: list[dict[str, int]] = []
    for o in options:
        if o not in seen:
            seen.append(o)
    return seen


def _inputs(shape, head_dim, dtype, device, grad: bool):
    b, h, n = shape
    gen = torch.Generator(device=device).manual_seed(1234)
    q, k, v, do = (torch.randn(b, h, n, head_dim, device=device, dtype=dtype, generator=gen) for _ in range(4))
    if grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v, do


def _warm(head_dim: int, heads: int, dtype: str, tiles: dict[str, int], dropout: float) -> str | None:
    """Compile one configuration's kernels on a small input of the same specialisation (job for a spawned process)."""
    from attention_impls.kernels.function import flash_attention

    try:
        q, k, v, do = _inputs((2, heads, 256), head_dim, parse_dtype(dtype), "cuda", grad=True)
        flash_attention(q, k, v, tiles=Tiles(**tiles), dropout_p=dropout).backward(do)
        torch.cuda.synchronize()
        return None
    except Exception as err:  # noqa: BLE001 - a candidate that does not compile is reported, not fatal
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"


def _time(tiles: Tiles, inputs, dropout: float, device: str, mode: str, timing: dict[str, float]) -> float:
    from attention_impls.kernels.function import flash_attention

    q, k, v, do = inputs
    if mode == "fwd":

        def call():
            with torch.no_grad():
                flash_attention(q, k, v, tiles=tiles, dropout_p=dropout)
    else:

        def call():
            flash_attention(q, k, v, tiles=tiles, dropout_p=dropout).backward(do)

    call()
    return time_ms(call, device, timing["warmup_ms"], timing["rep_ms"], [q, k, v] if mode != "fwd" else [])


def _sweep(kind: str, options: list[dict[str, int]], base: Tiles, inputs, flops: float, ctx: dict) -> list[dict]:
    """Time each candidate (replacing `base`'s fields); rows with ms and TFLOP/s, or the error."""
    rows = []
    names = TILE_OPTIONS[:4] if kind == "fwd" else TILE_OPTIONS[4:]
    for opt in options:
        tiles = base.with_options(**opt)
        row: dict[str, Any] = {"kind": kind, **{name: getattr(tiles, name) for name in names}}
        try:
            ms = _time(tiles, inputs, ctx["dropout"], ctx["device"], kind, ctx["timing"])
            row.update(ms=float(f"{ms:.5g}"), tflops=float(f"{flops / (ms * 1e-3) / 1e12:.4g}"))
        except Exception as err:  # noqa: BLE001 - out of resources and the like: record and go on
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
        rows.append(row)
        ctx["advance"]()
    return rows


def _fastest(rows: list[dict]) -> dict:
    timed = [r for r in rows if "ms" in r]
    if not timed:
        raise RuntimeError(f"no {rows[0]['kind']} candidate ran: {rows[0].get('error')}")
    return min(timed, key=lambda r: r["ms"])


def tune_head_dim(head_dim: int, shape: tuple[int, int, int], work: tuple[list, list], ctx: dict) -> dict[str, Any]:
    """Forward sweep, then backward sweep with the best forward: every row and the best Tiles for one head dim."""
    dtype = ctx["dtype"]
    fwd_opts, bwd_opts = work
    b, h, n = shape
    base = default_tiles(head_dim, dtype, ctx["device"], dropout=ctx["dropout"] > 0)
    fwd_rows = _sweep("fwd", fwd_opts, base, _inputs(shape, head_dim, dtype, ctx["device"], grad=False),
                      attention_flops(b, h, n, head_dim, "fwd"), ctx)  # fmt: skip
    best_fwd = base.with_options(**{k: _fastest(fwd_rows)[k] for k in TILE_OPTIONS[:4]})
    bwd_rows = _sweep("fwd_bwd", bwd_opts, best_fwd, _inputs(shape, head_dim, dtype, ctx["device"], grad=True),
                      attention_flops(b, h, n, head_dim, "fwd_bwd"), ctx)  # fmt: skip
    best = best_fwd.with_options(**{k: _fastest(bwd_rows)[k] for k in TILE_OPTIONS[4:]})
    return {"head_dim": head_dim, "shape": list(shape), "rows": fwd_rows + bwd_rows, "best": asdict(best)}


def tune_tiles(
    head_dims: Sequence[int],
    *,
    dtype: str | torch.dtype = "bf16",
    dropout: float = 0.0,
    shape: tuple[int, int, int] | None = None,
    device: str = "cuda",
    jobs: int = 1,
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    options: tuple[list[dict[str, int]], list[dict[str, int]]] | None = None,
) -> dict[str, Any]:
    """The tile sweep for each head dim (see module doc) as a `bench_tiles` record.

    `shape` (batch, heads, seq) replaces SHAPES for every head dim (required for head dims SHAPES lacks);
    `options` (forward, backward option dicts) replaces the candidate grid.
    """
    require_device(device)
    dt = parse_dtype(dtype)
    missing = [d for d in head_dims if shape is None and d not in SHAPES]
    if missing:
        raise ConfigError(f"no default shape for head dim(s) {missing}; pass --shape BATCH,HEADS,SEQ")
    shapes = {d: shape or SHAPES[d] for d in head_dims}
    work = {d: options or candidates(d, dt, dropout=dropout > 0) for d in head_dims}
    if jobs > 1 and device == "cuda":
        _warm_all(work, shapes, dt, dropout, jobs)
    total = sum(len(f) + len(b) for f, b in work.values())
    with make_progress() as progress:
        task = progress.add_task("bench tiles", total=total)
        ctx = {"dtype": dt, "dropout": dropout, "device": device, "advance": lambda: progress.advance(task),
               "timing": {"warmup_ms": warmup_ms, "rep_ms": rep_ms}}  # fmt: skip
        results = [tune_head_dim(d, shapes[d], work[d], ctx) for d in head_dims]
    return bench_tiles_record(dtype=dtype_name(dt), dropout=dropout, results=results, env=environment(device))


def _warm_all(work, shapes, dtype, dropout, jobs) -> None:
    """Compile every (forward x default backward, default forward x backward) candidate in `jobs` processes."""
    tasks = []
    for d, (fwd_opts, bwd_opts) in work.items():
        base = default_tiles(d, dtype, "cuda", dropout=dropout > 0)
        for opt in fwd_opts + bwd_opts:
            tasks.append((d, shapes[d][1], dtype_name(dtype), asdict(base.with_options(**opt)), dropout))
    run_jobs(_warm, tasks, workers=jobs, on_result=lambda i, err: None)


def format_tiles_table(record: dict[str, Any]):
    """A rich Table: per head dim the best forward and backward tiles with their times."""
    from rich.table import Table

    table = Table(title=f"bench tiles ({record['dtype']}, dropout {record['dropout']})")
    for col in ("D", "B, H, N", "best tiles", "fwd ms", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd TFLOP/s", "failed"):
        table.add_column(col)
    for res in record["results"]:
        best = res["best"]
        rows = res["rows"]
        fwd = min((r for r in rows if r["kind"] == "fwd" and "ms" in r), key=lambda r: r["ms"])
        both = min((r for r in rows if r["kind"] == "fwd_bwd" and "ms" in r), key=lambda r: r["ms"])
        table.add_row(
            str(res["head_dim"]),
            ", ".join(map(str, res["shape"])),
            ", ".join(f"{k}={v}" for k, v in best.items()),
            f"{fwd['ms']:.3f}",
            f"{fwd['tflops']:.1f}",
            f"{both['ms']:.3f}",
            f"{both['tflops']:.1f}",
            str(sum("error" in r for r in rows)),
        )
    return table
