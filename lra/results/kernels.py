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
    """Kernel throughput (TFLOP/s and ms), the newest record per backend (with its options), length and head count."""
    cells: dict[tuple, dict[tuple, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        cells[attention_key(r)][(backend_label(r), r.get("seq"), r.get("heads"))].append(r)
    tables = []
    for key, by_cell in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        device, dtype, hd, mode, p = key
        latest: dict[tuple, dict[str, Any]] = {}
        for (backend, seq, _), recs in sorted(by_cell.items(), key=lambda kv: tuple(map(str, kv[0]))):
            rec = newest(recs)
            if (backend, seq) not in latest or newest([latest[(backend, seq)], rec]) is rec:
                latest[(backend, seq)] = rec
        seqs = sorted({s for _, s in latest})
        body = [Row([name(b), *[_cell(latest.get((b, s))) for s in seqs]]) for b in sorted({b for b, _ in latest})]
        title = f"Attention {mode}, {dtype}, head dim {hd}, dropout {p:g} ({device})"
        note = "TFLOP/s (ms); forward FLOPs 4*B*H*N^2*D (times density for block-sparse), backward 2.5x forward."
        tables.append(Table(title, ["backend", *[f"N={s}" for s in seqs]], body, [note], section="kernels"))
    return tables


def _cell(rec: dict[str, Any] | None) -> Cell:
    if rec is None:
        return Cell("-")
    if rec["status"] != "ok":
        return num(str(rec["status"]).split(":")[0].upper(), refs=refs_of([rec]))
    return num(f"{rec['tflops']:.0f} ({rec['ms']:.2f} ms)", refs=refs_of([rec]))
