"""Run directories: where a run's files go, how a new one is claimed, how an unfinished one is found again.

A run directory holds `config.json` (the resolved config and its hash), `metrics.jsonl` (one line per evaluation),
`last.pt` / `best.pt` (checkpoints) and, once the run is finished, `summary.json`. The default place is
RUNS_ROOT/TASK/BACKEND-PRESET-sSEED-YYYYmmdd-HHMMSS under $LRA_RUNS (default ~/.local/share/lra/runs: nothing a user
runs writes into the checkout). A directory belongs to one run: a new run creates its default directory exclusively
(a second run started in the same second gets a `-2` suffix) and claims `config.json` exclusively in an --out folder.

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

from lra.core.atomic import atomic_open, write_json
from lra.core.errors import RunSetupError
from lra.train import distributed as dist
from lra.train.checkpoint import BEST, LAST, save_checkpoint

T = TypeVar("T")
CONFIG, METRICS, SUMMARY = "config.json", "metrics.jsonl", "summary.json"
DISK_FULL = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up"}
NOT_WRITABLE = {errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EROFS: "read-only disk"}


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


def _taken(path: Path) -> str:
    if (path / SUMMARY).is_file():
        return f"{path} holds a finished run; choose another --out (or leave it out for a fresh directory)"
    return f"{path} already holds a run; pass --resume to continue it, or choose another --out"


def run_prefix(config: dict[str, Any], backend: str) -> str:
    return f"{backend}-{config['preset']}-s{config['train']['seed']}-"


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


def create(config: dict[str, Any], backend: str, payload: dict[str, Any], *, out_dir=None, runs_root=None) -> RunDir:
    """A new run directory, claimed for this run: `out_dir`, or a fresh default one under `runs_root`."""
    if out_dir is not None:
        run = RunDir(Path(out_dir))
        run.claim(payload)
        return run
    parent = Path(runs_root or default_runs_root()) / config["task"]
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
            return run
    raise RunSetupError(f"{parent}: no free run directory name for {base.name}; remove old runs")


def find_resumable(config: dict[str, Any], backend: str, *, out_dir=None, runs_root=None) -> RunDir:
    """The run `--resume` continues: `out_dir`, or the newest unfinished one of the same task, backend, preset and
    seed under `runs_root`. A finished run is refused (it would be tested and recorded twice)."""
    if out_dir is not None:
        run = RunDir(Path(out_dir))
        if run.finished:
            raise RunSetupError(f"--resume: {run.path} is finished ({SUMMARY} is there); nothing to resume")
        if not run.last.is_file():
            raise RunSetupError(f"--resume: {run.path} has no checkpoint ({LAST}); start without --resume")
        return run
    root = Path(runs_root or default_runs_root())
    prefix = run_prefix(config, backend)
    runs = sorted((root / config["task"]).glob(prefix + "*"), key=_order(prefix), reverse=True)
    for path in runs:
        run = RunDir(path)
        if run.last.is_file() and not run.finished:
            return run
    what = f"{config['task']} / {backend} / preset {config['preset']} / seed {config['train']['seed']}"
    finished = [p for p in runs if RunDir(p).finished]
    note = f" (the newest, {finished[0]}, is finished)" if finished else ""
    raise RunSetupError(
        f"--resume: no unfinished run of {what} under {root}{note}; start one without --resume, or name it with --out"
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
