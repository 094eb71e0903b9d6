"""Leaderboard tables of the numerics figures (records of kind `numerics_figure`, written by `lra numerics forward`):
which implementation reproduces Golden et al.'s "about 10x" at bf16, and why; and what one precision change does.

The records carry their own verdicts and reasons (lra.numerics.report), so these tables only render them.
"""

from __future__ import annotations

from typing import Any

from lra.results.aggregate import group_by, newest
from lra.results.table import Cell, Table, name, num

PAPER_NOTE = (
    "Golden et al. (2024) found their FlashAttention about 10x baseline attention at bf16 (max |out - golden|, golden ="
    " baseline attention in fp64 on the same inputs). Their FlashAttention was a numerical re-implementation of the"
    " FA1 algorithm with every intermediate in the test format; real kernels keep the running max, sum and output"
    " accumulator in fp32. `emu:PRESET` rows are this project's emulation (`lra.numerics.emulation`), the others"
    " registered backends. ratio = max |out - golden| / naive's on the same inputs (mean over draws of the per-draw"
    " max)."
)


def _key(item: tuple[Any, Any]) -> str:
    return str(item[0])


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def reproduction_table(records: list[dict[str, Any]]) -> Table | None:
    """Per implementation: its bf16 ratio to naive at the formats figure's length and at the longest length of the
    length sweep, the verdict and where it rounds (newest record per figure and device, N(0,1) inputs)."""
    figs = [r for r in records if r.get("kind") == "numerics_figure" and r["inputs"] == "normal"]
    latest = {k: newest(v) for k, v in group_by(figs, lambda r: (r["figure"], r.get("device"))).items()}
    devices = sorted({d for (f, d) in latest if f in ("formats", "length")}, key=str)
    rows = []
    for device in devices:
        formats = latest.get(("formats", device), {}).get("metrics", {}).get("verdicts", {})
        length = latest.get(("length", device), {}).get("metrics", {}).get("verdicts", {})
        for label in dict.fromkeys([*formats, *length]):
            f, ln = formats.get(label, {}), length.get(label, {})
            best = ln or f
            rows.append([
                name(label), Cell(str(device)),
                num(_fmt(f.get("ratio"), ".2f")), num(str(f.get("seq", "-"))),
                num(_fmt(ln.get("ratio"), ".2f")), num(str(ln.get("seq", "-"))),
                Cell(best.get("verdict", "-")), Cell(best.get("why", "-")),
            ])  # fmt: skip
    if not rows:
        return None
    header = ["implementation", "device", "ratio (Fig. 4)", "N", "ratio (Fig. 5)", "N", "verdict", "why"]
    return Table("Does it reproduce the ~10x? (numerics, bf16)", header, rows, [PAPER_NOTE], section="numerics")


def knobs_table(records: list[dict[str, Any]]) -> Table | None:
    """The knobs figure: the ratio to naive of each base emulation after one precision change (newest per device)."""
    figs = [r for r in records if r.get("kind") == "numerics_figure" and r.get("figure") == "knobs"]
    rows = []
    for device, recs in sorted(group_by(figs, lambda r: r.get("device")).items(), key=lambda kv: str(kv[0])):
        for base, changes in newest(recs)["metrics"].get("drivers", {}).items():
            rows += [[name(base), Cell(c["change"]), num(_fmt(c["ratio"], ".2f")), Cell(str(device))] for c in changes]
    if not rows:
        return None
    note = (
        "What drives the deviation: each base emulation with one intermediate changed (acc = fp32, in = bf16); "
        "ratio = max |out - golden| / naive's at bf16. Knobs: s = QK^T, m = row max, l = row sum, p = P for P V, "
        "o = output accumulator, rescale = exp(m_old - m_new) factors."
    )
    return Table("What drives it: one precision change at a time", ["emulation", "change", "ratio", "device"], rows,
                 [note], section="numerics")  # fmt: skip


def weights_table(records: list[dict[str, Any]]) -> Table | None:
    """The weights study (records `numerics_weights`, newest per task and device): each A-vs-B pair over each
    control, as the ratio of their last values and of their growth (W1 and max |dW|)."""
    recs = [r for r in records if r.get("kind") == "numerics_weights" and r.get("metrics", {}).get("ratios")]
    rows = []
    for (task, device), group in sorted(group_by(recs, lambda r: (r["task"], r.get("device"))).items(), key=_key):
        rec = newest(group)
        for label, r in rec["metrics"]["ratios"].items():
            pair, control = label.rsplit(" / ", 1)
            cells = [
                _fmt(r.get(k), ".3g") for k in ("final_w1_mean", "slope_w1_mean", "final_max_abs", "slope_max_abs")
            ]
            rows.append([Cell(pair), Cell(control), *map(num, cells), Cell(f"{task} ({rec.get('preset')})"),
                         num(str(rec.get("steps", "-"))), Cell(str(device))])  # fmt: skip
    if not rows:
        return None
    header = ["pair", "control", "W1 last", "W1 growth", "max|dW| last", "max|dW| growth", "task", "steps", "device"]
    note = (
        "Weight deviation of training with B instead of A (same initialisation, data and dropout draws) over a "
        "control's: seeds = another initialisation, fp16 / bf16 = naive in that autocast against fp32 (`lra numerics "
        "weights`). W1 = exact 1-D Wasserstein-1 distance between the tensors' values (mean over tensors); last = at "
        "the last evaluation, growth = least-squares slope over evaluations. Golden et al.: flash 2-5x below "
        "low-precision training (a ratio of 0.2-0.5 against fp16)."
    )
    return Table("Weight deviation in training, against the controls", header, rows, [note], section="numerics")
