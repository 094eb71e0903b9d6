"""`lra bench train`: time the training step of `lra run` (`Trainer.step()`) for several backends in one process.

Per backend and compile mode (train.compile: eager and compiled steps of the same backend in one run): build the
task's `Trainer` exactly as a run does (same config, schedule, weight-decay groups, grad clipping, autocast,
compilation, data placement), take warm-up steps, then time `steps` steps on real batches of the task with CUDA
events (wall clock on CPU) and report the median, with the compile time apart. Stores steps/s, tokens/s, peak memory
and the speed-ups over `naive` and over eager measured in the same run. A backend that runs out of memory is
recorded with status "oom", one that cannot run here with "unsupported: why"; neither is dropped. A device that is
not there is refused before anything runs. Stopped part-way, it raises `Interrupted` with the records it finished.

Under a launcher (`--nproc N`, torchrun) every rank trains its slice of the global batch in DistributedDataParallel;
a step's time is the slowest rank's, tokens/s counts the global batch, and the record carries the world size.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from attention_impls.registry import dropout_applied
from lra.core.environment import environment
from lra.core.errors import ConfigError, RunSetupError, is_oom
from lra.core.hashing import stable_hash
from lra.core.progress import make_progress, progress_line
from lra.core.records import bench_train_record
from lra.train import distributed as dist
from lra.train.compiled import resolve_mode
from lra.train.config import RunConfig, load_config
from lra.train.device import resolve_device
from lra.train.feed import Feed, TrainBatches, pack_length_for, place_split
from lra.train.gate import gate
from lra.train.trainer import Trainer, build_trainer
from tasks import build_task
from tasks.base import Split, Task


def _timed_step(trainer: Trainer, batches: TrainBatches) -> float:
    """Milliseconds of one `Trainer.step()` on the next batch (gathering or copying it included, as in a run)."""
    dev = trainer.device
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        batch = batches(trainer.global_step)
        trainer.step(batch.tokens, batch.labels, batch.padded)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
    else:
        t0 = time.perf_counter()
        batch = batches(trainer.global_step)
        trainer.step(batch.tokens, batch.labels, batch.padded)
        ms = (time.perf_counter() - t0) * 1e3
    if dist.world_size() > 1:  # the step took as long as its slowest rank
        ms = dist.all_reduce_max(torch.tensor([ms], device=dev)).item()
    return ms


def default_modes(cfg: RunConfig, device: torch.device) -> list[str]:
    """Eager and the config's own train.compile as it resolves on `device` (just eager where that is none)."""
    return list(dict.fromkeys(["none", resolve_mode(cfg.train.compile, device)]))


def bench_train(
    task_name: str,
    backends: list[str],
    *,
    preset: str | None = None,
    overrides: list[str] | None = None,
    seqs: list[int] | None = None,
    steps: int = 20,
    warmup: int = 5,
    device: str | None = None,
    data_dir: str | None = None,
    synthetic: bool = False,
    compile_modes: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One record per (sequence length, backend, compile mode); speed-ups over naive (same mode and length) and
    over eager (same backend and length), where both ran in this call.

    `compile_modes`: train.compile values to time (default: `default_modes`). `synthetic` times on random
    full-length tokens instead of the task's data (for tasks whose data is not at hand, e.g. retrieval without the
    AAN release). Real data is the honest default: padding changes what kernels skip.
    """
    dev = resolve_device(device)
    for mode in compile_modes or []:
        resolve_mode(mode, dev)  # an unknown mode is refused before anything runs
    env = environment(dev)
    records: list[dict[str, Any]] = []
    lengths = seqs or [None]
    try:
        with make_progress(disable=not dist.is_main()) as progress:
            bar = progress.add_task(f"bench train {task_name}", total=len(lengths) * len(backends))
            for seq in lengths:
                extra = [f"data.max_length={seq}"] if seq else []
                cfg = load_config(task_name, preset, list(overrides or []) + extra)
                task = build_task(cfg.task, data_dir=data_dir, **cfg.data)
                split = _synthetic_split(task, cfg) if synthetic else task.load("train")
                feed = place_split(split, dev, placement=cfg.train.data_placement, pair=task.pair,
                                   vocab_size=task.vocab_size)  # fmt: skip
                pack = pack_length_for([split], task.seq_len) if cfg.model.pack_tokens else 0
                for backend in backends:
                    progress.update(bar, description=f"bench train {task_name} N={task.seq_len} {backend}")
                    own = load_config(task_name, preset, list(overrides or []) + extra, backend=backend)
                    reason = _refusal(own, backend, dev, data_dir, pack_length=pack or None)
                    for mode in compile_modes or default_modes(own, dev):
                        mode_cfg = own.with_settings([f"train.compile={mode}"])
                        if reason:
                            outcome = _failed(f"unsupported: {reason}", mode, dev)
                        else:
                            timing = {"steps": steps, "warmup": warmup, "pack_length": pack}
                            outcome = _measure(mode_cfg, task, feed, backend, dev, **timing)
                        setup = _setup(mode_cfg, task, backend, synthetic=synthetic, timed_steps=steps)
                        records.append(bench_train_record(**setup, data_on_device=feed.resident, **outcome, env=env))
                        _report(records[-1], f"bench train {task_name} N={task.seq_len} {backend} compile {mode}")
                    progress.advance(bar)
    except KeyboardInterrupt:
        if not records:
            raise
        _add_speedups(records)
        raise Interrupted(records) from None
    _add_speedups(records)
    return records


def _report(rec: dict[str, Any], what: str) -> None:
    """One progress line with a record's step time (or why it has none), from the main process only."""
    if dist.is_main():
        ms = rec["metrics"].get("ms_per_step")
        progress_line(f"{what}: {f'{ms:.1f} ms/step' if ms else rec['status']}")


class Interrupted(KeyboardInterrupt):
    """`bench_train` stopped part-way (Ctrl-C, or SIGTERM under lra.core.signals): `records` holds the measurements
    it finished, with their speed-ups where both sides ran."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        super().__init__(f"interrupted after {len(records)} measurement(s)")
        self.records = records


def _refusal(
    cfg: RunConfig, backend: str, dev: torch.device, data_dir: str | None, pack_length: int | None = None
) -> str | None:
    """Why the run's gate refuses `backend` here (a bench row says so instead of stopping), or None."""
    try:
        gate(cfg, backend, dev, world_size=dist.world_size(), data_dir=data_dir, pack_length=pack_length)
    except (ConfigError, RunSetupError) as e:
        return str(e)
    return None


def _failed(status: str, mode: str, dev: torch.device) -> dict[str, Any]:
    """The outcome of a step that did not run: its status, no metrics, the compile mode asked for."""
    compiled = {"mode": resolve_mode(mode, dev), "requested": mode, "fallback": None}
    return {"status": status, "metrics": {}, "compile": compiled, "attention_dropout_applied": None}


def _setup(cfg, task: Task, backend: str, *, synthetic: bool, timed_steps: int) -> dict[str, Any]:
    """The record's fields known before measuring. Its config_hash covers every setting, the speed-only ones
    (train.compile, data placement) included: for a benchmark they are what decides the result."""
    return {
        "task": cfg.task,
        "backend": backend,
        "preset": cfg.preset,
        "seq_len": task.seq_len,
        "batch_size": cfg.train.batch_size,
        "config": cfg.to_dict(),
        "config_hash": stable_hash(cfg.to_dict()),
        "timed_steps": timed_steps,
        "world_size": dist.world_size(),
        "data": "synthetic full-length tokens" if synthetic else "task data",
    }


def _add_speedups(records: list[dict[str, Any]]) -> None:
    """speedup_vs_naive: steps/s over naive's at the same length and requested compile mode; speedup_vs_eager: over
    the same backend's eager step (train.compile=none) at the same length. Only where both ran in this call."""
    ok = [r for r in records if r["status"] == "ok"]
    naive = {(r["seq_len"], r["compile"]["requested"]): r for r in ok if r["backend"] == "naive"}
    eager = {(r["seq_len"], r["backend"]): r for r in ok if r["compile"]["requested"] == "none"}
    for rec in ok:
        m = rec["metrics"]
        for key, base in (
            ("speedup_vs_naive", naive.get((rec["seq_len"], rec["compile"]["requested"]))),
            ("speedup_vs_eager", eager.get((rec["seq_len"], rec["backend"]))),
        ):
            if base is not None:
                m[key] = m["steps_per_s"] / base["metrics"]["steps_per_s"]


def _synthetic_split(task: Task, cfg: RunConfig) -> Split:
    n = 4 * cfg.train.batch_size
    shape = (n, 2, task.seq_len) if task.pair else (n, task.seq_len)
    rng = np.random.default_rng(0)
    return Split(rng.integers(1, task.vocab_size, size=shape), rng.integers(0, task.num_classes, size=n))


def _measure(
    cfg, task: Task, feed: Feed, backend: str, dev: torch.device, *, steps: int, warmup: int, pack_length: int = 0
) -> dict:
    """Time `steps` steps after `warmup`: the record's status ("ok" with metrics, "oom", or "unsupported: why"),
    compile, attention_dropout_applied and metrics (`pack_length`: model.pack_tokens' width, 0 when off).

    The first step holds compilation (and CUDA-graph recording follows in the next ones): `compile_s` is the first
    step's time minus a steady step's, `first_step_ms` the first step itself.
    """
    t = cfg.train
    trainer = batches = None
    try:
        trainer = build_trainer(cfg, task, backend, dev, pack_length=pack_length)
        batches = TrainBatches(feed, batch_size=t.batch_size, seed=t.seed, rank=dist.rank(),
                               world=dist.world_size())  # fmt: skip
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        times = [_timed_step(trainer, batches) for _ in range(warmup + steps)]
        ms = statistics.median(times[warmup:])
        sps = 1e3 / ms
        return {
            "status": "ok",
            "compile": trainer.loss.effective(),
            "attention_dropout_applied": dropout_applied(trainer.model),
            "metrics": {
                "ms_per_step": ms,
                "steps_per_s": sps,
                "tokens_per_s": sps * t.batch_size * task.seq_len * (2 if task.pair else 1),
                "peak_mem_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None,
                "ms_spread": [min(times[warmup:]), max(times[warmup:])],
                "first_step_ms": times[0],
                "compile_s": max(times[0] - ms, 0.0) / 1e3,
                **({"pack_length": pack_length} if pack_length else {}),
            },
        }
    except (ValueError, NotImplementedError) as e:  # a backend that refuses this config at build or forward time
        return _failed(f"unsupported: {e}", t.compile, dev)
    except Exception as e:
        if is_oom(e):
            return _failed("oom", t.compile, dev)
        raise
    finally:
        if batches is not None:
            batches.close()
        del trainer, batches
        torch._dynamo.reset()  # free the compiled graphs (and CUDA-graph memory) before the next backend
        if dev.type == "cuda":
            torch.cuda.empty_cache()
