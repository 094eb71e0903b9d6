"""Issue 38: one process owns a run directory (a lock that dies with its holder, naming it), `--resume` checks what
it resumes, a sweep leaves a run another process holds alone, and a record the store cannot take is kept and stored
later with `lra results store`."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from lra.cli.main import main
from lra.core import locks
from lra.core.errors import RunSetupError
from lra.results.store import load_records
from lra.sweep.grid import build_grid
from lra.sweep.local_pool import LaunchOptions, LocalPool
from lra.train.config import load_config
from lra.train.run import train
from lra.train.rundir import LOCK, SUMMARY
from tests.toy_task import toy_config_path

SETS = ["train.steps=40", "train.eval_every=20", "model.dropout=0.0"]


def _run(tmp_path, backend="naive", sets=(), **kw):
    cfg = load_config(toy_config_path(tmp_path), None, [*SETS, *sets])
    return train(cfg, backend, device="cpu", out_dir=tmp_path / "run", **kw)


def test_a_second_resume_of_a_held_run_says_who_holds_it_and_the_lock_dies_with_its_holder(tmp_path):
    _run(tmp_path, stop_after=25)  # a checkpoint at step 20, the run "killed"
    lock = tmp_path / "run" / LOCK
    code = (
        "import sys, time; from lra.core.locks import try_lock; try_lock(sys.argv[1], 'lra run'); print(1, flush=True)"
    )
    code += "; time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "1"  # the other process holds the run directory now
        with pytest.raises(RunSetupError) as err:
            _run(tmp_path, resume=True)
        message = str(err.value)
        assert message.startswith(f"{tmp_path / 'run'} is in use by lra run (pid {holder.pid} on ")
        assert "one process trains a run directory at a time" in message and "\n" not in message
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert not locks.is_locked(lock)  # killed with -9: the kernel dropped its lock
    summary = _run(tmp_path, resume=True)
    assert summary["steps"] == 40 and not locks.is_locked(lock)  # released when train() returns


def test_resume_with_another_backend_or_settings_is_refused_naming_the_differences(tmp_path):
    _run(tmp_path, stop_after=25)
    with pytest.raises(RunSetupError, match=r"started with other settings: --attn naive \(now sdpa_math\);"):
        _run(tmp_path, backend="sdpa_math", resume=True)
    with pytest.raises(RunSetupError) as err:
        _run(tmp_path, sets=["train.lr=0.02", "model.mlp_dim=32"], resume=True)
    assert "model.mlp_dim=64 (now 32), train.lr=0.01 (now 0.02); resume with the settings it started" in str(err.value)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["backend"] == "naive" and config["world_size"] == 1
    summary = _run(tmp_path, sets=["train.compile=none"], resume=True)  # a speed-only setting may change
    assert summary["backend"] == "naive" and summary["steps"] == 40


@pytest.mark.parametrize("code, says", [(errno.EROFS, "the disk is read-only"), (errno.ENOSPC, "the disk is full")])
def test_a_record_the_store_cannot_take_is_kept_and_stored_later(tmp_path, monkeypatch, capsys, code, says):
    store, run_dir = tmp_path / "store", tmp_path / "run"
    argv = ["run", toy_config_path(tmp_path), "--attn", "naive", "--device", "cpu", "--out", str(run_dir)]
    argv += ["--results", str(store)] + [x for s in SETS for x in ("--set", s)]
    real = os.fsync

    def fsync(fd: int) -> None:  # the store's disk fails; the run directory's does not
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(store)):
            raise OSError(code, os.strerror(code))
        real(fd)

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", fsync)
        assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    later = f"lra results store {run_dir} --results {store}"
    assert f"error: cannot write a record into the results store {store}: {says}; the record is kept in" in err
    assert f"{run_dir}/summary.json: run `{later}` once the store is writable" in err
    assert not list(store.iterdir())  # nothing half-written
    assert main(["results", "store", str(run_dir), "--results", str(store)]) == 0
    (rec,) = load_records(store)
    summary = json.loads((run_dir / SUMMARY).read_text())
    assert {k: v for k, v in rec.items() if not k.startswith("_")} == summary
    assert main(["results", "store", str(run_dir), "--results", str(store)]) == 0  # stored once, not twice
    assert "already in the store as" in capsys.readouterr().err and len(load_records(store)) == 1
    assert main(["results", "store", str(tmp_path), "--results", str(store)]) == 2
    assert "holds no finished run (summary.json is missing)" in capsys.readouterr().err


def _one_run(tmp_path):
    (run,) = build_grid(tasks=[toy_config_path(tmp_path)], attns=["naive"], seeds=[0], presets=["default"],
                        overrides=[], root=tmp_path / "sweeps")  # fmt: skip
    return run


def test_a_sweep_skips_a_run_an_lra_run_holds_and_says_who(tmp_path):
    run = _one_run(tmp_path)
    fd = locks.try_lock(run.run_dir / LOCK, "lra run")  # e.g. `lra run ... --resume --out` of the sweep's directory
    try:
        pool = LocalPool([run], slots=[None], options=LaunchOptions(results=tmp_path / "results"))
        ((state, where),) = pool.run().values()
    finally:
        os.close(fd)
    assert state == "skipped" and where.startswith(f"running in lra run (pid {os.getpid()} on ")


def test_a_sweep_reads_the_store_under_the_lock_so_a_finished_run_is_recorded_once(tmp_path, monkeypatch):
    """Two sweeps of one grid: the other one recorded the run after this one started; storing it again would make
    one seed two records (issue 38's n=3 for a 2-seed grid)."""
    from lra.results.store import save_record
    from lra.sweep import local_pool

    run, store = _one_run(tmp_path), tmp_path / "results"
    run.run_dir.mkdir(parents=True)
    summary = {"kind": "run", "run_dir": str(run.run_dir), "config_hash": run.config_hash, "date": "2026-12-03"}
    (run.run_dir / SUMMARY).write_text(json.dumps(summary))
    real = local_pool.try_lock

    def late(path):  # the other sweep stores the record just before this one takes the lock
        save_record(summary, store)
        return real(path)

    monkeypatch.setattr(local_pool, "try_lock", late)
    pool = LocalPool([run], slots=[None], options=LaunchOptions(results=store))
    assert pool.run() == {run.name: ("done", "")}
    assert len(load_records(store)) == 1
