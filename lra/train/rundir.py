"""Run directories: where a run's files go, how a new one is claimed, how an unfinished one is found again.

A run directory holds `config.json` (the resolved config and its hash), `metrics.jsonl` (one line per evaluation),
`last.pt` / `best.pt` (checkpoints) and, once the run is finished, `summary.json`. The default place is
RUNS_ROOT/TASK/BACKEND-PRESET-sSEED-YYYYmmdd-HHMMSS under $LRA_RUNS (default ~/.local/share/lra/runs: nothing a user
runs writes into the checkout). A directory belongs to one run: a new run creates its default directory exclusively
(a second run started in the same second gets a `-2` suffix) and claims `config.json` exclusively in an --out folder.

A run directory is owned by one process at a time: the process training it holds an flock on its `run.lock` (which
names the holder: pid, host, start time), taken before the first checkpoint and held until `train()` returns. The
kernel drops the lock when the holder dies, however it dies, so a killed run never leaves a stale lock; a second
`--resume` of a held directory is refused naming the holder. `--resume` also checks that the command defines the
same run as `config.json`: the backend, the world size and every setting of the config hash.

Every write goes through `RunDir.writing`, which turns a full disk or an unwritable folder into a one-line
RunSetupError naming the file and saying whether the previous checkpoint is intact (it always is: writes are atomic).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lra.core import locks
from lra.core.atomic import atomic_open, write_json
from lra.core.errors import RunSetupError
from lra.core.hashing import flat_settings
from lra.train import distributed as dist
from lra.train.checkpoint import BEST, LAST, save_checkpoint
from lra.train.config import RunConfig, config_hash, outcome_config

T = TypeVar("T")
CONFIG, METRICS, SUMMARY, LOCK = "config.json", "metrics.jsonl", "summary.json", "run.lock"
DISK_FULL = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up"}
NOT_WRITABLE = {errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EROFS: "read-only disk"}
_HELD: dict[Path, int] = {}  # run directory -> the descriptor of its lock, for the run directories this process owns


def default_runs_root() -> Path:
    """$LRA_RUNS, else ~/.local/share/lra/runs (under $XDG_DATA_HOME when set)."""
    if os.environ.get("LRA_RUNS"):
        return Path(os.environ["LRA_RUNS"]).expanduser()
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "lra" / "runs"


@dataclass(frozen=True)
class RunDir:
    """One run's folder and the files in it."""

    path: Path

    @property
    def last(self) -> Path:
        return self.path / LAST

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def finished(self) -> bool:
        return (self.path / SUMMARY).is_file()

    @contextlib.contextmanager
    def writing(self, target: Path) -> Iterator[None]:
        """Translate a full disk or an unwritable folder while writing `target` into a clear RunSetupError."""
        try:
            yield
        except OSError as e:
            if e.errno not in DISK_FULL and e.errno not in NOT_WRITABLE:
                raise
            raise RunSetupError(self._write_failure(target, e)) from e

    def _write_failure(self, target: Path, err: OSError) -> str:
        full = err.errno in DISK_FULL
        what = DISK_FULL[err.errno] if full else f"{target.parent} is not writable ({NOT_WRITABLE[err.errno]})"
        fix = "free some space" if full else f"make {target.parent} writable"
        if self.last.is_file():
            then = f"the previous checkpoint {self.last} is intact: {fix}, then run the same command with --resume"
        else:
            then = f"no checkpoint was written yet: {fix} (or choose another --out / --runs-root) and start again"
        return f"cannot write {target}: {what}; {then}"

    def claim(self, payload: dict[str, Any]) -> None:
        """Write config.json exclusively: a folder another run already claimed is refused."""
        target = self.path / CONFIG
        with self.writing(target):
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                with open(target, "x", encoding="utf-8") as f:  # "x": fails when another run claimed it first
                    json.dump(payload, f, indent=2, sort_keys=True, default=str)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
            except FileExistsError:
                raise RunSetupError(_taken(self.path)) from None
            except BaseException:
                target.unlink(missing_ok=True)  # a half-written claim is no claim
                raise

    def save(self, name: str, state: dict[str, Any]) -> None:
        """Write checkpoint `name` (LAST or BEST) atomically."""
        with self.writing(self.path / name):
            save_checkpoint(self.path / name, state)

    def write_metrics(self, history: list[dict[str, Any]]) -> None:
        with self.writing(self.path / METRICS), atomic_open(self.path / METRICS, "w") as f:
            f.writelines(json.dumps(h) + "\n" for h in history)

    def write_summary(self, summary: dict[str, Any]) -> None:
        with self.writing(self.path / SUMMARY):
            write_json(self.path / SUMMARY, summary)

    def hold(self) -> None:
        """Own this directory (its `run.lock`) until `release_all`; held by another process: a RunSetupError naming
        the holder."""
        lock = self.path / LOCK
        if self.path in _HELD:
            return
        with self.writing(lock):
            fd = locks.try_lock(lock, "lra run")
        if fd is None:
            raise RunSetupError(
                f"{self.path} is in use by {locks.holder(lock)}: one process trains a run directory at a time; wait "
                "for it to end (or stop it), then run the same command again"
            )
        _HELD[self.path] = fd

    def in_use(self) -> str | None:
        """Who else owns this directory now, in words, or None."""
        lock = self.path / LOCK
        return locks.holder(lock) if self.path not in _HELD and locks.is_locked(lock) else None


def release_all() -> None:
    """Give up every run directory this process owns (`RunDir.hold`)."""
    while _HELD:
        os.close(_HELD.popitem()[1])


def _taken(path: Path) -> str:
    if (path / SUMMARY).is_file():
        return f"{path} holds a finished run; choose another --out (or leave it out for a fresh directory)"
    return f"{path} already holds a run; pass --resume to continue it, or choose another --out"


def run_prefix(config: RunConfig, backend: str) -> str:
    return f"{backend}-{config.preset}-s{config.train.seed}-"


def _order(prefix: str) -> Callable[[Path], tuple[str, int]]:
    """Sort key of run directories by start time: the stamp (YYYYmmdd-HHMMSS), then the collision suffix (-2, ...)."""

    def key(path: Path) -> tuple[str, int]:
        rest = path.name.removeprefix(prefix)
        suffix = rest[len("YYYYmmdd-HHMMSS-") :]
        return rest[: len("YYYYmmdd-HHMMSS")], int(suffix) if suffix.isdigit() else 1

    return key


def start_stamp() -> str:
    """The start time in a run directory's name (local time, to the second)."""
    return time.strftime("%Y%m%d-%H%M%S")


def check_unused(out_dir: str | os.PathLike[str]) -> None:
    """Refuse an --out folder that already holds a run (before any work; `claim` re-checks exclusively)."""
    path = Path(out_dir)
    if any((path / name).exists() for name in (CONFIG, LAST, SUMMARY)):
        raise RunSetupError(_taken(path))


def create(config: RunConfig, backend: str, payload: dict[str, Any], *, out_dir=None, runs_root=None) -> RunDir:
    """A new run directory, claimed for this run: `out_dir`, or a fresh default one under `runs_root`."""
    if out_dir is not None:
        run = RunDir(Path(out_dir))
        run.claim(payload)
        run.hold()
        return run
    parent = Path(runs_root or default_runs_root()) / config.task
    base = parent / (run_prefix(config, backend) + start_stamp())
    with RunDir(base).writing(base):
        parent.mkdir(parents=True, exist_ok=True)
        for n in range(1, 10_000):
            path = base if n == 1 else base.with_name(f"{base.name}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            run = RunDir(path)
            run.claim(payload)
            run.hold()
            return run
    raise RunSetupError(f"{parent}: no free run directory name for {base.name}; remove old runs")


def find_resumable(config: RunConfig, backend: str, *, out_dir=None, runs_root=None) -> RunDir:
    """The run `--resume` continues, owned by this process (`RunDir.hold`): `out_dir`, or the newest unfinished one
    of the same task, backend, preset and seed under `runs_root`. A finished run is refused (it would be tested and
    recorded twice), and so is one started with other settings (`check_same_run`)."""
    if out_dir is not None:
        run = RunDir(Path(out_dir))
        _check_resumable(run)
    else:
        run = _newest_unfinished(config, backend, Path(runs_root or default_runs_root()))
    run.hold()
    try:
        _check_resumable(run)  # again, now that it is ours: the holder before us may have finished it
        check_same_run(run, config, backend)
    except RunSetupError:
        release_all()
        raise
    return run


def _check_resumable(run: RunDir) -> None:
    if run.finished:
        raise RunSetupError(f"--resume: {run.path} is finished ({SUMMARY} is there); nothing to resume")
    if not run.last.is_file():
        raise RunSetupError(f"--resume: {run.path} has no checkpoint ({LAST}); start without --resume")


def _newest_unfinished(config: RunConfig, backend: str, root: Path) -> RunDir:
    prefix = run_prefix(config, backend)
    runs = sorted((root / config.task).glob(prefix + "*"), key=_order(prefix), reverse=True)
    for path in runs:
        run = RunDir(path)
        if run.last.is_file() and not run.finished:
            return run
    what = f"{config.task} / {backend} / preset {config.preset} / seed {config.train.seed}"
    finished = [p for p in runs if RunDir(p).finished]
    note = f" (the newest, {finished[0]}, is finished)" if finished else ""
    raise RunSetupError(
        f"--resume: no unfinished run of {what} under {root}{note}; start one without --resume, or name it with --out"
    )


def check_same_run(run: RunDir, config: RunConfig, backend: str) -> None:
    """Refuse to resume `run` with settings other than those it started with (its config.json): the backend and every
    setting of the config hash. Speed-only settings (train.compile, ...) and the number of processes may change: a
    run resumes across world sizes with the global batch kept (tests/test_distributed.py)."""
    try:
        with open(run.path / CONFIG, encoding="utf-8") as f:
            started = json.load(f)
    except (OSError, ValueError):
        return  # no readable config.json (a run from before it existed): the checkpoint's hash is checked on load
    diffs = []
    if started.get("backend") not in (None, backend):
        diffs.append(f"--attn {started['backend']} (now {backend})")
    if isinstance(started.get("config"), dict) and config_hash(started["config"]) != config_hash(config):
        then, now = flat_settings(outcome_config(started["config"])), flat_settings(outcome_config(config))
        for key in sorted(set(then) | set(now)):
            if then.get(key) != now.get(key):
                diffs.append(f"{key}={then.get(key, '(unset)')} (now {now.get(key, '(unset)')})")
    if diffs:
        shown = ", ".join(diffs[:6]) + (f", +{len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise RunSetupError(
            f"--resume: {run.path} was started with other settings: {shown}; resume with the settings it started "
            "with (see its config.json), or start a new run without --resume"
        )


def on_main(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on rank 0, its value (or its RunSetupError) on every rank."""
    value, error = None, None
    if dist.is_main():
        try:
            value = fn(*args, **kwargs)
        except RunSetupError as e:
            error = str(e)
    value, error = dist.broadcast_object((value, error))
    if error is not None:
        raise RunSetupError(error)
    return value
