"""Leaderboard tables from hand-made records: seed aggregation (mean, std, n; n < 3 marked), published rows matched to
their preset, speed-ups, stores and where the output goes, determinism."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from lra.core.errors import ConfigError, DataCorruptError
from lra.results.leaderboard import build_tables, write_leaderboard
from lra.results.store import curated_dir, display_path, load_records, save_record
from lra.results.table import FEW_MARK, as_cell
from lra.train.config import load_config


def run_record(task, backend, acc, seed=0, preset="default", overrides=(), history=None, **metrics):
    """A `run` record as `lra run` stores it, with the config `configs/` resolves for (task, preset, seed); `history`
    is the evaluation history ({step, val_acc, time} per evaluation), `metrics` override the default figures."""
    config = load_config(task, None if preset == "default" else preset, [f"train.seed={seed}", *overrides])
    base = {"test_acc": acc, "val_acc": acc + 0.01, "majority_acc": 0.2, "train_time_s": 10.0, "time_to_acc_s": {}}
    return {
        "kind": "run",
        "task": task,
        "backend": backend,
        "preset": preset,
        "date": "2026-11-30T10:00:00Z",
        "device": "cpu",
        "steps": config.train.steps,
        "metrics": {**base, **metrics},
        "config": config.for_backend(backend).to_dict(),
        **({"history": history} if history is not None else {}),
    }


def bench_record(task, backend, sps, status="ok", seq=1024, preset="default", **extra):
    rec = {
        "kind": "bench_train",
        "task": task,
        "backend": backend,
        "preset": preset,
        "seq_len": seq,
        "device": "NVIDIA H200",
        "date": "2026-11-30T10:00:00Z",
        "status": status,
        "metrics": {"steps_per_s": sps, "peak_mem_mb": 100.0, "tokens_per_s": 1000.0 * sps} if status == "ok" else {},
    }
    return {**rec, **extra}


def stored(tmp_path, records, name="results"):
    store = tmp_path / name
    for rec in records:
        save_record(rec, store)
    return store


def tables_of(store):
    return {t.title: t for t in build_tables(load_records(store))}


def cell(table, row_name, column):
    """The text of the cell in the row whose first cell is `row_name`, under header `column`."""
    col = table.header.index(column)
    (row,) = [r for r in table.cells() if r[0].text == row_name]
    return row[col].text


def test_accuracy_cells_are_mean_std_and_n_over_seeds(tmp_path):
    flash = [0.30, 0.36, 0.33]
    naive = [0.35, 0.37]
    records = [run_record("listops", "flash", a, seed=s) for s, a in enumerate(flash)]
    records += [run_record("listops", "naive", a, seed=s) for s, a in enumerate(naive)]
    store = stored(tmp_path, records)
    table = tables_of(store)["Accuracy, preset default: the LRA configs"]
    # flash: mean 33.0, sample std sqrt(((-3)^2 + 3^2 + 0^2) / 2) = 3.0, three seeds: not marked
    assert cell(table, "flash", "listops") == "33.0 ± 3.0 (n=3)"
    # naive: mean 36.0, sample std sqrt((1 + 1) / 1) = 1.414..., two seeds: marked
    assert cell(table, "naive", "listops") == f"36.0 ± 1.4 (n=2) {FEW_MARK}"
    assert cell(table, "naive", "source") == f"measured ({display_path(store)})"  # a store is named by its folder
    flash_cell = next(r for r in table.cells() if r[0].text == "flash")[1]
    assert [ref.label for ref in flash_cell.refs] == ["s0", "s1", "s2"] and not flash_cell.few
    assert all(ref.path.is_file() for ref in flash_cell.refs)


def test_a_single_seed_shows_no_spread_and_is_marked(tmp_path):
    table = tables_of(stored(tmp_path, [run_record("listops", "flash", 0.372)]))
    assert cell(table["Accuracy, preset default: the LRA configs"], "flash", "listops") == f"37.2 (n=1) {FEW_MARK}"


def test_other_configs_are_not_mixed_into_the_cell(tmp_path):
    records = [run_record("listops", "flash", a, seed=s) for s, a in enumerate([0.30, 0.36, 0.33])]
    records += [run_record("listops", "flash", 0.9, seed=s, overrides=["train.steps=200"]) for s in range(2)]
    tables = tables_of(stored(tmp_path, records))
    main = tables["Accuracy, preset default: the LRA configs"]
    assert cell(main, "flash", "listops") == "33.0 ± 3.0 (n=3)"
    other = tables["Runs with other settings"]
    (row,) = other.cells()
    assert row[other.header.index("differs from configs/")].text == "train.steps=200"
    assert row[other.header.index("test acc")].text == f"90.0 ± 0.0 (n=2) {FEW_MARK}"


def test_published_rows_sit_beside_the_preset_they_were_trained_with(tmp_path):
    try:
        load_config("listops", "fa-paper")
    except ConfigError as e:
        pytest.skip(f"no fa-paper preset in configs/ yet: {e}")
    records = [run_record("listops", "flash", 0.376, seed=s, preset="fa-paper") for s in range(3)]
    tables = tables_of(stored(tmp_path, records))
    lra = tables["Accuracy, preset default: the LRA configs"]
    fa = tables["Accuracy, preset fa-paper: the FlashAttention paper's recipe"]
    assert cell(fa, "flash", "listops") == "37.6 ± 0.0 (n=3)"
    assert cell(fa, "FlashAttention", "listops") == "37.6" and cell(fa, "FlashAttention", "source") == (
        "FlashAttention paper"
    )
    assert cell(lra, "Transformer", "listops") == "36.4" and cell(lra, "Transformer", "source") == "LRA paper"
    assert {r[-1].text for r in lra.cells()} == {"LRA paper"}  # no measured row: the runs used the other recipe
    assert all(getattr(r, "published", False) for r in lra.rows)
    assert "FlashAttention" not in {r[0].text for r in lra.cells()}


def test_lra_average_needs_all_five_tasks(tmp_path):
    accs = dict(listops=0.4, text=0.6, retrieval=0.7, image=0.4, pathfinder=0.7)
    records = [run_record(t, "naive", a, seed=s) for t, a in accs.items() for s in range(3)]
    table = tables_of(stored(tmp_path, records))["Accuracy, preset default: the LRA configs"]
    assert cell(table, "naive", "LRA avg") == "56.0"
    assert table.header[1:6] == ["listops", "text", "retrieval", "image", "pathfinder"]


def test_speed_up_geometric_mean_oom_and_published_speedups(tmp_path):
    tasks = ["listops", "text", "retrieval", "image", "pathfinder"]
    records = [bench_record(t, "naive", 1.0) for t in tasks]
    records += [bench_record(t, "flash", 2.0 + i) for i, t in enumerate(tasks)]
    records += [bench_record("path-x", "naive", 0, status="oom: CUDA out of memory")]
    records += [bench_record("path-x", "flash", 1.5)]
    tables = tables_of(stored(tmp_path, records))
    speed = tables["Training speed-up over naive (NVIDIA H200, preset default)"]
    geo = math.exp(sum(math.log(2.0 + i) for i in range(5)) / 5)
    assert cell(speed, "flash", "geo. mean (5 LRA tasks)") == f"{geo:.2f}x"
    assert cell(speed, "flash", "listops") == "2.00x (2.00/s)"
    assert cell(speed, "naive", "path-x") == "OOM" and cell(speed, "flash", "path-x") == "(1.50/s)"
    assert speed.header[1:] == [*tasks, "path-x", "geo. mean (5 LRA tasks)"]
    # the paper's speed-ups were measured on its own recipe: not beside this preset's rows
    assert not any(getattr(r, "published", False) for r in speed.rows)
    published = tables["Training speed-up, preset fa-paper (published only)"]
    assert cell(published, "FlashAttention", "speed-up over the Transformer, LRA average") == "2.4x"


def test_repeated_benchmarks_aggregate(tmp_path):
    records = [bench_record("listops", "naive", 1.0), bench_record("listops", "naive", 1.0)]
    records += [bench_record("listops", "flash", x) for x in (2.0, 4.0)]
    speed = tables_of(stored(tmp_path, records))["Training speed-up over naive (NVIDIA H200, preset default)"]
    spread = statistics.stdev([2.0, 4.0])
    assert cell(speed, "flash", "listops") == f"3.00 ± {spread:.2f}x (3.00/s, n=2)"


def test_scaling_table_compares_n_processes_with_one(tmp_path):
    records = []
    for world, tps in ((1, 1000.0), (2, 1900.0)):
        rec = bench_record("listops", "flash", tps / 100, world_size=world, config_hash="abc")
        rec["metrics"]["tokens_per_s"] = tps
        records.append(rec)
    tables = tables_of(stored(tmp_path, records))
    (row,) = tables["Data-parallel scaling (lra bench train --nproc N)"].cells()
    assert [c.text for c in row[:8]] == ["listops", "flash", "1024", "2", "1,000", "1,900", "1.90x", "95%"]
    speed = tables["Training speed-up over naive (NVIDIA H200, preset default)"]
    assert cell(speed, "flash", "listops") == "(10.00/s)"  # the two-process bench stays out of the speed table


def test_tasks_come_from_the_registry(tmp_path):
    records = [run_record(t, "naive", 0.5, preset="tiny") for t in ("path-256", "path-x", "path-64", "text")]
    table = tables_of(stored(tmp_path, records))["Accuracy, preset tiny: CPU-sized smoke runs"]
    assert table.header[1:5] == ["text", "path-64", "path-x", "path-256"]


def test_default_stores_and_where_the_output_goes(tmp_path, monkeypatch):
    user = tmp_path / "share" / "lra" / "results"
    monkeypatch.setenv("LRA_RESULTS", str(user))
    save_record(run_record("listops", "sdpa_math", 0.25, preset="tiny"), user)
    before = sorted(p.name for p in curated_dir().iterdir())
    paths = write_leaderboard(plots=False)
    assert paths == [user.parent / "LEADERBOARD.md", user.parent / "leaderboard.html"]
    text = paths[0].read_text()
    assert "`leaderboard/results` (curated)" in text and "(user)" in text
    assert "| `sdpa_math` | 25.0 (n=1) † |" in text and "measured (user)" in text
    assert "measured (curated)" in text  # the curated records are read too
    assert sorted(p.name for p in curated_dir().iterdir()) == before
    (only,) = write_leaderboard([user], formats="md", plots=False)  # exactly the store named
    assert only == user.parent / "LEADERBOARD.md" and "measured (curated)" not in only.read_text()


def test_bad_stores_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such results store"):
        write_leaderboard([tmp_path / "missing"], tmp_path, plots=False)
    store = tmp_path / "store"
    store.mkdir()
    (store / "broken.json").write_text("{not json")
    with pytest.raises(DataCorruptError, match="broken.json"):
        write_leaderboard([store], tmp_path / "out", plots=False, strict=True)
    assert not (tmp_path / "out").exists()  # nothing written
    with pytest.raises(ConfigError, match="unknown leaderboard format 'pdf'"):
        write_leaderboard([store], tmp_path, formats="pdf")


def test_empty_store_renders_published_rows_and_is_deterministic(tmp_path):
    store = tmp_path / "none"
    store.mkdir()
    md, page = write_leaderboard([store], tmp_path, plots=False)
    assert "LRA paper" in md.read_text() and "FlashAttention paper" in md.read_text()
    first = (md.read_bytes(), page.read_bytes())
    write_leaderboard([store], tmp_path, plots=False)
    assert (md.read_bytes(), page.read_bytes()) == first


def test_plain_string_cells_keep_working():
    assert as_cell("`flash`").code and as_cell("`flash`").text == "flash"
    assert as_cell("1.2e-03 / 4e-05").num and not as_cell("NVIDIA H200").num


def test_records_table_links_every_file(tmp_path):
    store = stored(tmp_path, [run_record("listops", "flash", 0.3, seed=4)])
    (md, _) = write_leaderboard([store], tmp_path, plots=False)
    (name,) = [p.name for p in store.iterdir()]
    assert f"[{name}](results/{name})" in md.read_text()
    assert json.loads((store / name).read_text())["backend"] == "flash"


def test_git_commit_comes_from_the_checkout_unless_overridden(monkeypatch):
    import subprocess

    from lra.core.environment import REPO_ROOT, git_commit

    monkeypatch.delenv("LRA_GIT_COMMIT", raising=False)
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        assert git_commit() is None
    else:
        assert git_commit().split("+")[0] == head.stdout.strip()
    monkeypatch.setenv("LRA_GIT_COMMIT", "abc123")
    assert git_commit() == "abc123"


def test_records_saved_at_the_same_moment_never_replace_each_other(tmp_path):
    """A sweep's runs can finish in the same second with the same name: every record must survive."""
    import threading

    rec = {"kind": "run", "task": "listops", "backend": "naive", "preset": "tiny", "date": "2026-12-01T00:00:00Z"}
    threads = [threading.Thread(target=save_record, args=(dict(rec, n=i), tmp_path)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["n"] for r in load_records(tmp_path)) == list(range(12))
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file is left behind


def test_compiled_and_eager_steps_are_separate_speed_tables(tmp_path):
    """A compiled step is another measurement than the eager one: never averaged together as if seeds."""
    eager = [bench_record("listops", "naive", 10.0), bench_record("listops", "flash", 30.0)]
    fast = {"compile": {"mode": "max", "requested": "max", "fallback": None}}
    compiled = [bench_record("listops", "naive", 20.0, **fast), bench_record("listops", "flash", 80.0, **fast)]
    tables = {t.title: t for t in build_tables(load_records(stored(tmp_path, eager + compiled)))}
    eager_t = tables["Training speed-up over naive (NVIDIA H200, preset default)"]
    compiled_t = tables["Training speed-up over naive (NVIDIA H200, preset default, compile max)"]
    assert "3.00x" in eager_t.markdown() and "4.00x" in compiled_t.markdown()
    assert "n=2" not in eager_t.markdown() + compiled_t.markdown()


def test_speed_table_times_a_task_at_the_length_its_preset_has_now(tmp_path):
    """fa-paper's Text moved from 4,000 to 1,000 bytes: three old records at 4,000 lose to two made with the current
    config, so the table compares backends at the length the recipe trains at."""
    now = load_config("text", "fa-paper").to_dict()
    old = load_config("text", "fa-paper", ["data.max_length=4000"]).to_dict()
    records = [bench_record("text", b, s, seq=4000, preset="fa-paper", config=old) for b, s in
               (("naive", 1.0), ("flash", 3.0), ("sdpa_flash", 3.0))]  # fmt: skip
    records += [
        bench_record("text", b, s, seq=1000, preset="fa-paper", config=now) for b, s in (("naive", 2.0), ("flash", 2.5))
    ]
    speed = tables_of(stored(tmp_path, records))["Training speed-up over naive (NVIDIA H200, preset fa-paper)"]
    assert cell(speed, "flash", "text") == "1.25x (2.50/s)"
    assert "text 1000" in " ".join(speed.notes) and not any(r[0].text == "sdpa_flash" for r in speed.cells())
    without = [r for r in records if r["seq_len"] == 4000]  # no record of the current config: the most common length
    speed = tables_of(stored(tmp_path, without, name="old"))[
        "Training speed-up over naive (NVIDIA H200, preset fa-paper)"
    ]
    assert cell(speed, "flash", "text") == "3.00x (3.00/s)"


def in_dir(run_dir, *args, date="2026-11-30T10:00:00Z", **kwargs):
    """A run record of `run_record(*args, **kwargs)` from the run directory `run_dir`, stored at `date`."""
    return {**run_record(*args, **kwargs), "run_dir": run_dir, "date": date}


def test_a_seed_recorded_twice_counts_once_and_the_newest_counts(tmp_path):
    """Issue 38: two records of one (config, seed) are one cell member; n and the mark follow the distinct seeds."""
    old = in_dir("/runs/a", "listops", "flash", 0.20, seed=0)
    new = in_dir("/runs/b", "listops", "flash", 0.30, seed=0, date="2026-12-01T10:00:00Z")
    twice = in_dir("/runs/c", "listops", "flash", 0.40, seed=1)  # one run stored twice: same figures
    store = stored(tmp_path, [old, new, twice, dict(twice)])
    tables = tables_of(store)
    # seeds 0 (newest: 30.0) and 1 (40.0): mean 35.0, std 7.1, two seeds, so marked as fewer than three
    assert (
        cell(tables["Accuracy, preset default: the LRA configs"], "flash", "listops") == f"35.0 ± 7.1 (n=2) {FEW_MARK}"
    )
    notes = " ".join(tables["Records"].notes)
    assert "Not counted" in notes and notes.count(".json") == 2  # the older seed-0 record and one copy of seed 1


def test_two_records_of_one_run_that_disagree_are_an_error_naming_both(tmp_path):
    a = in_dir("/runs/a", "listops", "flash", 0.20, seed=0)
    b = in_dir("/runs/a", "listops", "flash", 0.25, seed=0, date="2026-12-01T10:00:00Z")
    store = stored(tmp_path, [a, b])
    files = sorted(p.name for p in store.iterdir())
    with pytest.raises(DataCorruptError, match="two records of one run") as err:
        tables_of(store)
    assert all(f in str(err.value) for f in files)


def test_the_curated_records_have_one_per_config_and_seed():
    from lra.results.aggregate import one_per_seed

    runs = [r for r in load_records(curated_dir()) if r.get("kind") == "run"]
    assert len(runs) > 10 and one_per_seed(runs)[1] == []


def test_a_stub_run_record_is_skipped_with_a_warning_naming_its_file(tmp_path, capsys):
    store = stored(tmp_path, [run_record("listops", "flash", 0.30)])
    (store / "stub.json").write_text('{"kind": "run"}\n')
    (md,) = write_leaderboard(store, tmp_path / "out", formats="md", plots=False)
    err = capsys.readouterr().err
    assert "stub.json: a run record without task, backend, config, metrics; skipped" in " ".join(err.split())
    assert "stub.json" not in md.read_text() and "| `flash` | 30.0 (n=1)" in md.read_text()
