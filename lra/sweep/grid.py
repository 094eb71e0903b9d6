"""The grid of a sweep: which runs, where each one lives, and what each still needs.

A run's directory is a function of its cell: ROOT/TASK/BACKEND/PRESET/sSEED (PRESET gets a `+HASH` of the `--set`
overrides when there are any), so the same command finds the same runs again. A run is done when its directory
holds `summary.json` and the results store holds its record; an unfinished one with a checkpoint is resumed; one
killed before its first checkpoint starts again.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from attention_impls import BACKENDS
from lra.core.errors import ConfigError, RunSetupError
from lra.core.hashing import stable_hash
from lra.results.store import load_records, store_run
from lra.train.config import RunConfig, config_hash, load_config
from lra.train.rundir import CONFIG, SUMMARY, RunDir, default_runs_root

DEFAULT = "default"  # the preset name of the YAML as written (the LRA config)
DONE, RECORD, RESUME, START = "done", "record", "resume", "start"


@dataclass(frozen=True)
class Run:
    """One cell of the grid: an `lra run` with its own directory."""

    task: str  # as given: a task name or a config YAML path
    label: str  # the task's name in directories and tables (a YAML path's stem)
    attn: str
    preset: str  # DEFAULT for the YAML as written
    seed: int
    overrides: tuple[str, ...]
    run_dir: Path
    steps: int
    config_hash: str

    @property
    def name(self) -> str:
        return f"{self.label}/{self.attn}/{self.preset}/s{self.seed}"

    @property
    def log(self) -> Path:
        """The run's output (appended at every launch), beside its directory."""
        return self.run_dir.with_name(self.run_dir.name + ".log")

    @property
    def lock(self) -> Path:
        """Held (flock) by whichever process is running this run, so that two sweeps never run it at once."""
        return self.run_dir.with_name(self.run_dir.name + ".lock")

    def argv(
        self, *, resume: bool, results: Path | None = None, data_dir: str | None = None, device: str | None = None
    ) -> list[str]:
        """The `lra run` arguments of this run (without the program)."""
        args = ["run", self.task, "--attn", self.attn, "--seed", str(self.seed), "--out", str(self.run_dir)]
        if self.preset != DEFAULT:
            args += ["--preset", self.preset]
        for item in self.overrides:
            args += ["--set", item]
        for flag, value in (("--results", results), ("--data-dir", data_dir), ("--device", device)):
            if value is not None:
                args += [flag, str(value)]
        return args + (["--resume"] if resume else [])


def default_root() -> Path:
    """Where sweeps go without --root: a `sweeps` folder in the runs root ($LRA_RUNS or ~/.local/share/lra/runs)."""
    return default_runs_root() / "sweeps"


def parse_names(text: str, what: str) -> list[str]:
    """'a,b' -> ['a', 'b']; an empty list or a repeated name is a ConfigError."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise ConfigError(f"--{what}: no names given (e.g. --{what} a,b)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"--{what}: {', '.join(repeated)} given twice")
    return names


def parse_seeds(text: str) -> list[int]:
    """'0-4' -> [0, 1, 2, 3, 4]; '0,2,5' and '0-2,7' as written. Anything else is a ConfigError saying what works."""
    seeds: list[int] = []
    for item in parse_names(text, "seeds"):
        lo, sep, hi = item.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ConfigError(f"--seeds: {item!r} is not a seed or a range; use e.g. 0-4 or 0,1,2") from None
        if first < 0 or last < first:
            raise ConfigError(f"--seeds: {item!r} is not an increasing range of seeds >= 0 (e.g. 0-4)")
        seeds += range(first, last + 1)
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"--seeds {text}: seed(s) {', '.join(map(str, repeated))} given twice")
    return seeds


def task_label(task: str) -> str:
    return Path(task).stem if task.endswith((".yaml", ".yml")) else task


def build_grid(
    *,
    tasks: list[str],
    attns: list[str],
    seeds: list[int],
    presets: list[str],
    overrides: list[str],
    root: str | os.PathLike[str],
) -> list[Run]:
    """Every run of tasks x attns x presets x seeds, each config resolved (bad cells fail here, before any run)."""
    for name in attns:
        BACKENDS.get(name)  # an unknown backend fails with the known ones
    labels = [task_label(t) for t in tasks]
    if len(set(labels)) < len(labels):
        raise ConfigError(f"--tasks {','.join(tasks)}: two tasks share a name; give each config file its own name")
    suffix = f"+{stable_hash(list(overrides), 8)}" if overrides else ""
    runs = []
    for task, label in zip(tasks, labels):
        for preset in presets:
            for seed in seeds:
                for attn in attns:
                    config = _resolve(task, preset, overrides, seed, attn)
                    run_dir = Path(root).resolve() / label / attn / (preset + suffix) / f"s{seed}"
                    runs.append(
                        Run(
                            task,
                            label,
                            attn,
                            preset,
                            seed,
                            tuple(overrides),
                            run_dir,
                            config.train.steps,
                            config_hash(config.for_backend(attn)),
                        )  # fmt: skip
                    )
    return runs


def _resolve(task: str, preset: str, overrides: list[str], seed: int, attn: str) -> RunConfig:
    """The config `lra run` will resolve for this cell (the same call, so the same hash)."""
    try:
        return load_config(
            task, None if preset == DEFAULT else preset, [*overrides, f"train.seed={seed}"], backend=attn
        )
    except ConfigError as e:
        raise ConfigError(f"sweep cell {task_label(task)} / preset {preset}: {e}") from None


def recorded_run_dirs(store: str | os.PathLike[str] | None) -> set[str]:
    """The run directories that have a record in the results store."""
    return {
        str(Path(r["run_dir"]).resolve()) for r in load_records(store) if r.get("kind") == "run" and r.get("run_dir")
    }


def recorded_cells(store: str | os.PathLike[str]) -> set[tuple[str, str, str]]:
    """(task, backend, config hash) of every run record in `store`: the cells it holds, whichever machine or folder
    ran them (the hash covers the seed and every outcome setting, so a run of other settings is no match)."""
    if not Path(store).is_dir():
        raise ConfigError(f"--skip-recorded {store}: no such folder of records (e.g. leaderboard/results)")
    return {
        (r["task"], r["backend"], r["config_hash"])
        for r in load_records(store)
        if r.get("kind") == "run" and r.get("task") and r.get("backend") and r.get("config_hash")
    }


def leave_out_recorded(runs: list[Run], cells: set[tuple[str, str, str]]) -> tuple[list[Run], list[Run]]:
    """`runs` split into those still to run and those whose cell `cells` already holds."""
    todo: list[Run] = []
    held: list[Run] = []
    for run in runs:
        (held if (run.label, run.attn, run.config_hash) in cells else todo).append(run)
    return todo, held


def run_state(run: Run, recorded: set[str]) -> str:
    """What `run` still needs: DONE, RECORD (finished, its record missing), RESUME (a checkpoint) or START.

    A directory that holds a run of another config (the YAML or the overrides changed) is a RunSetupError.
    """
    stored = _stored_hash(run.run_dir)
    if stored is not None and stored != run.config_hash:
        raise RunSetupError(
            f"{run.run_dir} holds a run of another config (hash {stored}, this sweep's is {run.config_hash}): its "
            "YAML or --set values changed since; sweep into another --root, or remove that directory"
        )
    rd = RunDir(run.run_dir)
    if rd.finished:
        return DONE if str(run.run_dir.resolve()) in recorded else RECORD
    return RESUME if rd.last.is_file() else START


def _stored_hash(run_dir: Path) -> str | None:
    for name in (SUMMARY, CONFIG):
        path = run_dir / name
        if path.is_file():
            try:
                with open(path, encoding="utf-8") as f:
                    return json.load(f).get("config_hash")
            except json.JSONDecodeError:  # a config.json cut short by a kill as the run began: it starts again
                return None
    return None


def store_record(run: Run, store: str | os.PathLike[str] | None) -> Path:
    """Store a finished run's record from its summary.json (the run was stopped between the two writes, or the
    store could not be written then); a record the store already holds is not written again."""
    return store_run(run.run_dir, store)[0]


def clear_unstarted(run: Run) -> None:
    """Empty the directory of a run killed before its first checkpoint, so that it can start again."""
    if run.run_dir.exists() and run_state(run, set()) == START:
        shutil.rmtree(run.run_dir)
