"""`lra bench train`: time training steps of a task's model for several backends in one process.

Per backend: build the task's model, run warm-up steps, then time `steps` training steps (forward, backward,
optimizer) on real batches of the task with CUDA events (wall clock on CPU) and take the median. Stores steps/s,
tokens/s, peak memory and the speed-up over `naive` measured in the same run. A backend that runs out of memory is
recorded with status "oom", one that cannot run here with "unsupported: why"; neither is dropped.

Under a launcher (`--nproc N`, torchrun) every rank trains its slice of the global batch in DistributedDataParallel;
a step's time is the slowest rank's, tokens/s counts the global batch, and the record carries the world size.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attention_impls import why_cannot_run
from lra.core.environment import environment
from lra.core.progress import make_progress
from lra.model import build_model
from lra.train import distributed as dist
from lra.train.batches import batch_indices, to_batch
from lra.train.config import config_hash, head_dim_of, load_config
from lra.train.run import _autocast, resolve_device
from tasks import build_task
from tasks.registry import Split


def _time_steps(model, optimizer, split, cfg, device, steps: int, warmup: int) -> list[float]:
    t = cfg["train"]
    times = []
    for i in range(warmup + steps):
        idx = batch_indices(i, len(split), t["batch_size"], t["seed"], dist.rank(), dist.world_size())
        tokens, labels = to_batch(split, idx, device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        with _autocast(device, t["amp"]):
            logits = model(tokens)
        loss = F.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            ms = (time.perf_counter() - t0) * 1e3
        if dist.world_size() > 1:  # the step took as long as its slowest rank
            ms = dist.all_reduce_max(torch.tensor([ms], device=device)).item()
        if i >= warmup:
            times.append(ms)
    return times


def bench_train(
    task_name: str,
    backends: list[str],
    preset: str | None = None,
    overrides: list[str] | None = None,
    seqs: list[int] | None = None,
    steps: int = 20,
    warmup: int = 5,
    device: str | None = None,
    data_dir: str | None = None,
    synthetic: bool = False,
) -> list[dict[str, Any]]:
    """One record per (backend, sequence length); speed-up over naive where naive ran at the same length.

    `synthetic` times on random full-length tokens instead of the task's data (for tasks whose data is not at hand,
    e.g. retrieval without the AAN release). Real data is the honest default: padding changes what kernels skip.
    """
    dev = resolve_device(device)
    env = environment(dev)
    records = []
    lengths = seqs or [None]
    world = dist.world_size()
    with make_progress(disable=not dist.is_main()) as progress:
        bar = progress.add_task(f"bench train {task_name}", total=len(lengths) * len(backends))
        for seq in lengths:
            extra = [f"data.max_length={seq}"] if seq else []
            cfg = load_config(task_name, preset, list(overrides or []) + extra)
            task = build_task(cfg["task"], data_dir=data_dir, **cfg["data"])
            split = _synthetic_split(task, cfg) if synthetic else task.load("train")
            seq_tokens = task.seq_len * (2 if task.pair else 1)
            for backend in backends:
                progress.update(bar, description=f"bench train {task_name} N={task.seq_len} {backend}")
                rec: dict[str, Any] = {
                    "kind": "bench_train",
                    "task": cfg["task"],
                    "backend": backend,
                    "preset": cfg["preset"],
                    "seq_len": task.seq_len,
                    "batch_size": cfg["train"]["batch_size"],
                    "config": cfg,
                    "config_hash": config_hash(cfg),
                    "timed_steps": steps,
                    "world_size": world,
                    "data": "synthetic full-length tokens" if synthetic else "task data",
                    **env,
                }
                reason = why_cannot_run(backend, dev, None, head_dim_of(cfg))
                if reason:
                    rec.update(status=f"unsupported: {reason}", metrics={})
                else:
                    rec.update(_measure(cfg, task, split, backend, dev, steps, warmup, seq_tokens))
                records.append(rec)
                progress.advance(bar)
    for rec in records:
        base = next(
            (r for r in records if r["backend"] == "naive" and r["seq_len"] == rec["seq_len"] and r["status"] == "ok"),
            None,
        )
        if rec["status"] == "ok" and base is not None:
            rec["metrics"]["speedup_vs_naive"] = rec["metrics"]["steps_per_s"] / base["metrics"]["steps_per_s"]
    return records


def _synthetic_split(task, cfg) -> Split:
    n = 4 * cfg["train"]["batch_size"]
    shape = (n, 2, task.seq_len) if task.pair else (n, task.seq_len)
    rng = np.random.default_rng(0)
    return Split(rng.integers(1, task.vocab_size, size=shape), rng.integers(0, task.num_classes, size=n))


def _measure(cfg, task, split, backend, dev, steps, warmup, seq_tokens) -> dict[str, Any]:
    torch.manual_seed(cfg["train"]["seed"])
    model = optimizer = None
    try:
        model = build_model(cfg, task.vocab_size, task.seq_len, task.num_classes, task.pair, backend).to(dev)
        model.train()
        model = dist.wrap(model, dev)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        times = _time_steps(model, optimizer, split, cfg, dev, steps, warmup)
        ms = statistics.median(times)
        sps = 1e3 / ms
        return {
            "status": "ok",
            "metrics": {
                "ms_per_step": ms,
                "steps_per_s": sps,
                "tokens_per_s": sps * cfg["train"]["batch_size"] * seq_tokens,
                "peak_mem_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None,
                "ms_spread": [min(times), max(times)],
            },
        }
    except torch.OutOfMemoryError:
        return {"status": "oom", "metrics": {}}
    except (ValueError, NotImplementedError) as e:  # a backend that refuses this config (e.g. no dropout support)
        return {"status": f"unsupported: {e}", "metrics": {}}
    finally:
        del model, optimizer
        if dev.type == "cuda":
            torch.cuda.empty_cache()
