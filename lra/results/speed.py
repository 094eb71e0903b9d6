"""Training speed tables from `lra bench train` records: speed-up over `naive` per task (geometric mean over the LRA
tasks, the FlashAttention paper's speed metric), peak memory, and data-parallel scaling.

Repeated benchmark records of one config aggregate like seeds: mean ± std and n when there are several.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from lra.results.aggregate import (
    Agg,
    aggregate,
    config_key,
    fmt_agg,
    group_by,
    is_canonical,
    newest,
    refs_of,
    task_order,
)
from lra.results.published import FLASH_PAPER_SPEEDUP, LRA_TASKS, SPEEDUP_PRESET, paper_for
from lra.results.table import NO_DROPOUT_NOTE, Cell, Row, Table, dropout_marked, name, num, skips_dropout

SPEED_NOTE = (
    "Training steps/s of each backend over `naive` on the task's config and preset (median of timed steps after"
    " warm-up; `lra bench train`), the speed-up measured beside naive in the same command where it was. OOM = out of"
    " memory. Geometric mean over the five LRA tasks, as in the FlashAttention paper."
)


PAPER_SPEED_NOTE = (
    "Last column: the FlashAttention paper's Table 3 speed-up of the same attention over its Transformer, averaged"
    " over the LRA tasks, on an A100 (published); the measured ratios beside it are same-run ratios on this device."
)


def _ok(rec: dict[str, Any]) -> bool:
    return rec["status"] == "ok"


def _cell_key(rec: dict[str, Any]) -> tuple:
    """(device, preset, compile mode, task, backend, length): a compiled and an eager step are separate tables."""
    return (
        rec.get("device"),
        rec.get("preset", "default"),
        rec["compile"]["mode"],
        rec.get("task"),
        rec.get("backend"),
        rec.get("seq_len"),
    )


def _speedups(recs: list[dict[str, Any]], naive: list[dict[str, Any]]) -> list[float | None]:
    """Each record's speed-up: measured beside naive in the same run, else over the same config's naive records."""
    base = aggregate(r["metrics"].get("steps_per_s") for r in naive if _ok(r) and config_key(r) == config_key(recs[0]))
    out = []
    for r in recs:
        ratio = r["metrics"].get("speedup_vs_naive")
        if ratio is None and base is not None:
            ratio = r["metrics"]["steps_per_s"] / base.mean
        out.append(ratio)
    return out


def _chosen(cell: list[dict[str, Any]], naive: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of one config for a cell: the newest config with a speed-up, else the newest config."""
    configs = group_by(cell, config_key)
    ok = {k: [r for r in recs if _ok(r)] for k, recs in configs.items()}
    timed = [recs for recs in ok.values() if recs and any(x is not None for x in _speedups(recs, naive))]
    if timed:
        return max(timed, key=lambda recs: (str(newest(recs).get("date", "")), str(newest(recs)["_path"])))
    latest = config_key(newest(cell))
    return ok[latest] or [newest(configs[latest])]


def _default_lengths(cells: dict[tuple, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each task's length: that of its records made with the config `configs/` holds now (a preset that changed its
    length, as fa-paper's Text did, is timed at the new one), else the one most records share (the longer on a tie)."""
    counts = Counter((k[3], k[5]) for k in cells)
    current = Counter((k[3], k[5]) for k, recs in cells.items() if any(is_canonical(r) for r in recs))
    out: dict[str, Any] = {}
    for task, seq in sorted(counts, key=lambda k: (current[k] > 0, counts[k], k[1] or 0)):
        out[task] = seq  # the last one sorted wins
    return out


@dataclass
class Block:
    """The speed cells of one (device, preset, compile mode): `chosen[(task, backend)]` are the records of one
    config."""

    device: Any
    preset: str
    compile: str
    seq_of: dict[str, Any]
    chosen: dict[tuple[str, str], list[dict[str, Any]]]
    naive: dict[str, list[dict[str, Any]]]

    def speedup(self, task: str, backend: str) -> Agg | None:
        """The cell's speed-up over naive (None when failed, missing or without a naive baseline)."""
        recs = self.chosen.get((task, backend))
        return aggregate(_speedups(recs, self.naive[task])) if recs and _ok(recs[0]) else None


def speed_blocks(bench: list[dict[str, Any]]) -> list[Block]:
    """Single-process `lra bench train` records as one `Block` per (device, preset), at each task's usual length."""
    cells = group_by(bench, _cell_key)
    blocks = []
    for device, preset, mode in sorted({k[:3] for k in cells}, key=lambda k: tuple(map(str, k))):
        mine = {k: v for k, v in cells.items() if k[:3] == (device, preset, mode)}
        seq_of = _default_lengths(mine)
        naive = {t: mine.get((device, preset, mode, t, "naive", seq), []) for t, seq in seq_of.items()}
        chosen = {k[3:5]: _chosen(recs, naive[k[3]]) for k, recs in mine.items() if k[5] == seq_of[k[3]]}
        blocks.append(Block(device, preset, mode, seq_of, chosen, naive))
    return blocks


def speed_tables(bench: list[dict[str, Any]]) -> list[Table]:
    """Speed-up and memory tables per (device, preset); the paper's speed-ups beside its recipe's block."""
    blocks = speed_blocks(bench)
    tables = [t for b in blocks for t in _block_tables(b)]
    if SPEEDUP_PRESET not in {b.preset for b in blocks}:
        tables.append(_published_speed_table())
    return tables


def _paper_speedup(backend: str) -> str | None:
    """The FlashAttention paper's Table 3 speed-up of `backend`'s counterpart row (Linformer for `linformer`...)."""
    paper = paper_for(SPEEDUP_PRESET)
    model = paper.counterparts.get(backend) if paper else None
    return f"{FLASH_PAPER_SPEEDUP[model]:.1f}x" if model in FLASH_PAPER_SPEEDUP else None


def _block_tables(block: Block) -> list[Table]:
    """The speed-up and memory tables of one (device, preset) block; on the paper's recipe each measured row has
    its counterpart's published speed-up beside its geometric mean."""
    tasks = task_order(block.seq_of)
    paper = block.preset == SPEEDUP_PRESET
    speed_rows, mem_rows, beside = [], [], set()
    for backend in sorted({b for _, b in block.chosen}):
        recs = [block.chosen.get((t, backend)) for t in tasks]
        ratios = [block.speedup(t, backend) for t in tasks if t in LRA_TASKS]
        geo = "-"
        if len(ratios) == len(LRA_TASKS) and None not in ratios:
            geo = f"{math.exp(sum(math.log(r.mean) for r in ratios) / len(ratios)):.2f}x"
        speed = [_speed_cell(r, block.naive[t]) for r, t in zip(recs, tasks)]
        published = _paper_speedup(backend) if paper else None
        beside |= {backend} if published else set()
        extra = [num(published or "-")] if paper else []
        speed_rows.append(Row([name(backend), *speed, num(geo), *extra]))
        mem_rows.append(Row([name(backend), *map(_mem_cell, recs)]))
    if paper:
        shown = {paper_for(SPEEDUP_PRESET).counterparts[b] for b in beside}
        speed_rows += _published_speed_rows(len(tasks), skip=shown)
    where = f"{block.device}, preset {block.preset}" + ("" if block.compile == "none" else f", compile {block.compile}")
    lengths = "Sequence lengths: " + ", ".join(f"{t} {block.seq_of[t]}" for t in tasks) + "."
    header = ["backend", *tasks, "geo. mean (5 LRA tasks)", *(["FlashAttention paper (A100)"] if paper else [])]
    notes = [f"{SPEED_NOTE} {lengths}"]
    notes += [PAPER_SPEED_NOTE] if paper else []
    notes += [NO_DROPOUT_NOTE] if skips_dropout(r for recs in block.chosen.values() for r in recs) else []
    return [
        Table(f"Training speed-up over naive ({where})", header, speed_rows, notes, section="speed"),
        Table(f"Peak training memory, MB ({where})", ["backend", *tasks], mem_rows,
              [f"Peak CUDA memory of the training step (`lra bench train`). {lengths}"], section="speed"),
    ]  # fmt: skip


def _status_text(rec: dict[str, Any]) -> Cell:
    return num(str(rec.get("status", "")).split(":")[0].upper(), refs=refs_of([rec]))


def _speed_cell(recs: list[dict[str, Any]] | None, naive: list[dict[str, Any]]) -> Cell:
    if not recs:
        return Cell("-")
    if not _ok(recs[0]):
        return _status_text(recs[0])
    ratio = aggregate(_speedups(recs, naive))
    sps = aggregate(r["metrics"].get("steps_per_s") for r in recs)
    if ratio is None:
        text = f"({sps.mean:.2f}/s)"
    elif ratio.n == 1:
        text = f"{ratio.mean:.2f}x ({sps.mean:.2f}/s)"
    else:
        text = f"{ratio.mean:.2f} ± {ratio.std:.2f}x ({sps.mean:.2f}/s, n={ratio.n})"
    return num(dropout_marked(text, recs), refs=refs_of(recs))


def _mem_cell(recs: list[dict[str, Any]] | None) -> Cell:
    if not recs:
        return Cell("-")
    if not _ok(recs[0]):
        return _status_text(recs[0])
    mem = aggregate(r["metrics"].get("peak_mem_mb") for r in recs)
    if mem is None:
        return Cell("-")
    text = f"{mem.mean:,.0f}" if mem.n == 1 else fmt_agg(mem, digits=0, mark_few=False)
    return num(text, refs=refs_of(recs))


def _published_speed_rows(columns: int, skip: set[str]) -> list[Row]:
    """The paper's speed-ups without a measured counterpart row here (those stand beside their row instead)."""
    return [
        Row([Cell(f"{model} (A100)"), *[Cell("-")] * columns, Cell("-"), num(f"{x:.1f}x")], published=True)
        for model, x in FLASH_PAPER_SPEEDUP.items()
        if model not in skip
    ]


def _published_speed_table() -> Table:
    return Table(
        f"Training speed-up, preset {SPEEDUP_PRESET} (published only)",
        ["model", "speed-up over the Transformer, LRA average"],
        [Row([Cell(m), num(f"{x:.1f}x")], published=True) for m, x in FLASH_PAPER_SPEEDUP.items()],
        [
            "The FlashAttention paper's Table 3 (A100), measured on its own recipe (preset fa-paper); no"
            " `lra bench train --preset fa-paper` records are stored yet to compare with."
        ],
        section="speed",
    )


def scaling_table(bench: list[dict[str, Any]]) -> Table | None:
    """Data-parallel throughput: global tokens/s with N processes over the same bench with one, same config."""
    ok = [r for r in bench if _ok(r)]

    def key(r):
        return (r.get("task"), r.get("backend"), r.get("seq_len"), r.get("config_hash"), r.get("device"))

    single = {k: newest(v) for k, v in group_by([r for r in ok if r["world_size"] == 1], key).items()}
    multi = group_by([r for r in ok if r["world_size"] > 1], lambda r: (*key(r), r["world_size"]))
    rows = []
    for k, recs in sorted(multi.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]), kv[0][5])):
        rec, base = newest(recs), single.get(k[:5])
        if base is None:
            continue
        n, tok, tok1 = k[5], rec["metrics"]["tokens_per_s"], base["metrics"]["tokens_per_s"]
        refs = refs_of([base, rec])
        rows.append(
            Row([Cell(str(k[0])), name(str(k[1])), num(str(k[2])), num(str(n)), num(f"{tok1:,.0f}", refs[:1]),
                 num(f"{tok:,.0f}", refs[1:]), num(f"{tok / tok1:.2f}x"), num(f"{100 * tok / tok1 / n:.0f}%"),
                 Cell(k[4] or "-")])
        )  # fmt: skip
    if not rows:
        return None
    return Table(
        "Data-parallel scaling (lra bench train --nproc N)",
        ["task", "backend", "seq", "processes", "tokens/s, 1", "tokens/s, N", "speed-up", "efficiency", "device"],
        rows,
        [
            "Global tokens/s of DistributedDataParallel training steps over N processes (one GPU each, the slowest"
            " rank's step time) against the same command with one process; same config and global batch."
        ],
        section="speed",
    )
