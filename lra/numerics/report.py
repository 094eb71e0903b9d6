"""What the numerics study shows and stores: rich tables of the forward rows and of each figure, the verdict on the
paper's "about 10x", and the result records (kinds `numerics_forward` and `numerics_figure`) the leaderboard reads.

Verdict: an implementation's max |out - golden| at bf16 over naive's on the same inputs (Golden et al.: flash about
10x baseline). At least VERDICT_REPRODUCES: reproduces the order of magnitude; above VERDICT_SAME: more than naive but
short of it; within VERDICT_SAME of 1 either way: as naive; below: less than naive. A real kernel's reason is the
emulation whose deviation curve is closest to its own (within TWIN_GAP), since its state precision is not declared.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from lra.core.dtypes import DTYPES
from lra.core.records import numerics_figure_record, numerics_forward_record
from lra.numerics.emulation import KNOBS
from lra.numerics.figures import BASE_FA1, BASE_FA2
from lra.numerics.forward import ForwardSpec
from lra.numerics.inputs import DEFAULT_TILES

VERDICT_REPRODUCES = 5.0
VERDICT_SAME = 1.5
TWIN_GAP = 0.15  # a kernel 'behaves as' an emulation whose curve is this close (mean relative gap)


def fmt(x: float | None, spec: str = ".2e") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def format_forward_table(rows: list[dict[str, Any]], title: str = "numeric deviation vs fp64 golden"):
    """A rich table of the forward rows; cells that did not run show a one-word status (`status_lines` says why)."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("implementation", "tiles", "dtype", "N", "max", "+-draws", "mean", "std", "rel L2", "vs naive"):
        t.add_column(col, no_wrap=True)
    for col in ("/naive", "ctrl"):
        t.add_column(col, no_wrap=True)
    order = {d: i for i, d in enumerate(DTYPES)}
    for r in sorted(rows, key=lambda r: (r["backend"], r["tiles"], order[r["dtype"]], r["seq"])):
        tiles = r["tiles"] if r["tiles"] != DEFAULT_TILES or not r.get("tiles_used") else f"({r['tiles_used']})"
        head = [r["backend"], tiles, r["dtype"], str(r["seq"])]
        if r["status"] != "ok":
            t.add_row(*head, r["status"].split(":")[0], *[""] * 7)
            continue
        cells = [fmt(r[k], ".1e") for k in ("max", "max_std", "mean", "std", "rel_l2")]
        cells.append(fmt(r.get("peer_max_mean"), ".1e"))
        cells += [fmt(r.get(k), ".2f") for k in ("ratio_vs_naive", "ctrl_ratio")]
        t.add_row(*head, *cells)
    return t


FORWARD_NOTE = (
    "max: max |out - golden| over elements and draws; +-draws: std of the per-draw max; mean, std: of |out - golden| "
    "over elements and draws; rel L2: ||out - golden|| / ||golden|| (mean over draws); vs naive: max |out - naive| at "
    "the same dtype (Fig. 3's measure); /naive: mean per-draw max over naive's; ctrl (fp16/bf16): "
    "max|out - naive fp32| / max|naive - naive fp32| on the same inputs; (tiles): the implementation's defaults"
)


def status_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per distinct reason a cell did not run, with the cells it covers."""
    why: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            why[(r["backend"], r["tiles"], r["status"])].append(f"{r['dtype']}/N={r['seq']}")
    return [f"{b} {t}: {status} ({', '.join(cells)})" for (b, t, status), cells in why.items()]


def _representative(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row set shown in the leaderboard for one backend: default tiles (or the first), the longest length."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return {"seq": None, "tiles": None, "deviation": {}}
    labels = [r["tiles"] for r in ok]
    tiles = "-" if "-" in labels else DEFAULT_TILES if DEFAULT_TILES in labels else labels[0]
    ok = [r for r in ok if r["tiles"] == tiles]
    seq = max(r["seq"] for r in ok)
    keys = ("max", "mean", "std", "max_std", "rel_l2", "ctrl_ratio", "ratio_vs_naive", "peer_max_mean")
    dev = {r["dtype"]: {k: r[k] for k in keys if k in r} for r in ok if r["seq"] == seq}
    return {"seq": seq, "tiles": tiles, "deviation": dev}


def forward_records(rows: list[dict[str, Any]], spec: ForwardSpec, env: dict[str, Any]) -> list[dict[str, Any]]:
    """One result record per implementation (kind 'numerics_forward'), in the format `lra leaderboard` tabulates."""
    by_backend: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_backend[r["backend"]].append(r)
    out = []
    for backend, brows in by_backend.items():
        rep = _representative(brows)
        metrics = {"deviation": rep["deviation"], "seq": rep["seq"], "tiles": rep["tiles"], "rows": brows}
        out.append(numerics_forward_record(backend=backend, inputs=spec.inputs, study=spec.settings(),
                                           metrics=metrics, env=env))  # fmt: skip
    return out


def verdict_of(ratio: float | None) -> str:
    """The verdict on the paper's 'about 10x' for a ratio to naive at bf16 (see the module docstring)."""
    if ratio is None:
        return "-"
    if ratio >= VERDICT_REPRODUCES:
        return "reproduces ~10x"
    if ratio > VERDICT_SAME:
        return "above naive, short of 10x"
    if ratio >= 1 / VERDICT_SAME:
        return "as naive"
    return "below naive"


def why_of(info: dict[str, Any], seq: int) -> str:
    """Where an implementation rounds at bf16, in words (the reason its ratio is what it is)."""
    if info["kind"] != "emulation":
        return "the implementation's own arithmetic" + (f" ({info['about']})" if info.get("about") else "")
    low = [k for k in KNOBS if k != "inputs" and info[k] in ("in", "bf16")]
    tiles = -(-seq // info["block_n"])
    rounded = ", ".join(low) if low else "nothing"
    if info["form"] == "fa1":
        return f"O renormalised at each of {tiles} key tiles (Bc={info['block_n']}); in bf16: {rounded}"
    if info["form"] == "fa2":
        return f"one division at the end, {tiles} key tiles (Bc={info['block_n']}); in bf16: {rounded}"
    return f"one pass over all keys; in bf16: {rounded}"


def _low_points(points: list[dict[str, Any]]) -> dict[Any, float]:
    return {p["x"]: p["max"] for p in points if p["max"] > 0 and p["x"] not in ("fp64", "fp32")}


def twin_emulations(label: str, result: dict[str, Any]) -> list[tuple[str, float]]:
    """The emulations whose deviation curves lie within TWIN_GAP of `label`'s (mean relative gap over the figure's
    fp16/bf16 points), closest first: what a real kernel behaves like, read from the data rather than its name."""
    mine = _low_points(result["series"][label])
    gaps = []
    for other, points in result["series"].items():
        theirs = _low_points(points)
        common = [x for x in mine if x in theirs]
        if result["implementations"][other]["kind"] == "emulation" and common:
            gap = math.expm1(float(np.mean([abs(math.log(mine[x] / theirs[x])) for x in common])))
            gaps += [(gap, other)] if gap < TWIN_GAP else []
    return [(other, gap) for gap, other in sorted(gaps)]


def verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per implementation of a formats or length figure: its bf16 ratio to naive (at the longest length), the verdict
    and the reason (for a real kernel: the emulation it behaves like)."""
    out = {}
    for label, points in result["series"].items():
        bf16 = [p for p in points if p["x"] == "bf16" or result["figure"] == "length"]
        if not bf16 or label == "naive":
            continue
        point = bf16[-1]
        seq = point["x"] if result["figure"] == "length" else result["spec"].seqs[0]
        info = result["implementations"][label]
        out[label] = {"seq": seq, "ratio": point["ratio"], "verdict": verdict_of(point["ratio"])}
        out[label]["why"] = why_of(info, seq)
        twins = twin_emulations(label, result) if info["kind"] != "emulation" else []
        if twins:
            like = ", ".join(f"{other} ({gap:.0%})" for other, gap in twins)
            out[label]["why"] = f"behaves as {like}: {why_of(result['implementations'][twins[0][0]], seq)}"
    return out


def drivers(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The knobs figure read as causes: per base emulation, each one-knob change and the ratio it moves to."""
    ratio = {label: pts[0]["ratio"] for label, pts in result["series"].items() if pts}
    out = {}
    for base in (BASE_FA1, BASE_FA2):
        if base not in ratio:
            continue
        changes = [
            {"change": label.split("+", 1)[1], "ratio": ratio[label]}
            for label in ratio
            if label.startswith(base + "+") and ratio[label] is not None
        ]
        out[base] = [{"change": "(none)", "ratio": ratio[base]}, *sorted(changes, key=lambda c: c["ratio"])]
    return out


def figure_record(result: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """The result record of one figure (kind 'numerics_figure'): rows, series, verdicts or drivers."""
    spec: ForwardSpec = result["spec"]
    metrics: dict[str, Any] = {"series": result["series"], "rows": result["rows"]}
    if result["figure"] in ("formats", "length"):
        metrics["verdicts"] = verdicts(result)
    if result["figure"] == "knobs":
        metrics["drivers"] = drivers(result)
    return numerics_figure_record(
        figure=result["figure"],
        title=result["title"],
        inputs=spec.inputs,
        study=spec.settings(),
        implementations=result["implementations"],
        metrics=metrics,
        env=env,
    )


def figure_table(record: dict[str, Any]):
    """A rich table of one figure: implementations down, the sweep across; max |out - golden| (ratio to naive)."""
    from rich import box
    from rich.table import Table

    series = record["metrics"]["series"]
    t = Table(title=record["title"], box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("implementation", no_wrap=True)
    if record["figure"] == "knobs":  # one point per implementation: its deviation and ratio
        t.add_column("max |out - golden|")
        t.add_column("/naive")
        for label, (p, *_) in series.items():
            t.add_row(label, fmt(p["max"], ".2e"), fmt(p["ratio"], ".2f"))
        return t
    xs = list(dict.fromkeys(p["x"] for pts in series.values() for p in pts))
    for x in xs:
        t.add_column(str(x), no_wrap=True)
    for label, pts in series.items():
        by_x = {p["x"]: p for p in pts}
        cells = [f"{fmt(by_x[x]['max'], '.1e')} ({fmt(by_x[x]['ratio'], '.2f')})" if x in by_x else "-" for x in xs]
        t.add_row(label, *cells)
    return t


def verdict_lines(record: dict[str, Any]) -> list[str]:
    """The verdicts (formats, length) or drivers (knobs) of a figure record as lines of text."""
    m = record["metrics"]
    lines = [
        f"{label}: {v['verdict']} ({fmt(v['ratio'], '.2f')}x naive at bf16, N={v['seq']}): {v['why']}"
        for label, v in m.get("verdicts", {}).items()
    ]
    for base, changes in m.get("drivers", {}).items():
        steps = ", ".join(f"{c['change']} {fmt(c['ratio'], '.2f')}x" for c in changes)
        lines.append(f"{base}: ratio to naive after one change: {steps}")
    return lines


WEIGHTS_NOTE = (
    "W1: the Wasserstein-1 distance between the value distributions of the two runs' tensors (exact 1-D optimal "
    "transport: mean of |sort(W_A) - sort(W_B)|), averaged over tensors; max|dW|: the largest elementwise difference "
    "over tensors. Ratios: an A-vs-B slope over a control's (Golden et al.: flash 2-5x below low-precision training)."
)


def weights_tables(record: dict[str, Any]) -> list[Any]:
    """Rich tables: the curves over steps (max |dW| and mean W1 per pair) and the slopes."""
    from rich.table import Table

    pairs = record["metrics"]["pairs"]
    curves = Table(title=f"weight deviation over training: {record['task']} ({record['preset']})")
    curves.add_column("step")
    for pair in pairs:
        curves.add_column(f"{pair}: max|dW|")
        curves.add_column(f"{pair}: W1")
    for step in sorted({s for c in pairs.values() for s in c["steps"]}):
        cells = [str(step)]
        for c in pairs.values():
            i = c["steps"].index(step) if step in c["steps"] else None
            cells += ["-", "-"] if i is None else [fmt(c["max_abs"][i]), fmt(c["w1_mean"][i])]
        curves.add_row(*cells)
    slopes = Table(title="growth per step (least-squares slope over evaluations)")
    for col in ("pair", "slope max|dW|", "slope W1 mean"):
        slopes.add_column(col)
    for pair, c in pairs.items():
        slopes.add_row(pair, fmt(c["slope_max_abs"]), fmt(c["slope_w1_mean"]))
    return [curves, slopes]
