"""Worker processes for CPU-heavy data work (generation, decoding), with progress and clean cancellation."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

R = TypeVar("R")


def run_jobs(
    fn: Callable[..., R],
    jobs: Iterable[tuple[Any, ...]],
    workers: int,
    on_result: Callable[[int, R], None],
    ordered: bool = False,
) -> None:
    """Call fn(*job) for every job, in `workers` spawned processes when workers > 1 (in this process otherwise).

    `on_result(i, result)` runs here for job i, as each finishes (in job order when `ordered`). An exception in a job
    or in `on_result` cancels the jobs not yet started and propagates. Processes are spawned, not forked: the parent
    may hold threads (progress bars) and CUDA state, which fork does not copy safely.
    """
    jobs = list(jobs)
    if workers <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            on_result(i, fn(*job))
        return
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        try:
            done = futures if ordered else cf.as_completed(futures)
            for fut in done:
                on_result(futures[fut], fut.result())
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
