"""The results store: one JSON record per result (a finished run, a benchmark row set, a numerics study).

`lra run`, `bench` and `numerics` write to the user's store ($LRA_RESULTS, default ~/.local/share/lra/results), never
into the checkout; the curated records behind published figures ship in `leaderboard/results/` and are added there
only on purpose (`--results leaderboard/results`).
Each record carries what is needed to trace a figure: task, backend, metrics, the resolved config and its hash, the
git commit, device, library versions and date; its shape per kind is `lra.core.records`, whose reader upgrades
records of older schemas as they are loaded.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lra.core.environment import REPO_ROOT
from lra.core.errors import DataCorruptError, DataMissingError, WriteError, write_reason
from lra.core.records import read_record, upgrade


def results_dir() -> Path:
    """The user's results store: $LRA_RESULTS, else ~/.local/share/lra/results (never inside the checkout)."""
    env = os.environ.get("LRA_RESULTS")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "lra" / "results"


def curated_dir() -> Path:
    """The curated records that ship with the repository (`leaderboard/results/`)."""
    return REPO_ROOT / "leaderboard" / "results"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def save_record(record: dict[str, Any], store: str | os.PathLike[str] | None = None) -> Path:
    """Write `record` as a new JSON file in the store and return its path.

    The file is written whole under a temporary name, then hard-linked to the first free name, which fails rather
    than overwrites when another process took that name first: records saved at the same moment (a sweep's runs)
    never replace each other. A store that cannot be written (read-only, full, missing) is a WriteError; nothing
    half-written is left in it.
    """
    store = Path(store) if store is not None else results_dir()
    try:
        return _write_record(record, store)
    except OSError as e:
        reason = write_reason(e)
        if reason is None:
            raise
        raise WriteError(f"cannot write a record into the results store {store}: {reason}") from e


def _write_record(record: dict[str, Any], store: Path) -> Path:
    stamp = str(record.get("date") or "").replace(":", "").replace("-", "")
    seed = (record.get("config") or {}).get("train", {}).get("seed")
    parts = [record.get("kind", "record"), record.get("task"), record.get("backend"), record.get("preset")]
    parts += [f"s{seed}" if seed is not None and record.get("kind") in ("run", "pretrain") else None, stamp]
    base = _slug("__".join(str(p) for p in parts if p))
    store.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=store)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        i = 0
        while True:
            path = store / (f"{base}.json" if i == 0 else f"{base}_{i}.json")
            try:
                os.link(tmp, path)  # fails, never overwrites, when the name is taken
                break
            except FileExistsError:
                i += 1
    finally:
        tmp.unlink(missing_ok=True)
    return path


def store_run(run_dir: str | os.PathLike[str], store: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """Store the record of the finished run in `run_dir` (its summary.json is the record) unless the store already
    holds it (a record of that run directory with the same date); returns (the record's path, whether it was written
    now). `lra results store` and the sweep store a record this way when storing it at the end of the run failed."""
    from lra.train.rundir import SUMMARY

    summary = Path(run_dir) / SUMMARY
    try:
        with open(summary, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise DataMissingError(
            f"{run_dir} holds no finished run ({SUMMARY} is missing): finish it with `lra run ... --resume --out "
            f"{run_dir}` (the run's own command), which stores its record"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise DataCorruptError(f"{summary} is not a readable run summary ({e})") from None
    here = str(Path(run_dir).resolve())
    for rec in load_records(store):
        same_run = rec.get("run_dir") and str(Path(rec["run_dir"]).resolve()) == here
        if same_run and rec.get("date") == record.get("date"):
            return Path(rec["_path"]), False
    return save_record(upgrade(record, source=str(summary)), store), True


def load_records(
    store: str | os.PathLike[str] | None = None,
    *,
    on_unreadable: Callable[[Path, DataCorruptError], None] | None = None,
) -> list[dict[str, Any]]:
    """Every record in the store, sorted by file name and upgraded to the current schema (`read_record`), each with
    its file name under '_file', its resolved path under '_path' and the store's label (`store_label`) under
    '_store'. A missing store holds no records. A file that is no readable record is a DataCorruptError naming it,
    or, with `on_unreadable`, passed to on_unreadable(path, error) and left out."""
    store = Path(store) if store is not None else results_dir()
    label = store_label(store)
    out = []
    for path in sorted(store.glob("*.json")):
        try:
            rec = read_record(path)
        except DataCorruptError as e:
            if on_unreadable is None:
                raise
            on_unreadable(path, e)
            continue
        rec.update(_file=path.name, _path=str(path.resolve()), _store=label)
        out.append(rec)
    return out


def default_stores() -> list[Path]:
    """What `lra leaderboard` reads without `--results`: the curated records and the user's store."""
    stores = [curated_dir(), results_dir()]
    return stores[:1] if stores[0].resolve() == stores[1].resolve() else stores


def store_label(store: str | os.PathLike[str]) -> str:
    """'curated' for leaderboard/results, 'user' for the user's store, else the folder as `display_path` shows it."""
    resolved = Path(store).expanduser().resolve()
    if resolved == curated_dir().resolve():
        return "curated"
    if resolved == results_dir().resolve():
        return "user"
    return display_path(store)


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as a reader knows it: relative to the checkout inside it, `~/...` under the home folder."""
    resolved = Path(path).expanduser().resolve()
    for base, prefix in ((REPO_ROOT.resolve(), ""), (Path.home().resolve(), "~/")):
        if resolved.is_relative_to(base):
            rel = resolved.relative_to(base).as_posix()
            return prefix + rel if rel != "." else (prefix or ".")
    return resolved.as_posix()
