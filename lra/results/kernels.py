"""Attention kernel tables from `lra bench attention` records: TFLOP/s and ms per backend and sequence length, one
table per (device, dtype, head dim, mode, attention dropout); a backend timed with options is a row of its own
(`flash[block_m=64]` beside `flash`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lra.core.records import backend_label
from lra.results.aggregate import newest, refs_of
from lra.results.table import Cell, Row, Table, name, num


def dropout_of(rec: dict[str, Any]) -> float:
    """The attention dropout a kernel was timed with."""
    return float(rec["dropout"])


def attention_key(rec: dict[str, Any]) -> tuple:
    """The table a bench attention record belongs to."""
    return (rec.get("device"), rec.get("dtype"), rec.get("head_dim"), rec.get("mode"), dropout_of(rec))


def attention_tables(rows: list[dict[str, Any]]) -> list[Table]:
    """Kernel throughput (TFLOP/s and ms), the newest record per backend (with its options) and shape; a column is
    one (N, batch, heads), so cells timed at different batch or head counts never sit in one column."""
    cells: dict[tuple, dict[tuple, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        cells[attention_key(r)][(backend_label(r), shape_of(r))].append(r)
    tables = []
    for key, by_cell in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        device, dtype, hd, mode, p = key
        latest = {cell: newest(recs) for cell, recs in by_cell.items()}
        shapes = sorted({s for _, s in latest}, key=lambda s: (s[0] or 0, tuple(map(str, s))))
        backends = sorted({b for b, _ in latest})
        body = [Row([name(b), *[_cell(latest.get((b, s))) for s in shapes]]) for b in backends]
        title = f"Attention {mode}, {dtype}, head dim {hd}, dropout {p:g} ({device})"
        note = "TFLOP/s (ms); forward FLOPs 4*B*H*N^2*D (times density for block-sparse), backward 2.5x forward."
        columns = [_column(s, shapes) for s in shapes]
        tables.append(Table(title, ["backend", *columns], body, [note], section="kernels"))
    return tables


def shape_of(rec: dict[str, Any]) -> tuple:
    """(N, batch, heads) of a bench attention record: what a column of the kernel table holds."""
    return (rec.get("seq"), rec.get("batch"), rec.get("heads"))


def _column(shape: tuple, shapes: list[tuple]) -> str:
    """`N=1024`, or `N=1024 B=128 H=64` where the table holds that N at more than one batch or head count."""
    seq, batch, heads = shape
    if sum(s[0] == seq for s in shapes) == 1:
        return f"N={seq}"
    return f"N={seq} B={batch} H={heads}"


def _cell(rec: dict[str, Any] | None) -> Cell:
    if rec is None:
        return Cell("-")
    if rec["status"] != "ok":
        return num(str(rec["status"]).split(":")[0].upper(), refs=refs_of([rec]))
    return num(f"{rec['tflops']:.0f} ({rec['ms']:.2f} ms)", refs=refs_of([rec]))
