"""The local executor: K runs per visible GPU at once (K processes on a machine without one), each an `lra run`
subprocess with its own CUDA_VISIBLE_DEVICES and log file.

Each run is locked (flock on RUN.lock, see lra.core.locks) by the sweep that starts it, and the lock is handed to the
`lra run` process, so it stays held as long as that process lives, even when the sweep itself is killed: a second
sweep over the same root skips a run that is still running elsewhere (state `skipped`, naming the holder) instead of
writing into its directory, and so does a sweep that finds the run directory owned by an `lra run --resume` of it.
Whether a finished run still needs its record is decided under the lock, from the results store as it is then.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lra.core import locks
from lra.core.errors import ConfigError
from lra.sweep.grid import DONE, RECORD, RESUME, START, Run, clear_unstarted, recorded_run_dirs, run_state, store_record
from lra.train.rundir import RunDir

POLL_S = 0.5
STOP_GRACE_S = 10.0
FINAL = ("done", "failed", "skipped", "stopped")  # how a run ends a sweep (skipped: running in another process;
# stopped: on the sweep's --time-limit or asked by a signal, its state saved for the same command to continue)
START_S = 60.0  # under a time limit, a run is started only with at least this long left
# on_status(run, state, where): pending, queued, running, resumed or a FINAL state; `where` names the GPU, job, ...
OnStatus = Callable[[Run, str, str], None]
Outcome = dict[str, tuple[str, str]]  # run name -> (FINAL state, note)


@dataclass(frozen=True)
class LaunchOptions:
    """What every `lra run` of a sweep gets besides its own cell."""

    results: Path  # the results store (passed explicitly, so every process and node writes to the same one)
    data_dir: str | None = None
    device: str | None = None  # None: each run's default (its GPU when it has one); "cpu" keeps runs off the GPUs
    runner: str = "lra"  # runs are `python -m RUNNER run ...` (tests use a module that adds toy tasks first)
    budget: Any = None  # a lra.train.budget.TimeBudget for the whole sweep: each run gets what is left of it


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out: CUDA_VISIBLE_DEVICES's entries when it is set, else every CUDA device."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def slots_for(per_gpu: int, device: str | None) -> list[str | None]:
    """One entry per concurrent run: a GPU id (each GPU `per_gpu` times, interleaved) or None for a CPU process."""
    if per_gpu < 1:
        raise ConfigError(f"--per-gpu must be at least 1, got {per_gpu}")
    gpus = [] if device == "cpu" else visible_gpus()
    if device is not None and device.startswith("cuda") and not gpus:
        raise ConfigError(f"--device {device}: no GPU is visible here; leave --device out or use --device cpu")
    return [g for _ in range(per_gpu) for g in gpus] or [None] * per_gpu


@dataclass
class _Active:
    run: Run
    proc: subprocess.Popen
    lock_fd: int


def try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on `path` for this sweep, or None when another process holds it."""
    return locks.try_lock(path, "lra sweep")


class LocalPool:
    """Runs a list of runs, at most one per slot at a time, until each is done, failed or skipped (running in another
    process)."""

    def __init__(
        self, runs: list[Run], *, slots: list[str | None], options: LaunchOptions, on_status: OnStatus | None = None
    ) -> None:
        self.runs, self.slots, self.options = list(runs), slots, options
        self.notify = on_status or (lambda run, state, where: None)
        self.threads = max(1, (os.cpu_count() or 1) // len(slots))
        self.outcome: Outcome = {}

    def on_status(self, run: Run, state: str, where: str) -> None:
        if state in FINAL:
            self.outcome[run.name] = (state, where)
        self.notify(run, state, where)

    def run(self, on_tick: Callable[[], None] | None = None) -> Outcome:
        """Run everything; returns how each run ended. Ctrl-C (or an error here) stops the runs it started."""
        pending, active = deque(self.runs), {}
        try:
            while pending or active:
                for slot in [i for i in range(len(self.slots)) if i not in active]:
                    started = self._next(pending, slot)
                    if started is not None:
                        active[slot] = started
                self._reap(active)
                if on_tick is not None:
                    on_tick()
                if pending or active:
                    time.sleep(POLL_S)
        finally:
            _stop(active.values())
        return self.outcome

    def _next(self, pending: deque[Run], slot: int) -> _Active | None:
        """Start the next pending run that needs starting on `slot`, settling the ones that need no process."""
        while pending:
            run = pending.popleft()
            budget = self.options.budget
            if budget is not None and budget.remaining() - budget.margin() < START_S:
                self.on_status(run, "stopped", "time limit: not started")
                continue
            fd = try_lock(run.lock)
            elsewhere = locks.holder(run.lock) if fd is None else RunDir(run.run_dir).in_use()
            if elsewhere is not None:
                if fd is not None:
                    os.close(fd)
                self.on_status(run, "skipped", f"running in {elsewhere}")
                continue
            try:
                started = self._settle_or_start(run, fd, self.slots[slot])
            except BaseException:
                os.close(fd)
                raise
            if started is not None:
                return started
            os.close(fd)
            self.on_status(run, "done", "")
        return None

    def _settle_or_start(self, run: Run, fd: int, gpu: str | None) -> _Active | None:
        """Start `run` (holding its lock `fd`) unless it needs no process (then None). The store is read now, under
        the lock: another sweep may have recorded this run since this one started."""
        state = run_state(run, recorded_run_dirs(self.options.results))
        if state == RECORD:
            store_record(run, self.options.results)
        if state in (DONE, RECORD):
            return None
        if state == START:
            clear_unstarted(run)
        return self._start(run, fd, gpu, resume=state == RESUME)

    def _start(self, run: Run, lock_fd: int, gpu: str | None, *, resume: bool) -> _Active:
        opts = self.options
        argv = run.argv(resume=resume, results=opts.results, data_dir=opts.data_dir, device=opts.device)
        if opts.budget is not None:
            argv += ["--time-limit", f"{max(1.0, opts.budget.remaining() - opts.budget.margin()):.0f}"]
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        env.setdefault("OMP_NUM_THREADS", str(self.threads))  # K processes share the cores
        command = [sys.executable, "-m", opts.runner, *argv]
        with open(run.log, "ab") as log:  # the process keeps its own copy of the file open
            log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} gpu={gpu}: {' '.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(lock_fd,)
            )
        self.on_status(run, "resumed" if resume else "running", "cpu" if gpu is None else f"gpu {gpu}")
        return _Active(run, proc, lock_fd)

    def _reap(self, active: dict[int, _Active]) -> None:
        for slot, a in list(active.items()):
            rc = a.proc.poll()
            if rc is None:
                continue
            _release(a)
            del active[slot]
            if rc == 0 and not RunDir(a.run.run_dir).finished:  # on its time limit, or asked by a signal
                why = "time limit" if self.options.budget is not None else "asked to stop"
                self.on_status(a.run, "stopped", f"{why}: state saved")
                continue
            self.on_status(a.run, "done" if rc == 0 else "failed", f"exit {rc}" if rc else "")


def _release(a: _Active) -> None:
    os.close(a.lock_fd)


def _stop(active) -> None:
    """Stop runs still going (Ctrl-C or an error here): SIGTERM, then SIGKILL after a grace period."""
    active = list(active)
    for a in active:
        with contextlib.suppress(ProcessLookupError):
            a.proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for a in active:
        try:
            a.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            a.proc.kill()
            a.proc.wait()
        _release(a)


def run_local(
    runs: list[Run],
    *,
    per_gpu: int,
    options: LaunchOptions,
    on_status: OnStatus | None = None,
    on_tick: Callable[[], None] | None = None,
) -> Outcome:
    """Run `runs` here, `per_gpu` at a time on each visible GPU (or `per_gpu` CPU processes); how each ended."""
    pool = LocalPool(runs, slots=slots_for(per_gpu, options.device), options=options, on_status=on_status)
    return pool.run(on_tick)
