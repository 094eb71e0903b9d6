"""`lra sweep`: a grid of ordinary `lra run` processes, each in its own directory, resumable as a whole.

The grid is two toy tasks x two backends x two seeds (tests/sweep_cli.py; runs start as `python -m tests.sweep_cli
run ...` so that the run processes know the toy tasks). One uninterrupted sweep is the reference; a sweep killed
mid-way and rerun, and the same grid on submitit's local executor, must end with exactly its results.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from lra.cli.main import main
from lra.cli.sweep import _live
from lra.core.errors import ConfigError, RunSetupError
from lra.results.store import load_records
from lra.sweep.board import Board, LineLog, Progress, Row, read_progress
from lra.sweep.grid import (
    build_grid,
    clear_unstarted,
    leave_out_recorded,
    parse_seeds,
    recorded_cells,
    run_state,
)
from lra.sweep.local_pool import LaunchOptions, LocalPool, slots_for, try_lock
from lra.train.checkpoint import load_checkpoint
from tests.processes import wait_until_gone
from tests.sweep_cli import write_configs

ROOT = Path(__file__).resolve().parent.parent
ATTN = "naive,sdpa_math"
NAMES = sorted(
    f"{task}/{attn}/default/s{seed}" for task in ("toy", "toy_last") for attn in ATTN.split(",") for seed in (0, 1)
)


@pytest.fixture(scope="module", autouse=True)
def child_env():
    """Run processes (and submitit's job processes) import tests.sweep_cli: put the checkout on their path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        yield


def sweep_argv(configs: list[str], root: Path, results: Path, *extra: str) -> list[str]:
    return [
        "sweep", "--tasks", ",".join(configs), "--attn", ATTN, "--seeds", "0-1", "--root", str(root),
        "--results", str(results), "--per-gpu", "2", "--runner", "tests.sweep_cli", *extra,
    ]  # fmt: skip


def outcome(root: Path) -> dict[str, dict]:
    """What each run of a sweep ended with: test/val results and the validation history (timings left out)."""
    out = {}
    for summary in sorted(root.glob("*/*/*/s*/summary.json")):
        rec = json.loads(summary.read_text())
        m = rec["metrics"]
        history = [
            {k: v for k, v in json.loads(line).items() if "time" not in k}
            for line in (summary.parent / "metrics.jsonl").read_text().splitlines()
        ]
        name = "/".join(summary.parent.relative_to(root).parts)
        out[name] = {"test": (m["test_acc"], m["test_loss"], m["val_acc"], m["best_step"]), "history": history}
    return out


def launches(log: Path) -> list[str]:
    """The command lines the sweep started a run with (one header line per launch)."""
    return [line for line in log.read_text().splitlines() if line.startswith("# ")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted sweep over the grid."""
    base = tmp_path_factory.mktemp("reference")
    configs = write_configs(base)
    root, results = base / "sweeps", base / "results"
    assert main(sweep_argv(configs, root, results)) == 0
    return {"configs": configs, "root": root, "results": results, "outcome": outcome(root)}


@pytest.mark.slow
def test_sweep_runs_every_cell_once_and_stores_its_record(reference):
    root = reference["root"]
    assert sorted(reference["outcome"]) == NAMES
    records = [r for r in load_records(reference["results"]) if r["kind"] == "run"]
    assert sorted(str(Path(r["run_dir"]).relative_to(root)) for r in records) == NAMES
    for rec in records:
        task, attn, _, seed = Path(rec["run_dir"]).relative_to(root).parts
        assert (rec["task"], rec["backend"], rec["config"]["train"]["seed"]) == (task, attn, int(seed[1:]))
        (start,) = launches(Path(rec["run_dir"] + ".log"))  # one log per run, one launch
        assert f"--out {rec['run_dir']}" in start and "--resume" not in start
    out = reference["outcome"]  # the seeds of one cell differ (data order, initialisation)
    assert out["toy/naive/default/s0"]["history"] != out["toy/naive/default/s1"]["history"]


@pytest.mark.slow
def test_killed_sweep_rerun_finishes_exactly_the_missing_runs(reference, tmp_path):
    configs = write_configs(tmp_path)
    root, results = tmp_path / "sweeps", tmp_path / "results"
    argv = sweep_argv(configs, root, results)
    proc = subprocess.Popen([sys.executable, "-m", "tests.sweep_cli", *argv], start_new_session=True)
    try:
        _wait_for_a_finished_and_a_checkpointed_run(root, proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the runs it started, at once
        proc.wait()
        wait_until_gone(proc.pid)  # its runs too: one still exiting holds its run's lock, and would be "skipped"
    finished = {n for n in NAMES if (root / n / "summary.json").is_file()}
    partial = {n for n in NAMES if (root / n / "last.pt").is_file()} - finished
    assert finished and partial and len(finished) < len(NAMES)

    assert main([*argv, "--resume"]) == 0  # the same command (--resume is accepted and means the same)
    assert outcome(root) == reference["outcome"]
    records = [r for r in load_records(results) if r["kind"] == "run"]
    assert sorted(str(Path(r["run_dir"]).relative_to(root)) for r in records) == NAMES  # one record each
    for name in NAMES:
        starts = launches(root / f"{name}.log")
        if name in finished:
            assert len(starts) == 1  # never started again
        elif name in partial:
            assert len(starts) == 2 and "--resume" in starts[1]  # continued from its checkpoint
        else:
            assert "--resume" not in starts[-1]  # killed before its first checkpoint, or not started: (re)started


def _wait_for_a_finished_and_a_checkpointed_run(root: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        done = list(root.glob("*/*/*/s*/summary.json"))
        running = [p for p in root.glob("*/*/*/s*/last.pt") if not (p.parent / "summary.json").exists()]
        if done and running:
            return
        assert proc.poll() is None, "the sweep ended before it could be killed mid-way"
        time.sleep(0.02)
    raise AssertionError("no run finished within 240 s")


@pytest.mark.slow
def test_submitit_local_executor_runs_the_same_grid(reference, tmp_path):
    pytest.importorskip("submitit", reason="submitit is in the test extra: pip install -e '.[test]'")
    configs = write_configs(tmp_path)
    root, results = tmp_path / "sweeps", tmp_path / "results"
    argv = sweep_argv(configs, root, results, "--executor", "submitit-local", "--gpus-per-node", "0", "--time", "10")
    assert main(argv) == 0
    assert outcome(root) == reference["outcome"]
    assert len([r for r in load_records(results) if r["kind"] == "run"]) == len(NAMES)
    assert list((root / "submitit").glob("*_result.pkl"))  # the runs went through submitit's jobs


@pytest.mark.slow
def test_finished_sweep_starts_nothing_and_restores_a_missing_record(reference, capsys):
    root, results = reference["root"], reference["results"]
    lost = next(p for p in results.glob("run__*.json"))
    rec = json.loads(lost.read_text())
    lost.unlink()  # as if the sweep was killed between the run's summary and its record
    assert main(sweep_argv(reference["configs"], root, results)) == 0
    back = [r for r in load_records(results) if r.get("run_dir") == rec["run_dir"]]
    assert len(back) == 1 and back[0]["metrics"] == rec["metrics"]
    # `lra run --seeds` is the one-task sweep: the same directories (RUNS_ROOT/sweeps/...), so nothing is left to do
    argv = ["run", reference["configs"][0], "--attn", "naive", "--seeds", "0,1", "--runs-root", str(root.parent)]
    assert main([*argv, "--results", str(results)]) == 0
    for name in NAMES:
        assert len(launches(root / f"{name}.log")) == 1
    assert "2 done" in capsys.readouterr().out


@pytest.mark.slow
def test_skip_recorded_leaves_out_the_cells_a_store_holds_wherever_they_ran(reference, tmp_path, capsys):
    """The reference's records name another root: a cell matches on task, backend and config hash (seed included),
    so only seed 2 is left to run, and nothing of a grid whose settings differ is left out."""
    configs, store = reference["configs"], reference["results"]
    grid = build_grid(tasks=configs, attns=ATTN.split(","), seeds=[0, 1, 2], presets=["default"], overrides=[],
                      root=tmp_path / "elsewhere")  # fmt: skip
    todo, held = leave_out_recorded(grid, recorded_cells(store))
    assert sorted(run.name for run in held) == NAMES
    assert sorted(run.name for run in todo) == sorted(n.replace("/s0", "/s2") for n in NAMES if n.endswith("/s0"))
    other = build_grid(tasks=configs, attns=ATTN.split(","), seeds=[0, 1], presets=["default"],
                       overrides=["train.steps=7"], root=tmp_path / "elsewhere")  # fmt: skip
    assert leave_out_recorded(other, recorded_cells(store)) == (other, [])

    argv = sweep_argv(configs, tmp_path / "elsewhere", tmp_path / "results", "--skip-recorded", str(store))
    assert main([*argv, "--seeds", "0-2", "--dry-run"]) == 0
    text = "".join(capsys.readouterr())  # the board on stdout, what was left out on stderr
    assert "left out 8 of 12 runs" in text and "4 pending (start)" in text
    assert main(argv) == 0  # every cell recorded: nothing starts
    assert "holds a record of every run" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "results").exists()


def test_skip_recorded_names_a_missing_folder(tmp_path):
    with pytest.raises(ConfigError, match="no such folder of records"):
        recorded_cells(tmp_path / "nowhere")


def test_seeds_accept_ranges_and_lists():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,2,5") == [0, 2, 5]
    assert parse_seeds("0-2, 7") == [0, 1, 2, 7]
    for bad in ("3-1", "a", "0-b", "1,1", "0-2,2", "", "-1"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--attn", "nope"], "unknown attention backend 'nope'"),
        (["--preset", "nope"], "sweep cell toy / preset nope: unknown preset 'nope'"),
        (["--seeds", "4-2"], "--seeds: '4-2' is not an increasing range"),
        (["--set", "train.nope=1"], "unknown setting"),
        (["--per-gpu", "0"], "--per-gpu must be at least 1"),
        (["--executor", "slurm", "--time", "soon"], "--time 'soon'"),
    ],
)
def test_bad_grids_are_one_line_errors(tmp_path, capsys, extra, message):
    configs = write_configs(tmp_path)
    argv = sweep_argv(configs, tmp_path / "sweeps", tmp_path / "results")
    assert main([*argv, *extra]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "sweeps").exists()  # nothing started


def test_two_configs_of_one_name_are_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        write_configs(folder)
    with pytest.raises(ConfigError, match="two tasks share a name"):
        build_grid(tasks=[str(a / "toy.yaml"), str(b / "toy.yaml")], attns=["naive"], seeds=[0], presets=["default"],
                   overrides=[], root=tmp_path)  # fmt: skip


def test_run_directories_are_deterministic_and_keep_overrides_apart(tmp_path):
    (toy, _) = write_configs(tmp_path)
    grid = lambda overrides: build_grid(  # noqa: E731
        tasks=[toy], attns=["naive"], seeds=[3], presets=["short"], overrides=overrides, root=tmp_path
    )
    (plain,), (again,), (changed,) = grid([]), grid([]), grid(["train.lr=0.1"])
    assert plain.run_dir == tmp_path.resolve() / "toy" / "naive" / "short" / "s3" and plain == again
    assert changed.run_dir.parent.name.startswith("short+") and changed.config_hash != plain.config_hash
    assert plain.steps == 20 and "--preset" in plain.argv(resume=False) and "--resume" in plain.argv(resume=True)


def test_a_directory_of_another_config_is_refused(tmp_path):
    (toy, _) = write_configs(tmp_path)
    (run,) = build_grid(tasks=[toy], attns=["naive"], seeds=[0], presets=["default"], overrides=[], root=tmp_path)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.json").write_text(json.dumps({"config_hash": "0123456789ab"}))
    with pytest.raises(RunSetupError, match="holds a run of another config"):
        run_state(run, set())


def test_a_run_locked_by_another_process_is_left_alone(tmp_path):
    (toy, _) = write_configs(tmp_path)
    (run,) = build_grid(tasks=[toy], attns=["naive"], seeds=[0], presets=["default"], overrides=[], root=tmp_path)
    held = try_lock(run.lock)
    assert held is not None and try_lock(run.lock) is None
    seen = []
    options = LaunchOptions(results=tmp_path / "results")
    pool = LocalPool([run], slots=[None], options=options, on_status=lambda r, state, where: seen.append(state))
    ((state, where),) = pool.run().values()
    assert state == "skipped" and where.startswith(f"running in lra sweep (pid {os.getpid()} on ")
    assert seen == ["skipped"] and not run.run_dir.exists()
    os.close(held)


def test_slots_spread_runs_over_the_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert slots_for(2, None) == ["3", "5", "3", "5"]
    assert slots_for(2, "cpu") == [None, None]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert slots_for(3, None) == [None, None, None]
    with pytest.raises(ConfigError, match="no GPU is visible"):
        slots_for(1, "cuda")


def test_progress_and_eta_come_from_the_metrics_log(tmp_path):
    rows = [{"step": 100, "val_acc": 0.30, "time": 10.0}, {"step": 200, "val_acc": 0.25, "time": 30.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = read_progress(tmp_path)
    assert (p.step, p.val_acc, p.best_acc, p.rate) == (200, 0.25, 0.30, 5.0)  # 100 steps in 20 s
    assert read_progress(tmp_path / "none").step == 0
    (toy, _) = write_configs(tmp_path)
    (run,) = build_grid(
        tasks=[toy], attns=["naive"], seeds=[0], presets=["default"], overrides=["train.steps=1000"], root=tmp_path
    )
    board = Board([run], "t")
    board.rows[run.name] = Row("running", "cpu", p)
    console = Console(width=120, record=True)
    console.print(board.render())
    text = console.export_text()
    assert "200/1,000" in text and "25.0" in text and "30.0" in text
    assert "00:02:40" in text  # 800 steps left at 5 steps/s


def test_the_caption_sums_the_steps_the_unfinished_runs_have_left(tmp_path):
    (toy, _) = write_configs(tmp_path)
    runs = build_grid(
        tasks=[toy],
        attns=["naive"],
        seeds=[0, 1, 2],
        presets=["default"],
        overrides=["train.steps=1000"],
        root=tmp_path,
    )
    board = Board(runs, "t")
    board.rows[runs[0].name] = Row("done", "", Progress(step=1000))
    board.rows[runs[1].name] = Row("stopped", "", Progress(step=350))  # resumes at 350: 650 to go
    # runs[2] has not started: all 1,000 to go
    assert board.steps_left() == 1650
    console = Console(width=160, record=True)
    console.print(board.render())
    assert "1,650 of 3,000 steps left" in console.export_text()


def test_a_run_killed_before_its_first_checkpoint_starts_again(tmp_path):
    (toy, _) = write_configs(tmp_path)
    (run,) = build_grid(tasks=[toy], attns=["naive"], seeds=[0], presets=["default"], overrides=[], root=tmp_path)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.json").write_text(json.dumps({"config_hash": run.config_hash}))
    assert run_state(run, set()) == "start"
    clear_unstarted(run)  # `lra run --out` refuses a folder that holds a config.json: the sweep empties it first
    assert not run.run_dir.exists()
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.json").write_text('{"config_ha')  # cut short by the kill
    assert run_state(run, set()) == "start"


def test_dry_run_shows_the_grid_and_starts_nothing(tmp_path, capsys):
    configs = write_configs(tmp_path)
    assert main([*sweep_argv(configs, tmp_path / "sweeps", tmp_path / "results"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in NAMES) and "8 pending (start)" in text
    assert not (tmp_path / "sweeps").exists()


def test_a_log_gets_a_line_per_state_change_and_progress_at_most_once_a_minute(tmp_path):
    (toy, _) = write_configs(tmp_path)
    runs = build_grid(tasks=[toy], attns=["naive"], seeds=[0, 1], presets=["default"], overrides=[], root=tmp_path)
    board, now = Board(runs, "t"), [0.0]
    for run in runs:
        board.set(run, "pending (start)", "")
    log = LineLog(board, every_s=60.0, clock=lambda: now[0])
    assert log.lines() == []  # pending runs are not news
    first, second = runs
    board.set(first, "running", "gpu 0")
    (line,) = log.lines()
    assert f"{first.name}: running (gpu 0), step 0/60" in line
    metrics = first.run_dir / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text(json.dumps({"step": 10, "val_acc": 0.5, "time": 2.0}) + "\n")
    board.refresh()
    now[0] = 59.0
    assert log.lines() == []  # the step moved, but within the minute
    metrics.write_text(metrics.read_text() + json.dumps({"step": 20, "val_acc": 0.4, "time": 4.0}) + "\n")
    board.refresh()
    now[0] = 60.0
    (line,) = log.lines()
    assert "step 20/60, val 40.0% (best 50.0%), ETA 00:00:08" in line  # 40 steps left at 5 steps/s
    now[0] = 200.0
    assert log.lines() == []  # no new step: no line
    board.set(first, "done", "")
    board.set(second, "failed", "exit 1")
    lines = log.lines()
    assert [f"{first.name}: done" in lines[0], f"{second.name}: failed (exit 1)" in lines[1]] == [True, True]


def test_a_sweep_logging_to_a_file_prints_lines_not_a_live_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LRA_QUIET", "0")  # the suite runs quiet
    (toy, _) = write_configs(tmp_path)
    (run,) = build_grid(tasks=[toy], attns=["naive"], seeds=[0], presets=["default"], overrides=[], root=tmp_path)
    board = Board([run], "t")
    with _live(board) as tick:  # pytest's captured stderr is not a terminal
        board.set(run, "running", "cpu")
        tick()
        board.set(run, "done", "")
        tick()
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 1)[1] for line in err] == [
        f"{run.name}: running (cpu), step 0/60",
        f"{run.name}: done, step 0/60",
    ]


def test_a_run_of_a_sweep_asked_to_stop_by_a_signal_is_stopped_not_done_and_the_same_command_continues(
    tmp_path, capsys
):
    """A run that a signal asks to stop (tests/sweep_cli_asked.py: SIGTERM after its first evaluation) leaves with
    exit 0 and its state saved: the sweep, which has no time limit, calls it stopped, stores no record, and the same
    sweep resumes it to the end."""
    configs, root, results = write_configs(tmp_path), tmp_path / "sweep", tmp_path / "results"
    argv = ["sweep", "--tasks", configs[0], "--attn", "naive", "--seeds", "0", "--root", str(root), "--results",
            str(results), "--device", "cpu"]  # fmt: skip
    assert main([*argv, "--runner", "tests.sweep_cli_asked"]) == 0
    assert "1 stopped with their state saved" in " ".join(capsys.readouterr()).replace("\n", " ")
    run_dir = next(root.glob("*/*/*/s0"))
    assert not (run_dir / "summary.json").exists() and not load_records(results)
    assert load_checkpoint(run_dir / "last.pt")["step"] == 10  # the first evaluation's step
    assert main([*argv, "--runner", "tests.sweep_cli"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 60 and len(load_records(results)) == 1


def test_a_sweep_with_a_time_limit_stops_its_runs_and_the_same_command_continues(tmp_path, monkeypatch, capsys):
    """One run (toy, naive, seed 0): with a time limit too short to start anything it starts nothing; with the
    start threshold lowered it gets `--time-limit 1`, stops after its first window with its state saved (exit 0,
    state `stopped`), and the same sweep without a limit resumes it to the end."""
    from lra.sweep import local_pool

    configs, root, results = write_configs(tmp_path), tmp_path / "sweep", tmp_path / "results"
    argv = ["sweep", "--tasks", configs[0], "--attn", "naive", "--seeds", "0", "--root", str(root), "--results",
            str(results), "--runner", "tests.sweep_cli", "--device", "cpu"]  # fmt: skip
    assert main([*argv, "--time-limit", "5s"]) == 0
    assert "1 stopped with their state saved" in " ".join(capsys.readouterr()).replace("\n", " ")
    assert not list(root.glob("*/*/*/s0/config.json"))  # not started: 5 s is under a run's start threshold
    monkeypatch.setattr(local_pool, "START_S", 0.0)
    assert main([*argv, "--time-limit", "3s"]) == 0
    run_dir = next(root.glob("*/*/*/s0"))
    assert (run_dir / "last.pt").is_file() and not (run_dir / "summary.json").exists()
    assert "--time-limit" in run_dir.with_name("s0.log").read_text()
    assert main(argv) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 60
    assert len(load_records(results)) == 1
