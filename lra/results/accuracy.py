"""Accuracy tables: one per preset (the papers' rows beside the runs of the recipe they used), runs whose settings
differ from configs/, and smoke runs. Every measured cell aggregates the seeds of one config."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lra.results.aggregate import (
    SEEDS_NOTE,
    aggregate,
    config_changes,
    fmt_agg,
    group_by,
    is_canonical,
    newest,
    refs_of,
    run_key,
    task_order,
)
from lra.results.published import LRA_TASKS, PAPERS, Paper, papers_for
from lra.results.table import NO_DROPOUT_NOTE, Cell, Row, Table, dropout_marked, name, num, skips_dropout

PRESET_TITLES = {
    "default": "the LRA configs",
    "fa-paper": "the FlashAttention paper's recipe",
    "fly": "the FlashAttention authors' configs for the approximate baselines",
    "tiny": "CPU-sized smoke runs",
}


def preset_order(presets) -> list[str]:
    """Presets in page order: the LRA configs, the FlashAttention recipe, then the rest by name."""
    first = list(dict.fromkeys(p.preset for p in PAPERS))
    return [p for p in first if p in presets] + sorted(set(presets) - set(first))


def accuracy_tables(runs: list[dict[str, Any]], markers: Sequence[dict[str, Any]] = ()) -> list[Table]:
    """The per-preset accuracy tables, the runs with other settings, and the smoke runs; `markers`: the
    markers_baseline records (`lra data markers`), each noted under its preset's table."""
    trained = [r for r in runs if r.get("preset") != "tiny"]
    canonical = [r for r in trained if is_canonical(r)]
    presets = preset_order({r.get("preset", "default") for r in canonical} | {p.preset for p in PAPERS})
    tables = [
        preset_table(
            [r for r in canonical if r.get("preset", "default") == p],
            p,
            markers=[m for m in markers if m.get("preset") == p],
        )
        for p in presets
    ]
    tables.append(other_runs_table([r for r in trained if not is_canonical(r)]))
    tables.append(preset_table([r for r in runs if r.get("preset") == "tiny"], "tiny", exact=False))
    return [t for t in tables if t is not None]


def _newest_groups(runs: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """Per (task, backend, store): the seeds of the config with the newest record."""
    best: dict[tuple, list[dict[str, Any]]] = {}
    for key, recs in group_by(runs, run_key).items():
        cell = (key[0], key[1], key[4])
        if cell not in best or newest([*best[cell], *recs]) in recs:
            best[cell] = recs
    return best


def acc_cell(recs: list[dict[str, Any]], metric: str = "test_acc") -> Cell:
    """Mean ± std accuracy (%) of one config's seeds, with the records behind it."""
    agg = aggregate(r.get("metrics", {}).get(metric) for r in recs)
    text = dropout_marked(fmt_agg(agg, scale=100), recs)
    return num(text, refs=refs_of(recs), few=agg is not None and agg.few)


def _lra_avg(means: dict[str, float | None]) -> str:
    vals = [means.get(t) for t in LRA_TASKS]
    return f"{sum(vals) / len(vals):.1f}" if all(v is not None for v in vals) else "-"


def _mean_acc(recs: list[dict[str, Any]] | None) -> float | None:
    agg = aggregate(r.get("metrics", {}).get("test_acc") for r in recs or [])
    return None if agg is None else 100 * agg.mean


def preset_table(
    runs: list[dict[str, Any]], preset: str, exact: bool = True, markers: Sequence[dict[str, Any]] = ()
) -> Table | None:
    """Task x backend accuracy for one preset; the paper trained with that preset's recipe adds its rows.

    `exact`: the runs all have the preset's current settings (else each cell shows its newest config); `markers`:
    the preset's markers_baseline records, noted for the table's tasks."""
    papers = papers_for(preset)
    groups = _newest_groups(runs)
    if not groups and not papers:
        return None
    published = {t for paper in papers for accs in paper.rows.values() for t in accs}
    tasks = task_order({k[0] for k in groups} | published)
    rows = []
    for backend, store in sorted({(k[1], k[2]) for k in groups}):
        by_task = {t: groups.get((t, backend, store)) for t in tasks}
        cells = [acc_cell(recs) if recs else Cell("-") for recs in by_task.values()]
        avg = _lra_avg({t: _mean_acc(recs) for t, recs in by_task.items()})
        rows.append(Row([name(backend), *cells, num(avg), Cell(f"measured ({store})")]))
    rows += [row for paper in papers for row in _paper_rows(paper, tasks)]
    settings = "settings exactly as configs/ holds them" if exact else "the newest config of each task and backend"
    notes = [
        f"Test accuracy (%) on the best-validation checkpoint, preset {preset} ({PRESET_TITLES.get(preset, preset)}),"
        f" {settings}. {SEEDS_NOTE}"
    ]
    notes += [f"Published rows: the {paper.name} ({paper.cite}), trained with this recipe." for paper in papers]
    notes += [NO_DROPOUT_NOTE] if skips_dropout(r for recs in groups.values() for r in recs) else []
    notes += _majority_note(runs)
    notes += _markers_note(markers, tasks)
    title = f"Accuracy, preset {preset}: {PRESET_TITLES.get(preset, 'configs/ as written')}"
    return Table(title, ["backend", *tasks, "LRA avg", "source"], rows, notes, section="accuracy")


def _paper_rows(paper: Paper, tasks: list[str]) -> list[Row]:
    rows = []
    for model, accs in paper.rows.items():
        cells = [num("FAIL" if accs[t] is None else f"{accs[t]:.1f}") if t in accs else Cell("-") for t in tasks]
        rows.append(Row([Cell(model), *cells, num(_lra_avg(accs)), Cell(paper.name)], published=True))
    return rows


def _majority_note(runs: list[dict[str, Any]]) -> list[str]:
    """The majority-class accuracy of each task's test split (what a constant guess scores)."""
    maj = {}
    for task, recs in group_by(runs, lambda r: r.get("task")).items():
        value = newest(recs).get("metrics", {}).get("majority_acc")
        if value is not None:
            maj[task] = value
    if not maj:
        return []
    listed = ", ".join(f"{t} {100 * maj[t]:.1f}" for t in task_order(maj))
    return [f"Majority-class accuracy of the test splits: {listed}."]


def _markers_note(markers: Sequence[dict[str, Any]], tasks: list[str]) -> list[str]:
    """What the markers' places alone score on each of `tasks` that has a markers_baseline record (the newest)."""
    found = {}
    for task, recs in group_by(markers, lambda r: r.get("task")).items():
        metrics = newest(recs).get("metrics", {})
        if task in tasks and metrics.get("mlp_acc") is not None:
            found[task] = (metrics["mlp_acc"], metrics.get("distance_acc"))
    if not found:
        return []
    listed = ", ".join(
        f"{t} {100 * found[t][0]:.1f}" + ("" if found[t][1] is None else f" ({100 * found[t][1]:.1f})")
        for t in task_order(found)
    )
    return [
        "Markers-only accuracy of the test splits, no path traced (`lra data markers`: a small MLP on the two "
        f"marker centres, fitted on training images; in brackets the markers' distance alone): {listed}. A figure "
        "under it need not show path tracing."
    ]


def other_runs_table(runs: list[dict[str, Any]]) -> Table | None:
    """Runs whose settings differ from configs/ (--set overrides, an older config): one row per config."""
    if not runs:
        return None
    rows = []
    for key, recs in sorted(group_by(runs, run_key).items(), key=lambda kv: tuple(map(str, kv[0]))):
        task, backend, preset, cfg, store = key
        rows.append(
            Row(
                [Cell(str(task)), name(str(backend)), Cell(str(preset)), Cell(str(cfg)[:8])]
                + [Cell(config_changes(newest(recs))), acc_cell(recs), acc_cell(recs, "val_acc")]
                + [num(str(newest(recs).get("steps", "-"))), Cell(f"measured ({store})")]
            )
        )
    header = ["task", "backend", "preset", "config", "differs from configs/", "test acc", "best val acc", "steps"]
    notes = [f"Accuracy (%) of runs whose settings are not those of configs/ now, one row per config. {SEEDS_NOTE}"]
    notes += [NO_DROPOUT_NOTE] if skips_dropout(runs) else []
    return Table("Runs with other settings", [*header, "source"], rows, notes, section="accuracy")
