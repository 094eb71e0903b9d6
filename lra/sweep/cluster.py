"""The cluster executor: the grid as submitit jobs, on SLURM or on submitit's local executor (the same path, to try
it or test it on one machine).

Each job takes one node with `gpus_per_node` GPUs and runs up to gpus_per_node x per_gpu runs on it through the
local executor, so a job is exactly what `lra sweep` does on a workstation. A job stopped by its time limit or by
preemption is requeued by submitit (RunBatch is Checkpointable); its runs resume from their last checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import submitit

from lra.core.errors import ConfigError
from lra.sweep.grid import Run
from lra.sweep.local_pool import POLL_S, LaunchOptions, OnStatus, Outcome, run_local
from lra.train.rundir import RunDir

CLUSTERS = {"slurm": "slurm", "submitit-local": "local"}  # --executor -> submitit's cluster name


class RunBatch(submitit.helpers.Checkpointable):
    """One job: its runs on one node, `per_gpu` per GPU; returns how each run ended."""

    def __init__(self, runs: list[Run], per_gpu: int, options: LaunchOptions) -> None:
        self.runs, self.per_gpu, self.options = runs, per_gpu, options

    def __call__(self) -> Outcome:
        return run_local(self.runs, per_gpu=self.per_gpu, options=self.options)


@dataclass(frozen=True)
class ClusterOptions:
    """The job settings: --executor, --partition, --time (minutes), --gpus-per-node, --cpus-per-task."""

    executor: str = "slurm"
    partition: str | None = None
    time_min: int = 24 * 60
    gpus_per_node: int = 1
    cpus_per_task: int | None = None


def parse_minutes(text: str) -> int:
    """'90' -> 90; 'H:MM' or 'H:MM:SS' or 'D-HH:MM:SS' (SLURM's forms) -> minutes, seconds rounded up."""
    days, _, clock = text.rpartition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in clock.split(":")]
        if len(parts) == 1:
            minutes = parts[0]
        elif len(parts) in (2, 3):
            h, m, s = (parts + [0])[:3]
            minutes = h * 60 + m + (1 if s else 0)
        else:
            raise ValueError
        minutes += int(days) * 24 * 60
    except ValueError:
        raise ConfigError(f"--time {text!r}: give minutes (90) or SLURM's H:MM:SS / D-HH:MM:SS") from None
    if minutes <= 0:
        raise ConfigError(f"--time {text!r}: the time limit must be positive")
    return minutes


def make_executor(folder: Path, cluster: ClusterOptions) -> submitit.AutoExecutor:
    """A submitit executor for one-node jobs with the given partition, time limit, GPUs and CPUs."""
    executor = submitit.AutoExecutor(folder=folder, cluster=CLUSTERS[cluster.executor])
    params = {"timeout_min": cluster.time_min, "gpus_per_node": cluster.gpus_per_node, "nodes": 1}
    params.update(tasks_per_node=1, name="lra-sweep")
    if cluster.cpus_per_task:
        params["cpus_per_task"] = cluster.cpus_per_task
    if cluster.partition:
        params["slurm_partition"] = cluster.partition
    executor.update_parameters(**params)
    return executor


def submit(
    runs: list[Run], *, per_gpu: int, options: LaunchOptions, cluster: ClusterOptions, folder: Path
) -> list[tuple[submitit.Job, list[Run]]]:
    """Submit the runs in batches of one node's worth; returns each job with its runs."""
    if per_gpu < 1:
        raise ConfigError(f"--per-gpu must be at least 1, got {per_gpu}")
    size = max(1, cluster.gpus_per_node) * per_gpu
    batches = [runs[i : i + size] for i in range(0, len(runs), size)]
    executor = make_executor(folder, cluster)
    return [(executor.submit(RunBatch(batch, per_gpu, options)), batch) for batch in batches]


def wait(
    jobs: list[tuple[submitit.Job, list[Run]]], *, on_status: OnStatus, on_tick: Callable[[], None] | None = None
) -> Outcome:
    """Wait for every job, reporting its runs' states; returns how each run ended.

    Ctrl-C cancels the jobs not finished yet (their runs resume from their checkpoints when the sweep is rerun).
    """
    outcome: Outcome = {}
    waiting = list(jobs)
    try:
        while waiting:
            for job, batch in list(waiting):
                if job.done():
                    waiting.remove((job, batch))
                    outcome.update(_collect(job, batch, on_status))
                else:
                    _report_running(job, batch, on_status)
            if on_tick is not None:
                on_tick()
            if waiting:
                time.sleep(POLL_S)
    finally:
        for job, _ in waiting:
            job.cancel(check=False)
    return outcome


def _report_running(job: submitit.Job, batch: list[Run], on_status: OnStatus) -> None:
    state = "running" if job.state == "RUNNING" else "queued"
    for run in batch:
        on_status(run, "done" if RunDir(run.run_dir).finished else state, f"job {job.job_id}")


def _collect(job: submitit.Job, batch: list[Run], on_status: OnStatus) -> Outcome:
    try:
        outcome = job.result()
    except Exception:  # the job itself failed (not one of its runs): its log says why
        outcome = {run.name: ("failed", f"job {job.job_id}: see {job.paths.stderr}") for run in batch}
    for run in batch:
        outcome.setdefault(run.name, ("failed", f"not run: see {job.paths.stderr}"))
        on_status(run, *outcome[run.name])
    return outcome
