"""The record schema (lra.core.records): each constructor's record reads back as written; a version-0 record of each
kind (as the writers stored it before the schema) upgrades to what today's constructor writes for the same facts;
every curated record reads in its kind's one shape; the curated records still regenerate the committed leaderboard
byte for byte; an unreadable record is skipped with a warning, or refused with --strict."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

from lra.cli.main import main
from lra.core import records as R
from lra.core.errors import DataCorruptError
from lra.results.store import curated_dir, load_records, save_record

ENV = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "python": "3.12.3"}
ENV |= {"git_commit": "4406908", "date": "2026-11-30T15:17:09Z"}
CONFIG = {"task": "image", "preset": "tiny", "model": {"layers": 1}, "train": {"seed": 0, "steps": 250}, "data": {}}
RUN_METRICS = {"test_acc": 0.31, "val_acc": 0.33, "best_step": 200, "steps_per_s": 5.0, "majority_acc": 0.1}
BENCH_METRICS = {"ms_per_step": 10.0, "steps_per_s": 100.0, "tokens_per_s": 1e6, "peak_mem_mb": 512.0}
MAX = {"mode": "max", "requested": "max", "fallback": None}
HISTORY = [{"step": 100, "val_acc": 0.2, "val_loss": 2.1, "time": 3.5}]
TILES = [{"head_dim": 16, "shape": [1, 1, 32], "rows": [], "best": {"block_m": 16}}]
STUDY = {"dtypes": ["bf16"], "seqs": [256], "inputs": "normal"}
FORWARD_METRICS = {"deviation": {"bf16": {"max": 1e-3, "mean": 1e-5}}, "seq": 256, "tiles": "-", "rows": []}
FIGURE_METRICS = {"series": {"naive": [{"x": "bf16", "max": 1e-3, "ratio": 1.0}]}, "rows": [], "verdicts": {}}
WEIGHTS_METRICS = {"pairs": {"naive vs flash": {"steps": [100]}}, "ratios": {}}


def run_facts(**changes):
    facts = dict(task="image", backend="naive", preset="tiny", steps=250, seq_len=1024, world_size=1)
    facts |= dict(metrics=RUN_METRICS, config=CONFIG, config_hash="f3119852e27a", compile=MAX)
    facts |= dict(attention_dropout_applied=None, history=HISTORY, sessions=[], run_dir="/tmp/r/naive-tiny-s0", env=ENV)
    return facts | changes


def bench_train_facts(**changes):
    facts = dict(task="image", backend="flash", preset="default", seq_len=1024, batch_size=256, config=CONFIG)
    facts |= dict(config_hash="3ae6bfa796f4", timed_steps=8, world_size=1, data="task data", data_on_device=True)
    facts |= dict(status="ok", compile=MAX, attention_dropout_applied=None, metrics=BENCH_METRICS, env=ENV)
    return facts | changes


def attention_facts(**changes):
    facts = dict(backend="flash", seq=4096, head_dim=64, heads=8, batch=32, dtype="bf16", mode="fwd")
    facts |= dict(dropout=0.1, dropout_effective=0.1015625, ms=0.58, tflops=354.3, peak_mem_mb=516.0)
    facts |= dict(density=1.0, layout=None, status="ok", device="NVIDIA H200", env={**ENV, "device": "cuda"})
    return facts | changes


def weights_facts(**changes):
    facts = dict(task="listops", backend_a="naive", backends_b=["flash", "emu:fa1-all"], preset="tiny", steps=1000)
    facts |= dict(controls=["seeds", "fp16"], deterministic=True, loss_scaling=False, metrics=WEIGHTS_METRICS)
    return facts | dict(config=CONFIG, env=ENV) | changes


CONSTRUCTED = {
    "run": lambda: R.run_record(**run_facts()),
    "pretrain": lambda: R.run_record(**run_facts(kind="pretrain")),  # train.objective=masked
    "bench_train": lambda: R.bench_train_record(**bench_train_facts()),
    "bench_attention": lambda: R.bench_attention_record(**attention_facts()),
    "bench_tiles": lambda: R.bench_tiles_record(dtype="bf16", dropout=0.0, results=TILES, env=ENV),
    "numerics_forward": lambda: R.numerics_forward_record(
        backend="flash", inputs="outlier", study=STUDY, metrics=FORWARD_METRICS, env=ENV
    ),
    "numerics_figure": lambda: R.numerics_figure_record(
        figure="formats",
        title="Fig. 3",
        inputs="normal",
        study=STUDY,
        implementations={"naive": {}},
        metrics=FIGURE_METRICS,
        env=ENV,
    ),  # fmt: skip
    "numerics_weights": lambda: R.numerics_weights_record(**weights_facts()),
    "markers_baseline": lambda: R.markers_baseline_record(
        task="path-256",
        preset="curriculum",
        data={"resolution": 256, "difficulty": 14, "seed": 0, "generator": 2, "num_train": 40, "num_test": 20},
        metrics={"majority_acc": 0.5, "distance_acc": 0.6, "offset_acc": 0.6, "mlp_acc": 0.65},
        env=ENV,
    ),
}


@pytest.mark.parametrize("kind", sorted(CONSTRUCTED))
def test_each_constructor_writes_a_record_that_reads_back_as_written(tmp_path, kind):
    rec = CONSTRUCTED[kind]()
    assert rec["kind"] == kind and rec["schema"] == R.SCHEMA
    assert all(k in rec for k in R.ENV_FIELDS)
    path = save_record(rec, tmp_path)
    assert R.read_record(path) == json.loads(json.dumps(rec))  # as JSON keeps it, nothing added or changed
    (loaded,) = load_records(tmp_path)
    assert {k: v for k, v in loaded.items() if not k.startswith("_")} == R.read_record(path)


def test_a_bench_attention_record_takes_the_rows_device_over_the_environments():
    rec = CONSTRUCTED["bench_attention"]()
    assert rec["device"] == "NVIDIA H200" and rec["torch"] == ENV["torch"]


# Version-0 records: the shapes the writers stored before the schema (those of the curated records), field by field.
V0_RUN_BEFORE_COMPILE = {
    "kind": "run", **ENV, "task": "image", "backend": "naive", "preset": "tiny", "steps": 250, "seq_len": 1024,
    "world_size": 1, "metrics": RUN_METRICS, "config": CONFIG, "config_hash": "f3119852e27a",
    "run_dir": "/tmp/r/naive-tiny-s0",
}  # fmt: skip
V0_BENCH_TRAIN_FIRST = {
    "kind": "bench_train", **ENV, "task": "image", "backend": "flash", "preset": "default", "seq_len": 1024,
    "batch_size": 256, "config": CONFIG, "config_hash": "3ae6bfa796f4", "timed_steps": 8, "data": "task data",
    "status": "ok", "metrics": BENCH_METRICS, "run_dir": None,
}  # fmt: skip
V0_ATTENTION_BEFORE_DROPOUT = {
    "kind": "bench_attention", **{k: v for k, v in ENV.items() if k != "python"}, "backend": "flash", "seq": 4096,
    "head_dim": 64, "heads": 8, "batch": 32, "dtype": "bf16", "mode": "fwd", "ms": 0.58, "tflops": 354.3,
    "peak_mem_mb": 516.0, "density": 1.0, "layout": None, "status": "ok",
}  # fmt: skip
V0_WEIGHTS_ONE_B = {
    "kind": "numerics_weights", **ENV, "task": "listops", "backend": "flash", "backend_a": "naive",
    "backend_b": "flash", "preset": "tiny", "steps": 1000, "controls": ["seeds", "fp16"], "deterministic": True,
    "low_precision": "bf16", "metrics": WEIGHTS_METRICS, "config": CONFIG,
}  # fmt: skip


def test_version_0_records_upgrade_to_what_the_constructor_writes_for_the_same_facts():
    before_compile = R.run_record(**run_facts(compile=None, history=[]))
    assert before_compile["compile"] == {"mode": "none", "requested": "none", "fallback": None}
    assert R.upgrade(V0_RUN_BEFORE_COMPILE) == before_compile
    written = R.run_record(**run_facts())
    later_run = {k: v for k, v in written.items() if k not in ("schema", "attention_dropout_applied")}
    assert R.upgrade(later_run) == written  # the writer left the field out when p = 0
    first = R.bench_train_record(**bench_train_facts(compile=None, data_on_device=None))
    assert R.upgrade(V0_BENCH_TRAIN_FIRST) == first and "run_dir" not in first
    python_none = {**ENV, "device": "cuda", "python": None}
    old_attention = R.bench_attention_record(**attention_facts(dropout=0.0, dropout_effective=0.0, env=python_none))
    assert R.upgrade(V0_ATTENTION_BEFORE_DROPOUT) == old_attention
    one_b = R.numerics_weights_record(**weights_facts(backends_b=["flash"], loss_scaling=None))
    assert R.upgrade(V0_WEIGHTS_ONE_B) == {**one_b, "low_precision": "bf16"}  # a field the schema lacks is kept


@pytest.mark.parametrize("kind", ["bench_tiles", "numerics_forward", "numerics_figure"])
def test_version_0_records_of_unchanged_kinds_upgrade_to_the_constructors(kind):
    rec = CONSTRUCTED[kind]()
    v0 = {k: v for k, v in rec.items() if k != "schema"}
    assert R.upgrade(v0) == rec


def test_compile_has_one_shape_in_records():
    assert R.upgrade({"kind": "run", "compile": "max"})["compile"] == MAX
    fell_back = {"mode": "none", "requested": "max", "fallback": "BackendCompilerFailed: x"}
    assert R.run_record(**run_facts(compile=fell_back))["compile"] == fell_back
    assert R.run_record(**run_facts(compile="default"))["compile"]["requested"] == "default"


def test_current_records_pass_unchanged_and_newer_or_bad_schemas_are_refused(tmp_path):
    rec = CONSTRUCTED["run"]()
    assert R.upgrade(rec) == rec and R.upgrade(rec) is not rec
    with pytest.raises(DataCorruptError, match=rf"x.json: record schema {R.SCHEMA + 1} is newer .* update lra"):
        R.upgrade({**rec, "schema": R.SCHEMA + 1}, source="x.json")
    with pytest.raises(DataCorruptError, match="schema 'one' is not a record schema version"):
        R.upgrade({**rec, "schema": "one"})
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(DataCorruptError, match="list.json holds a list, not a record"):
        R.read_record(tmp_path / "list.json")


def test_every_curated_record_reads_in_its_kinds_one_shape():
    shapes = {kind: set(make()) for kind, make in CONSTRUCTED.items()}
    records = load_records(curated_dir())
    assert len(records) > 300
    for rec in records:
        missing = shapes[rec["kind"]] - set(rec)
        assert not missing, f"{rec['_file']} lacks {sorted(missing)}"
        if "compile" in rec:
            assert set(rec["compile"]) == {"mode", "requested", "fallback"}, rec["_file"]


def test_the_curated_records_regenerate_the_committed_leaderboard_byte_for_byte(tmp_path, monkeypatch):
    """The upgrade changes no cell: LEADERBOARD.md and leaderboard.html written from leaderboard/results equal the
    committed files (links into the store made relative again). Plots are laid out but not drawn (the PNG writes
    take most of the time); the page lists the same figures. Regenerate the leaderboard when you add records."""
    pytest.importorskip("matplotlib")
    from lra.results import plots
    from lra.results.leaderboard import write_leaderboard

    def not_drawn(fig, path):
        import matplotlib.pyplot as plt

        plt.close(fig)
        return path

    for info in pkgutil.iter_modules(plots.__path__):
        module = importlib.import_module(f"{plots.__name__}.{info.name}")
        if hasattr(module, "save"):
            monkeypatch.setattr(module, "save", not_drawn)
    write_leaderboard([curated_dir()], tmp_path)
    committed = curated_dir().parent
    store_uri = curated_dir().resolve().as_uri() + "/"
    for name in ("LEADERBOARD.md", "leaderboard.html"):
        written = (tmp_path / name).read_text(encoding="utf-8").replace(store_uri, "results/")
        assert written == (committed / name).read_text(encoding="utf-8"), f"{name} differs from the committed one"


def _store_with_a_truncated_record(tmp_path):
    from tests.test_leaderboard import run_record

    store = tmp_path / "store"
    save_record(run_record("listops", "flash", 0.30), store)
    good = next(store.iterdir()).read_text()
    (store / "truncated.json").write_text(good[: len(good) // 2])
    return store


def test_leaderboard_skips_an_unreadable_record_with_a_warning_naming_it(tmp_path, capsys):
    store = _store_with_a_truncated_record(tmp_path)
    out = tmp_path / "out"
    assert main(["leaderboard", "--results", str(store), "--out", str(out), "--no-plots", "--format", "md"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: results store: {store / 'truncated.json'} is not a readable JSON record" in err
    assert "(skipped; --strict refuses)" in err
    md = (out / "LEADERBOARD.md").read_text()
    assert "| `flash` | 30.0 (n=1)" in md and "truncated.json" not in md


def test_leaderboard_strict_refuses_an_unreadable_record_in_one_line(tmp_path, capsys):
    store = _store_with_a_truncated_record(tmp_path)
    out = tmp_path / "out"
    argv = ["leaderboard", "--results", str(store), "--out", str(out), "--no-plots", "--strict"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: results store:") and "truncated.json is not a readable JSON record" in err
    assert len(err.splitlines()) == 1 and not out.exists()  # nothing written
