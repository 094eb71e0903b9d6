"""A full disk or an unwritable folder at any write of a run: one clear line, the previous checkpoint intact,
`--resume` continues."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from lra.core.errors import RunSetupError
from lra.train.checkpoint import LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.run import train
from tests.toy_task import toy_config_path

SETS = ["train.steps=40", "train.eval_every=20", "model.dropout=0.0"]

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds written files through /proc")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fail_fsync(monkeypatch, name: str, *, nth: int = 1, code: int = errno.ENOSPC) -> None:
    """Make the `nth` fsync of file `name` (or of its atomic temporary `.name.*`) fail with OSError(code), as a
    full disk does when the written blocks are flushed; every other fsync goes through."""
    real, seen = os.fsync, []

    def fsync(fd: int) -> None:
        base = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if base == name or base.startswith(f".{name}."):
            seen.append(base)
            if len(seen) == nth:
                raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def _run(tmp_path, **kw):
    cfg = load_config(toy_config_path(tmp_path), None, SETS)
    return train(cfg, "naive", device="cpu", out_dir=tmp_path / "run", **kw)


@pytest.mark.parametrize("name", [LAST, "metrics.jsonl", "summary.json"])
def test_disk_full_while_training_keeps_the_checkpoint_and_resume_continues(tmp_path, monkeypatch, name):
    _run(tmp_path, stop_after=25)  # the step-20 checkpoint is on disk
    last = tmp_path / "run" / LAST
    before = _sha(last)
    with monkeypatch.context() as m:
        fail_fsync(m, name)
        with pytest.raises(RunSetupError) as err:
            _run(tmp_path, resume=True)
    target = tmp_path / "run" / name
    assert str(err.value) == (
        f"cannot write {target}: the disk is full; the previous checkpoint {last} is intact: free some space, then "
        f"run the same command with --resume"
    )
    if name == "summary.json":  # the final checkpoint was written before the summary
        assert load_checkpoint(last)["step"] == 40 and not target.exists()
    else:
        assert _sha(last) == before and load_checkpoint(last)["step"] == 20
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]  # no temporaries left
    summary = _run(tmp_path, resume=True)
    assert summary["steps"] == 40 and (tmp_path / "run" / "summary.json").is_file()


@pytest.mark.parametrize(
    "code, says",
    [(errno.ENOSPC, "the disk is full"), (errno.EACCES, "is not writable (permission denied)")],
)
def test_a_run_that_cannot_write_its_config_says_so_and_leaves_nothing(tmp_path, monkeypatch, code, says):
    fail_fsync(monkeypatch, "config.json", code=code)
    with pytest.raises(RunSetupError, match=r"cannot write .*config.json: .*no checkpoint was written yet") as err:
        _run(tmp_path)
    assert says in str(err.value)
    assert list((tmp_path / "run").iterdir()) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root POSIX user (root writes anyway)")
def test_unwritable_runs_root_is_a_clear_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        cfg = load_config(toy_config_path(tmp_path), None, SETS)
        with pytest.raises(RunSetupError, match=r"is not writable \(permission denied\)"):
            train(cfg, "naive", device="cpu", runs_root=locked)
    finally:
        locked.chmod(0o700)
