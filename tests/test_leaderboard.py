"""Leaderboard rendering from stored records: tables, published rows, speed-ups, determinism."""

from __future__ import annotations

import math

from lra.results.leaderboard import write_leaderboard
from lra.results.store import save_record


def _run(task, backend, acc, preset="full", date="2026-11-30T10:00:00Z"):
    return {
        "kind": "run",
        "task": task,
        "backend": backend,
        "preset": preset,
        "date": date,
        "device": "cpu",
        "metrics": {"test_acc": acc, "majority_acc": 0.2, "train_time_s": 10.0, "time_to_acc_s": {"0.5": 4.0}},
        "config": {"train": {"acc_thresholds": [0.5, 0.6]}},
    }


def _bench(task, backend, sps, status="ok"):
    return {
        "kind": "bench_train",
        "task": task,
        "backend": backend,
        "seq_len": 1024,
        "device": "NVIDIA H200",
        "date": "2026-11-30T10:00:00Z",
        "status": status,
        "metrics": {"steps_per_s": sps, "peak_mem_mb": 100.0} if status == "ok" else {},
    }


def test_leaderboard_tables_and_determinism(tmp_path):
    store = tmp_path / "results"
    save_record(_run("listops", "naive", 0.30, date="2026-11-29T10:00:00Z"), store)
    save_record(_run("listops", "naive", 0.365), store)  # newer record wins
    save_record(_run("listops", "flash", 0.372), store)
    save_record(_run("listops", "naive", 0.25, preset="tiny"), store)
    tasks = ["listops", "text", "retrieval", "image", "pathfinder"]
    for i, t in enumerate(tasks):
        save_record(_bench(t, "naive", 1.0), store)
        save_record(_bench(t, "flash", 2.0 + i), store)
    save_record(_bench("path-x", "naive", 0, status="oom"), store)
    save_record(_bench("path-x", "flash", 1.5), store)
    (path,) = write_leaderboard(store, tmp_path, plots=False)
    text = path.read_text()
    assert "| `naive` | 36.5 |" in text and "| `flash` | 37.2 |" in text
    assert "FlashAttention *(published)* | 37.6 | 63.9 | 81.4 | 43.5 | 72.7 | 61.4 | - | 59.8" in text
    assert "Smoke runs" in text and "25.0" in text
    geo = math.exp(sum(math.log(2.0 + i) for i in range(5)) / 5)
    assert f"{geo:.2f}x" in text
    assert "OOM" in text
    write_leaderboard(store, tmp_path, plots=False)
    assert path.read_text() == text


def test_empty_store_still_renders_published_rows(tmp_path):
    (path,) = write_leaderboard(tmp_path / "none", tmp_path, plots=False)
    assert "LRA paper" in path.read_text()


def test_runs_with_changed_settings_leave_the_main_accuracy_table(tmp_path):
    from lra.train.config import load_config

    store = tmp_path / "results"
    exact = _run("listops", "flash", 0.371)
    exact["config"] = load_config("listops", "full")
    changed = _run("listops", "naive", 0.2)
    changed["config"] = load_config("listops", "full", ["train.steps=200"])
    save_record(exact, store)
    save_record(changed, store)
    (path,) = write_leaderboard(store, tmp_path, plots=False)
    main, _, rest = path.read_text().partition("## Other runs")
    assert "| `flash` | 37.1 |" in main and "`naive`" not in main
    assert "| `naive` | 20.0 |" in rest


def test_scaling_table_compares_n_processes_with_one(tmp_path):
    store = tmp_path / "results"
    for world, tps in ((1, 1000.0), (2, 1900.0)):
        rec = _bench("listops", "flash", tps / 100)
        rec.update(world_size=world, config_hash="abc")
        rec["metrics"]["tokens_per_s"] = tps
        save_record(rec, store)
    (path,) = write_leaderboard(store, tmp_path, plots=False)
    text = path.read_text()
    assert "| listops | `flash` | 1024 | 2 | 1,000 | 1,900 | 1.90x | 95% |" in text
    speed = text.split("## Training speed-up")[1].split("## ")[0]
    assert "19.00/s" not in speed  # the two-process bench stays out of the single-GPU speed table


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
