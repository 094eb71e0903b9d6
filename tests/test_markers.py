"""What the two markers' places alone tell (tasks/_pathfinder/markers.py, `lra data markers`): the labels and centres
it samples are the generator's, its classifiers find a label that the markers set and nothing in noise, the command
stores a record, and the leaderboard notes it under the preset's accuracy table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lra.cli.main import main
from lra.results.leaderboard import build_tables
from lra.results.store import load_records, save_record
from tasks._pathfinder import markers as M
from tasks._pathfinder.draw import draw
from tasks._pathfinder.store import GeneratedStore
from tests.test_leaderboard import run_record


def test_unordered_puts_the_two_centres_in_reading_order():
    centres = np.array([[[9, 1], [2, 5]], [[3, 4], [3, 2]], [[1, 1], [4, 0]]])
    assert M.unordered(centres).tolist() == [[[2, 5], [9, 1]], [[3, 2], [3, 4]], [[1, 1], [4, 0]]]


def test_rate_rule_reads_a_label_its_key_sets_and_says_0_for_an_unseen_key():
    keys = np.array([0, 1, 2, 3, 4, 5, 6, 7] * 5)
    labels = (keys >= 4).astype(np.int64)
    guess = M.rate_rule(keys, labels, np.array([7, 0, 5, 2, 9]))
    assert guess.tolist() == [1, 0, 1, 0, 0]


def synthetic(n: int, rng: np.random.Generator, label_by_distance: bool) -> M.Sample:
    """Random centres on a 64-px grid; the label 1 when the two are 20-40 px apart (or a coin, for noise)."""
    centres = rng.integers(0, 64, size=(n, 2, 2))
    dist = np.hypot(*(centres[:, 0] - centres[:, 1]).T)
    labels = ((dist >= 20) & (dist < 40)) if label_by_distance else rng.integers(0, 2, n)
    return M.Sample(labels.astype(np.int64), centres)


def test_the_classifiers_find_a_label_the_distance_sets_and_nothing_in_noise():
    rng = np.random.default_rng(0)
    acc = M.accuracies(64, synthetic(4000, rng, True), synthetic(1000, rng, True))
    assert acc["distance"] > 0.97  # 1-px bins of the distance: only the edges of the band can be missed
    assert acc["mlp"] > 0.9
    assert 0.6 < acc["offset"] < 1  # (|dy|, |dx|) cells of 2 px straddle the band's circles
    noise = M.accuracies(64, synthetic(4000, rng, False), synthetic(2000, rng, False))
    for rule in M.RULES:  # one standard error at 2,000 images is 1.1 points
        assert abs(noise[rule] - 0.5) < 0.05, (rule, noise)


@pytest.mark.parametrize("with_targets", [False, True])
def test_sample_gives_the_generators_labels_and_centres(tmp_path, with_targets):
    store = GeneratedStore(tmp_path, "pathfinder", 32, 14, 3)
    if with_targets:  # the path `lra data prepare --targets-only` leaves: images drawn from the carried pairs
        store.generate_targets({"test": 6})
        assert store.usable_targets("test", 6) is not None
    assert M.sample(store, "test", 0).centres.shape == (0, 2, 2)
    got = M.sample(store, "test", 6)
    drawn = [draw(32, 14, "test", i, 3) for i in range(6)]
    assert got.labels.tolist() == [d.label for d in drawn]
    assert got.centres.tolist() == [[list(c) for c in d.markers] for d in drawn]


def test_the_command_stores_a_record_of_the_generators_test_split(tmp_path, capsys):
    argv = ["data", "markers", "pathfinder", "--preset", "tiny", "--n-train", "40", "--n-test", "20", "--workers", "1"]
    assert main([*argv, "--data-dir", str(tmp_path / "data"), "--results", str(tmp_path / "results")]) == 0
    printed = capsys.readouterr().out
    assert "markers only, MLP on both centres" in printed
    (path,) = (tmp_path / "results").glob("markers_baseline__pathfinder__tiny__*.json")
    rec = json.loads(path.read_text())
    assert rec["kind"] == "markers_baseline" and rec["preset"] == "tiny"
    assert rec["data"] == {
        "resolution": 32,
        "difficulty": 14,
        "seed": 0,
        "generator": 2,
        "num_train": 40,
        "num_test": 20,
    }
    positive = np.mean([draw(32, 14, "test", i, 0).label for i in range(20)])
    assert rec["metrics"]["majority_acc"] == pytest.approx(max(positive, 1 - positive))
    assert set(rec["metrics"]) == {"majority_acc", "distance_acc", "offset_acc", "mlp_acc"}
    assert not (tmp_path / "data").exists()  # it reads the cache's pairs where they are, and writes nothing there


@pytest.mark.parametrize(
    "argv, message",
    [
        (["listops"], "listops is not a generated Pathfinder task"),
        (["pathfinder", "--n-train", "1"], "--n-train must be at least 2"),
        (["pathfinder", "--n-test", "0"], "--n-test must be at least 1"),
        (["pathfinder", "--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_the_command_refuses_bad_input_and_stores_nothing(tmp_path, argv, message, capsys):
    assert main(["data", "markers", *argv, "--results", str(tmp_path / "results")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_the_leaderboard_notes_the_markers_under_the_presets_accuracy_table(tmp_path):
    marks = {"path-256": (0.664, 0.629), "path-x": (0.558, 0.527)}
    for task, (mlp, distance) in marks.items():
        save_record(
            {"kind": "markers_baseline", "task": task, "preset": "curriculum", "date": "2026-12-06T00:00:00Z",
             "metrics": {"majority_acc": 0.504, "distance_acc": distance, "offset_acc": 0.6, "mlp_acc": mlp}},
            tmp_path,
        )  # fmt: skip
    save_record(  # another preset's: not in the curriculum table's note
        {"kind": "markers_baseline", "task": "pathfinder", "preset": "fa-paper", "date": "2026-12-06T00:00:00Z",
         "metrics": {"majority_acc": 0.5, "distance_acc": 0.54, "offset_acc": 0.5, "mlp_acc": 0.668}},
        tmp_path,
    )  # fmt: skip
    for task in marks:  # the table's columns are the tasks it has runs of
        save_record(run_record(task, "block_sparse_flash", 0.63, preset="curriculum"), tmp_path)
    tables = build_tables(load_records(tmp_path))
    (table,) = [t for t in tables if t.title.startswith("Accuracy, preset curriculum")]
    (note,) = [n for n in table.notes if n.startswith("Markers-only")]
    assert "path-x 55.8 (52.7), path-256 66.4 (62.9)." in note and "pathfinder" not in note
    (fa,) = [t for t in tables if t.title.startswith("Accuracy, preset fa-paper")]
    assert any("pathfinder 66.8 (54.0)" in n for n in fa.notes)
