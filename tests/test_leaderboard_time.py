"""Leaderboard time to accuracy from hand-made evaluation histories: each block's targets, the first evaluation at
each, the figure's points at the table's targets, and the campaigns' device-hours with every stage counted."""

from __future__ import annotations

import pytest

from lra.results.store import load_records
from lra.results.table import FEW_MARK
from tests.test_leaderboard import run_record, stored, tables_of


def curve(*points):
    """An evaluation history from (step, val_acc, seconds) points."""
    return [{"step": st, "val_acc": acc, "val_loss": 1.0, "time": t} for st, acc, t in points]


def tta_cell(table, task, backend, column, config="configs/"):
    """The text of a time-to-accuracy cell: the row of (task, config, backend), under header `column`."""
    (row,) = [r for r in table.cells() if [c.text for c in r[:3]] == [task, config, backend]]
    return row[table.header.index(column)].text


TTA = "Time to accuracy, preset default: the LRA configs"
T1, T2, T3 = "target 1 (50%)", "target 2 (90%)", "target 3 (100%)"


def crossing_records():
    """Majority 10%; flash's seeds end at 41% and 39% (mean 40%), naive's at 50%: targets 25.0, 37.0 and 40.0%."""
    runs = {
        "flash": [
            curve((100, 0.20, 10.0), (200, 0.30, 20.0), (300, 0.38, 30.0), (400, 0.41, 40.0)),
            curve((100, 0.26, 12.0), (200, 0.37, 24.0), (300, 0.39, 36.0)),  # never reaches 40%
        ],
        "naive": [
            curve((100, 0.30, 30.0), (200, 0.45, 60.0), (300, 0.50, 90.0)),
            curve((100, 0.25, 34.0), (200, 0.50, 68.0)),
        ],
    }
    return [
        run_record("listops", b, 0.3, seed=s, history=h, majority_acc=0.1, val_acc=max(p["val_acc"] for p in h))
        for b, hists in runs.items()
        for s, h in enumerate(hists)
    ]


def test_time_to_accuracy_takes_the_first_evaluation_at_each_target(tmp_path):
    table = tables_of(stored(tmp_path, crossing_records()))[TTA]
    assert tta_cell(table, "listops", "flash", "targets (%)") == "25.0 / 37.0 / 40.0"
    assert tta_cell(table, "listops", "naive", "targets (%)") == "25.0 / 37.0 / 40.0"  # one set for the block
    # flash to 25%: seed 0 at step 200 (20 s), seed 1 at step 100 (12 s); std of (200, 100) = 70.7, of (20, 12) = 5.7
    assert tta_cell(table, "listops", "flash", T1) == f"150 ± 71 steps; 16 ± 6 s (n=2) {FEW_MARK}"
    # to 37%: seed 1's 0.37 at step 200 counts (>=); seed 0 first at step 300; std of (30, 24) s = 4.2
    assert tta_cell(table, "listops", "flash", T2) == f"250 ± 71 steps; 27 ± 4 s (n=2) {FEW_MARK}"
    assert tta_cell(table, "listops", "flash", T3) == f"400 steps; 40 s (n=1) {FEW_MARK}, 1 of 2 reached"
    # naive: both seeds at step 100 (30 s, 34 s: std 2.8), then both at step 200 (60 s, 68 s: std 5.7)
    assert tta_cell(table, "listops", "naive", T1) == f"100 ± 0 steps; 32 ± 3 s (n=2) {FEW_MARK}"
    assert tta_cell(table, "listops", "naive", T2) == f"200 ± 0 steps; 64 ± 6 s (n=2) {FEW_MARK}"
    assert tta_cell(table, "listops", "naive", T3) == f"200 ± 0 steps; 64 ± 6 s (n=2) {FEW_MARK}"
    assert tta_cell(table, "listops", "naive", "best val acc") == f"50.0 ± 0.0 (n=2) {FEW_MARK}"
    notes = " ".join(table.notes)
    assert "50%, 90% and 100% of the way" in notes and "rounded down to 0.5 points" in notes
    assert "share a GPU" in notes and "no evaluation history" not in notes


def test_each_task_and_config_gets_its_own_targets_rounded_down(tmp_path):
    records = [run_record("listops", b, 0.3, seed=s, majority_acc=0.1705, val_acc=v)
               for b, v in (("flash", 0.3629), ("naive", 0.40)) for s in range(2)]  # fmt: skip
    records += [run_record("text", b, 0.6, majority_acc=0.5, val_acc=v) for b, v in (("flash", 0.65), ("naive", 0.62))]
    records += [run_record("listops", "flash", 0.3, majority_acc=0.1705, val_acc=0.30, overrides=["train.steps=200"])]
    records += [run_record("listops", "flash", 0.3, preset="tiny", majority_acc=0.1705, val_acc=0.35)]
    tables = tables_of(stored(tmp_path, records))
    table = tables[TTA]
    # listops: 17.05 + (36.29 - 17.05) x (0.5, 0.9, 1) = 26.67, 34.37, 36.29, each rounded down to 0.5 points
    assert tta_cell(table, "listops", "naive", "targets (%)") == "26.5 / 34.0 / 36.0"
    # text: 50 + (62 - 50) x (0.5, 0.9, 1) = 56.0, 60.8, 62.0
    assert tta_cell(table, "text", "flash", "targets (%)") == "56.0 / 60.5 / 62.0"
    # the 200-step config is a block of its own: 17.05 + 12.95 x (0.5, 0.9, 1) = 23.5, 28.7, 30.0
    (other,) = {r[1].text for r in table.cells()} - {"configs/"}
    assert tta_cell(table, "listops", "flash", "targets (%)", config=other) == "23.5 / 28.5 / 30.0"
    assert [r[0].text for r in table.cells()] == ["listops"] * 3 + ["text"] * 2  # configs/ first, LRA task order
    assert not any("tiny" in title for title in tables if title.startswith("Time to accuracy"))


def test_time_to_accuracy_without_history_is_a_dash(tmp_path):
    records = crossing_records()
    records += [run_record("text", b, 0.6, majority_acc=0.5, val_acc=0.65) for b in ("flash", "naive")]
    table = tables_of(stored(tmp_path, records))[TTA]
    assert [tta_cell(table, "text", "flash", c) for c in (T1, T2, T3)] == ["-", "-", "-"]
    assert tta_cell(table, "text", "flash", "targets (%)") == "57.5 / 63.5 / 65.0"
    assert tta_cell(table, "listops", "naive", T1) != "-"
    assert any("no evaluation history" in n for n in table.notes)


def test_time_to_accuracy_figure_plots_seconds_at_the_tables_targets():
    from lra.results.plots.curves import _target_points

    records = [dict(r, _store="curated", _path=f"r{i}.json") for i, r in enumerate(crossing_records())]
    points = _target_points(records)
    assert [(x, a.values) for x, a in points[("listops", "flash")]] == [
        (25.0, (20.0, 12.0)),
        (37.0, (30.0, 24.0)),
        (40.0, (40.0,)),
    ]
    assert [x for x, _ in points[("listops", "naive")]] == [25.0, 37.0, 40.0]


def test_campaign_stages_show_device_hours_with_every_stage_counted(tmp_path):
    """Two stages of one campaign: the second's hours to each of the paper's accuracies are the first stage's
    device-hours plus its own training seconds to that evaluation; its learning curve is plotted on that axis."""
    pytest.importorskip("matplotlib")
    from lra.results.plots.campaigns import campaign_curves

    first_s, own_s = 1800.0, 5400.0
    stage1 = run_record("path-64", "block_sparse_flash", 0.58, preset="curriculum", history=curve((312, 0.52, 90.0)))
    stage1["campaign"] = {"name": "path-x-bsf", "stage": 1, "stages": ["path-64", "path-x"], "init_from": None,
                          "device_s_before": 0.0, "device_s": first_s, "sessions": 1}  # fmt: skip
    stage2 = run_record("path-x", "block_sparse_flash", 0.57, preset="curriculum",
                        history=curve((312, 0.51, 300.0), (624, 0.565, 1300.0), (936, 0.62, 2500.0)))  # fmt: skip
    stage2["campaign"] = {"name": "path-x-bsf", "stage": 2, "stages": ["path-64", "path-x"], "init_from": "path-64",
                          "device_s_before": first_s, "device_s": own_s, "sessions": 3}  # fmt: skip
    store = stored(tmp_path, [stage1, stage2])
    table = tables_of(store)["Campaigns: device-hours per stage, all stages counted"]
    rows = {r[1].text: [c.text for c in r] for r in table.cells()}
    col = table.header.index
    second = rows["2/2 path-x from path-64"]
    assert second[col("stage (h)")] == f"{own_s / 3600:.2f}"
    assert second[col("at its end (h)")] == f"{(first_s + own_s) / 3600:.2f}"
    assert second[col("to val >= 56.0")] == f"{(first_s + 1300.0) / 3600:.2f} h (step 624)"
    assert second[col("to val >= 61.4")] == f"{(first_s + 2500.0) / 3600:.2f} h (step 936)"
    assert second[col("to val >= 63.1")] == "-" and rows["1/2 path-64"][col("to val >= 56.0")] == "-"
    figure = campaign_curves(load_records(store), tmp_path / "plots")
    assert figure is not None and figure.path.is_file()
