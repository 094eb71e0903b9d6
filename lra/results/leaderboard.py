"""Turn the stored result records into the leaderboard: Markdown (and HTML) tables, plus plots with `[plots]`.

Tables: accuracy (task x backend, LRA average), smoke runs (the `tiny` preset), time to accuracy, training speed-up
over `naive` per task with the geometric mean (the FlashAttention paper's LRA speed metric), peak memory, attention
kernel throughput, numeric deviation. Published rows (LRA paper, FlashAttention paper) stand beside the measured ones,
marked as published. Output depends only on the records, so regenerating gives the same bytes.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lra.core.atomic import atomic_open
from lra.results.published import FLASH_PAPER, FLASH_PAPER_SPEEDUP, LRA_PAPER, LRA_TASKS
from lra.results.store import load_records

ALL_TASKS = (*LRA_TASKS, "path-x", "path-256")


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"## {self.title}", ""]
        lines += self.notes and [*self.notes, ""] or []
        lines.append("| " + " | ".join(self.header) + " |")
        lines.append("|" + "|".join("---" for _ in self.header) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        out = [f"<h2>{html.escape(self.title)}</h2>"]
        out += [f"<p>{html.escape(n)}</p>" for n in self.notes]
        out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in self.header) + "</tr></thead>")
        out.append("<tbody>")
        for r in self.rows:
            out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
        out.append("</tbody></table>")
        return "\n".join(out)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _latest(records: list[dict[str, Any]], key) -> dict[Any, dict[str, Any]]:
    """The newest record (by date, then file name) for each key."""
    out: dict[Any, dict[str, Any]] = {}
    for rec in sorted(records, key=lambda r: (r.get("date", ""), r["_file"])):
        out[key(rec)] = rec
    return out


def _tasks_present(keys) -> list[str]:
    present = {k for k in keys}
    ordered = [t for t in ALL_TASKS if t in present]
    return ordered + sorted(present - set(ordered))


def accuracy_table(runs: list[dict[str, Any]], title: str, with_published: bool) -> Table | None:
    latest = _latest(runs, lambda r: (r["task"], r["backend"]))
    if not latest and not with_published:
        return None
    tasks = list(ALL_TASKS) if with_published else _tasks_present(t for t, _ in latest)
    header = ["backend", *tasks, "LRA avg", "source"]
    rows = []
    for backend in sorted({b for _, b in latest}):
        cells, lra = [], []
        for task in tasks:
            rec = latest.get((task, backend))
            acc = rec["metrics"]["test_acc"] if rec else None
            cells.append(_pct(acc))
            if task in LRA_TASKS and acc is not None:
                lra.append(acc)
        avg = _pct(sum(lra) / len(lra)) if len(lra) == len(LRA_TASKS) else "-"
        rows.append([f"`{backend}`", *cells, avg, "measured"])
    if with_published:
        for paper, table in (("FlashAttention paper", FLASH_PAPER), ("LRA paper", LRA_PAPER)):
            for model, accs in table.items():
                cells = [("FAIL" if accs[t] is None else f"{accs[t]:.1f}") if t in accs else "-" for t in tasks]
                lra = [accs.get(t) for t in LRA_TASKS]
                avg = f"{sum(lra) / len(lra):.1f}" if all(a is not None for a in lra) else "-"
                rows.append([f"{model} *(published)*", *cells, avg, paper])
    notes = ["Test accuracy (%) on the best-validation checkpoint; the newest record per task and backend."]
    if runs and not with_published:
        maj = _latest(runs, lambda r: r["task"])
        notes.append(
            "Majority-class accuracy of the test splits: "
            + ", ".join(f"{t} {_pct(maj[t]['metrics'].get('majority_acc'))}" for t in _tasks_present(maj))
            + "."
        )
    return Table(title, header, rows, notes)


def time_to_accuracy_table(runs: list[dict[str, Any]]) -> Table | None:
    latest = _latest(runs, lambda r: (r["task"], r["backend"], r["preset"]))
    if not latest:
        return None
    thresholds = sorted({float(k) for r in latest.values() for k in r["config"]["train"]["acc_thresholds"]})
    header = [
        "task",
        "backend",
        "preset",
        "test acc",
        "train time (s)",
        *[f"time to {_pct(t)}% val" for t in thresholds],
    ]
    rows = []
    for (task, backend, preset), rec in sorted(latest.items()):
        m = rec["metrics"]
        reached = {float(k): v for k, v in (m.get("time_to_acc_s") or {}).items()}
        rows.append(
            [task, f"`{backend}`", preset, _pct(m["test_acc"]), f"{m.get('train_time_s', 0):.0f}"]
            + [f"{reached[t]:.0f}" if t in reached else "-" for t in thresholds]
        )
    return Table(
        "Time to accuracy", header, rows, ["Wall-clock training seconds (evaluation included) on the run's device."]
    )


def _timed_beside_naive(rec: dict[str, Any]) -> bool:
    return rec["backend"] == "naive" or "speedup_vs_naive" in rec.get("metrics", {})


def speed_tables(bench: list[dict[str, Any]]) -> list[Table]:
    """Training speed-up over naive and peak memory from `lra bench train` records (one row per backend/task/seq)."""
    # a record timed beside naive (its speed-up measured in the same run) wins over a newer one timed alone
    same_run = [r for r in bench if _timed_beside_naive(r)]
    alone = [r for r in bench if not _timed_beside_naive(r)]
    key = lambda r: (r["task"], r["backend"], r.get("seq_len"), r.get("device"))  # noqa: E731
    rows_by = {**_latest(alone, key), **_latest(same_run, key)}
    if not rows_by:
        return []
    tables = []
    for device in sorted({k[3] for k in rows_by}):
        recs = {k[:3]: v for k, v in rows_by.items() if k[3] == device}
        # the default length of each task: the one most records share
        seq_of: dict[str, Any] = {}
        for task in {k[0] for k in recs}:
            counts = defaultdict(int)
            for k in recs:
                if k[0] == task:
                    counts[k[2]] += 1
            seq_of[task] = max(counts, key=lambda s: (counts[s], s or 0))
        tasks = _tasks_present(seq_of)
        backends = sorted({k[1] for k in recs})
        speed_rows, mem_rows = [], []
        for b in backends:
            speed_cells, mem_cells, ratios = [], [], []
            for t in tasks:
                rec = recs.get((t, b, seq_of[t]))
                base = recs.get((t, "naive", seq_of[t]))
                if rec is None:
                    speed_cells.append("-")
                    mem_cells.append("-")
                    continue
                if rec.get("status", "ok") != "ok":
                    speed_cells.append(rec["status"].split(":")[0].upper())
                    mem_cells.append(rec["status"].split(":")[0].upper())
                    continue
                sps = rec["metrics"]["steps_per_s"]
                ratio = rec["metrics"].get("speedup_vs_naive")  # against naive measured in the same run
                if ratio is None and base is not None and base.get("status", "ok") == "ok":
                    ratio = sps / base["metrics"]["steps_per_s"]
                if ratio is not None:
                    if t in LRA_TASKS:
                        ratios.append(ratio)
                    speed_cells.append(f"{ratio:.2f}x ({sps:.2f}/s)")
                else:
                    speed_cells.append(f"({sps:.2f}/s)")
                mem = rec["metrics"].get("peak_mem_mb")
                mem_cells.append("-" if mem is None else f"{mem:,.0f}")
            geo = f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x" if len(ratios) == len(LRA_TASKS) else "-"
            speed_rows.append([f"`{b}`", *speed_cells, geo])
            mem_rows.append([f"`{b}`", *mem_cells])
        for name, x in FLASH_PAPER_SPEEDUP.items():
            speed_rows.append([f"{name} *(published, A100)*", *["-"] * len(tasks), f"{x:.1f}x"])
        seq_note = ", ".join(f"{t} {seq_of[t]}" for t in tasks)
        tables.append(
            Table(
                f"Training speed-up over naive ({device})",
                ["backend", *tasks, "geo. mean (5 LRA tasks)"],
                speed_rows,
                [
                    "Training steps/s of each backend over `naive` on the task's config (median of timed steps after"
                    " warm-up; `lra bench train`). OOM = out of memory. Geometric mean over the five LRA tasks, as in"
                    f" the FlashAttention paper. Sequence lengths: {seq_note}."
                ],
            )
        )
        tables.append(
            Table(f"Peak training memory, MB ({device})", ["backend", *tasks], mem_rows, ["From `lra bench train`."])
        )
    return tables


def scaling_table(bench: list[dict[str, Any]]) -> Table | None:
    """Data-parallel throughput: global tokens/s with N processes over the same bench with one, same config."""
    key = lambda r: (r["task"], r["backend"], r.get("seq_len"), r.get("config_hash"), r.get("device"))  # noqa: E731
    ok = [r for r in bench if r.get("status", "ok") == "ok"]
    single = _latest([r for r in ok if r.get("world_size", 1) == 1], key)
    multi = _latest([r for r in ok if r.get("world_size", 1) > 1], lambda r: (*key(r), r["world_size"]))
    rows = []
    for k, rec in sorted(multi.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]), kv[0][5])):
        base = single.get(k[:5])
        if base is None:
            continue
        n, tok, tok1 = k[5], rec["metrics"]["tokens_per_s"], base["metrics"]["tokens_per_s"]
        rows.append(
            [k[0], f"`{k[1]}`", str(k[2]), str(n), f"{tok1:,.0f}", f"{tok:,.0f}", f"{tok / tok1:.2f}x",
             f"{100 * tok / tok1 / n:.0f}%", k[4] or "-"]
        )  # fmt: skip
    if not rows:
        return None
    return Table(
        "Data-parallel scaling (`lra bench train --nproc N`)",
        ["task", "backend", "seq", "processes", "tokens/s, 1", "tokens/s, N", "speed-up", "efficiency", "device"],
        rows,
        [
            "Global tokens/s of DistributedDataParallel training steps over N processes (one GPU each, the slowest"
            " rank's step time) against the same command with one process; same config and global batch."
        ],
    )


def attention_tables(rows: list[dict[str, Any]]) -> list[Table]:
    """Kernel throughput (TFLOP/s and ms) from `lra bench attention` records."""
    latest = _latest(
        rows, lambda r: (r.get("device"), r["dtype"], r["head_dim"], r["mode"], r["backend"], r["seq"], r.get("heads"))
    )
    groups: dict[tuple, dict] = defaultdict(dict)
    for k, r in latest.items():
        groups[k[:4]][(k[4], k[5])] = r
    tables = []
    for (device, dtype, hd, mode), cells in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        seqs = sorted({s for _, s in cells})
        backends = sorted({b for b, _ in cells})
        body = []
        for b in backends:
            row = [f"`{b}`"]
            for s in seqs:
                r = cells.get((b, s))
                if r is None:
                    row.append("-")
                elif r.get("status", "ok") != "ok":
                    row.append(r["status"].split(":")[0].upper())
                else:
                    row.append(f"{r['tflops']:.0f} ({r['ms']:.2f} ms)")
            body.append(row)
        tables.append(
            Table(
                f"Attention {mode}, {dtype}, head dim {hd} ({device})",
                ["backend", *[f"N={s}" for s in seqs]],
                body,
                ["TFLOP/s (ms); forward FLOPs 4*B*H*N^2*D (times density for block-sparse), backward 2.5x forward."],
            )
        )
    return tables


def numerics_table(records: list[dict[str, Any]]) -> Table | None:
    """Deviation at the longest length of each backend's newest study on N(0,1) inputs (outlier studies aside)."""
    normal = [r for r in records if r.get("inputs", "normal") == "normal"]
    latest = _latest(normal, lambda r: (r["backend"], r.get("device")))
    if not latest:
        return None
    dtypes = ["bf16", "fp16", "fp32"]
    header = ["backend", "device", *[f"{d} max / mean" for d in dtypes], "bf16 control", "bf16 rel. L2", "seq"]
    rows = []
    for (backend, device), rec in sorted(latest.items(), key=lambda kv: tuple(map(str, kv[0]))):
        dev = rec["metrics"]["deviation"]
        cells = []
        for d in dtypes:
            x = dev.get(d)
            cells.append("-" if not x else f"{x['max']:.2e} / {x['mean']:.2e}")
        bf16 = dev.get("bf16") or {}
        ratio = bf16.get("ctrl_ratio")
        cells.append("-" if ratio is None else f"{ratio:.2f}")
        cells.append("-" if bf16.get("rel_l2") is None else f"{bf16['rel_l2']:.2e}")
        rows.append([f"`{backend}`", str(device), *cells, str(rec["metrics"].get("seq", "-"))])
    return Table(
        "Numeric deviation against an fp64 golden attention",
        header,
        rows,
        [
            "max |out - golden| and its mean over elements on N(0,1) inputs, at the longest length of the newest study"
            " (`lra numerics forward`; Golden et al. 2024). The golden is naive attention in fp64 on the same"
            " (rounded) inputs and the same mask. bf16 control (the check FlashAttention's author recommends):"
            " max |backend - naive fp32| / max |naive bf16 - naive fp32|, naive under the same mask; below 1 = closer"
            " to fp32 than naive attention in bf16. Relative L2 ="
            " ||out - golden|| / ||golden||: sparse layouts average fewer keys, so their outputs and absolute"
            " deviations are larger at the same relative error."
        ],
    )


def is_canonical(rec: dict[str, Any]) -> bool:
    """Whether a run used its task's config (and preset) exactly as `configs/` holds it now."""
    from lra.core.errors import ConfigError
    from lra.train.config import load_config

    preset = rec.get("preset")
    try:
        current = load_config(rec["task"], None if preset in (None, "default") else preset)
    except (ConfigError, KeyError, ValueError):
        return False
    return json.dumps(current, sort_keys=True, default=str) == json.dumps(
        rec.get("config"), sort_keys=True, default=str
    )


def build_tables(records: list[dict[str, Any]]) -> list[Table]:
    runs = [r for r in records if r.get("kind") == "run"]
    full = [r for r in runs if r.get("preset") != "tiny"]
    tiny = [r for r in runs if r.get("preset") == "tiny"]
    canonical = [r for r in full if is_canonical(r)]
    other = [r for r in full if not is_canonical(r)]
    tables: list[Table | None] = [
        accuracy_table(canonical, "Accuracy (LRA test accuracy, %)", with_published=True),
        accuracy_table(
            other,
            "Other runs (settings differ from configs/: --set overrides or an older config; see each record)",
            with_published=False,
        ),
        accuracy_table(tiny, "Smoke runs (`tiny` preset, CPU-sized)", with_published=False),
        time_to_accuracy_table(full),
        *speed_tables([r for r in records if r.get("kind") == "bench_train" and r.get("world_size", 1) == 1]),
        scaling_table([r for r in records if r.get("kind") == "bench_train"]),
        *attention_tables([r for r in records if r.get("kind") == "bench_attention"]),
        numerics_table([r for r in records if r.get("kind") == "numerics_forward"]),
    ]
    return [t for t in tables if t is not None]


def sources(records: list[dict[str, Any]]) -> Table:
    rows = []
    for r in records:
        m = r.get("metrics", {})
        what = ", ".join(f"{k}={v:.4g}" for k, v in sorted(m.items()) if isinstance(v, (int, float)))[:160]
        rows.append([r["_file"], r.get("kind", ""), r.get("device", ""), str(r.get("git_commit", ""))[:12], what])
    return Table(
        "Records",
        ["file", "kind", "device", "commit", "figures"],
        rows,
        ["Every figure above comes from one of these files in `leaderboard/results/`."],
    )


HEADER = """# LRA leaderboard

Generated by `lra leaderboard` from the records in `leaderboard/results/`; do not edit by hand.
Rows marked *(published)* are the papers' figures, not measured here.
"""


def render(records: list[dict[str, Any]], fmt: str = "md") -> str:
    tables = build_tables(records)
    if records:
        tables.append(sources(records))
    if fmt == "md":
        return HEADER + "\n" + "\n".join(t.markdown() for t in tables)
    if fmt == "html":
        body = "\n".join(t.html() for t in tables)
        style = (
            "body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
        )
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>LRA leaderboard</title><style>{style}</style>"
            f"</head><body><h1>LRA leaderboard</h1><p>Generated by <code>lra leaderboard</code>; rows marked"
            f" (published) are the papers' figures.</p>\n{body}\n</body></html>\n"
        )
    raise ValueError(f"unknown format {fmt!r}; use md or html")


def write_leaderboard(
    store: str | Path | None = None, out_dir: str | Path | None = None, fmt: str = "md", plots: bool = True
) -> list[Path]:
    """Regenerate leaderboard/LEADERBOARD.md (or .html) and, with matplotlib, the plots. Returns the files written."""
    from lra.results.store import results_dir

    store = Path(store) if store is not None else results_dir()
    out_dir = Path(out_dir) if out_dir is not None else store.parent
    records = load_records(store)
    path = out_dir / ("LEADERBOARD.md" if fmt == "md" else "leaderboard.html")
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(render(records, fmt))
    written = [path]
    if plots:
        from lra.results.plots import write_plots

        written += write_plots(records, out_dir)
    return written
