"""The training loop: one task, one attention backend, one resolved config -> a run directory and a result record.

AdamW with a warm-up schedule, gradient clipping, bf16 autocast on CUDA, periodic validation, a best-validation
checkpoint and a final test on it. The full state is checkpointed atomically at every evaluation; `resume=True`
continues at the same step with the same data order (batches are a function of the step) and RNG state, so an
interrupted run ends with the same result as an uninterrupted one. A non-finite loss stops the run and leaves the last
good checkpoint in place.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.progress import TextColumn

from attention_impls import why_cannot_run
from lra.core.atomic import atomic_open, write_json
from lra.core.environment import environment
from lra.core.progress import console, make_progress
from lra.model import build_model, load_init
from lra.results.store import save_record
from lra.train import distributed as dist
from lra.train.batches import batch_indices, eval_batches, to_batch
from lra.train.checkpoint import BEST, LAST, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from lra.train.config import config_hash, head_dim_of
from lra.train.schedules import lr_factor
from tasks import build_task


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf."""


class RunSetupError(ValueError):
    """The run cannot start as asked (backend/device mismatch, run directory conflicts); the message says why."""


@dataclass
class RunState:
    """What a checkpoint carries besides the weights and optimizer."""

    step: int = 0
    best_val_acc: float = -1.0
    best_step: int = 0
    train_time: float = 0.0  # wall-clock seconds spent training (evaluation included), summed over resumes
    step_time: float = 0.0  # seconds spent in training steps only (throughput)
    timed_steps: int = 0
    thresholds: dict[str, float] = field(default_factory=dict)  # "0.6" -> train_time when val acc first reached it
    history: list[dict[str, Any]] = field(default_factory=list)


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda", dist.local_rank()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", dist.local_rank())
    return dev


def _autocast(device: torch.device, amp: str):
    if device.type != "cuda" or amp == "none":
        return torch.autocast(device_type=device.type, enabled=False)
    return torch.autocast(device_type="cuda", dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


@torch.no_grad()
def evaluate(model, split, batch_size: int, device: torch.device, amp: str, limit: int = 0) -> dict[str, float]:
    """Loss and accuracy over a split (all ranks together)."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for idx in eval_batches(len(split), batch_size, limit, dist.rank(), dist.world_size()):
        tokens, labels = to_batch(split, idx, device)
        with _autocast(device, amp):
            logits = model(tokens)
        totals[0] += F.cross_entropy(logits.float(), labels, reduction="sum").double()
        totals[1] += (logits.argmax(-1) == labels).sum()
        totals[2] += len(labels)
    totals = dist.all_reduce_sum(totals)
    model.train()
    n = max(totals[2].item(), 1.0)
    return {"loss": totals[0].item() / n, "acc": totals[1].item() / n, "count": int(totals[2].item())}


def default_run_dir(root: Path, config: dict[str, Any], backend: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / config["task"] / f"{backend}-{config['preset']}-s{config['train']['seed']}-{stamp}"


def find_resumable(root: Path, config: dict[str, Any], backend: str) -> Path | None:
    """The newest unfinished run directory of the same task, backend, preset and seed under `root`."""
    pattern = f"{backend}-{config['preset']}-s{config['train']['seed']}-*"
    candidates = sorted((root / config["task"]).glob(pattern), reverse=True)
    for d in candidates:
        if (d / LAST).is_file() and not (d / "summary.json").is_file():
            return d
    return None


def train(
    config: dict[str, Any],
    backend: str,
    out_dir: str | os.PathLike[str] | None = None,
    runs_root: str | os.PathLike[str] = "runs",
    device: str | None = None,
    resume: bool = False,
    data_dir: str | os.PathLike[str] | None = None,
    results_store: str | os.PathLike[str] | None = None,
    stop_after: int | None = None,
    save_result: bool = True,
    on_eval: Callable[[int, torch.nn.Module], None] | None = None,
) -> dict[str, Any]:
    """Train and test `backend` on `config`'s task. Returns the summary (also written to the run directory).

    `stop_after` ends the process's work after that many steps as a kill would (tests of `resume`).
    `on_eval(step, model)` is called at every evaluation (the numerics study snapshots weights there).
    """
    dev = resolve_device(device)
    head_dim = head_dim_of(config)
    amp = config["train"]["amp"]
    reason = why_cannot_run(backend, dev, None, head_dim)
    if reason:
        raise RunSetupError(reason)

    t = config["train"]
    runs_root = Path(runs_root)
    if out_dir is not None:
        run_dir = Path(out_dir)
    elif resume:
        run_dir = find_resumable(runs_root, config, backend)
        if run_dir is None:
            raise RunSetupError(
                f"--resume: no unfinished run of {config['task']} / {backend} / preset {config['preset']} / seed "
                f"{t['seed']} under {runs_root}/; start one without --resume, or name it with --out"
            )
    else:
        run_dir = default_run_dir(runs_root, config, backend)
    run_dir = dist.broadcast_object(run_dir)
    chash = config_hash(config)
    ckpt_path = run_dir / LAST
    if ckpt_path.is_file() and not resume:
        raise RunSetupError(f"{run_dir} already holds a run; pass --resume to continue it, or choose another --out")
    if resume and not ckpt_path.is_file():
        raise RunSetupError(f"--resume: {run_dir} has no checkpoint ({LAST}); start without --resume")

    torch.manual_seed(t["seed"])
    task = build_task(config["task"], data_dir=data_dir, **config["data"])
    train_split, val_split, test_split = task.load("train"), task.load("val"), task.load("test")
    model = build_model(config, task.vocab_size, task.seq_len, task.num_classes, task.pair, backend).to(dev)
    if t["init_from"] and not resume:
        adapted = load_init(model, _read_init_state(t["init_from"]))
        if adapted and dist.is_main():
            console.print(f"init_from {t['init_from']}: upsampled {', '.join(adapted)} on the 2-D grid")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "pos" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "pos" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": t["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=t["lr"],
        betas=tuple(t["betas"]),
        eps=t["eps"],
    )
    factor = lr_factor(t["schedule"], t["warmup"], t["steps"])
    state = RunState()
    if resume:
        ckpt = load_checkpoint(ckpt_path, map_location=dev)
        if ckpt["config_hash"] != chash:
            raise RunSetupError(
                f"--resume: {run_dir} was started with a different config (hash {ckpt['config_hash']} != {chash}); "
                f"resume with the same task, preset and --set values, or start a new run"
            )
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        state = RunState(**ckpt["state"])
        set_rng_state(ckpt["rng"])
    ddp_model = dist.wrap(model, dev)

    if dist.is_main():
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run_dir / "config.json", {"config": config, "backend": backend, "config_hash": chash})
    seq_tokens = task.seq_len * (2 if task.pair else 1)
    info = f"{config['task']} / {backend} / preset {config['preset']} on {dev}"
    if dist.is_main():
        console.print(
            f"[bold]lra run[/] {info}: {sum(p.numel() for p in model.parameters()):,} parameters -> {run_dir}"
        )
        if resume:
            console.print(f"resuming at step {state.step} of {t['steps']}")

    def checkpoint() -> None:
        if dist.is_main():
            save_checkpoint(
                ckpt_path,
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "state": state.__dict__,
                    "rng": rng_state(),
                    "config_hash": chash,
                    "backend": backend,
                },
            )

    model.train()
    world = dist.world_size()
    window_start, window_steps = time.perf_counter(), 0
    loss_sum = torch.zeros((), device=dev)
    correct_sum = torch.zeros((), device=dev)
    seen = 0
    stats = {"loss": float("nan"), "acc": float("nan"), "sps": 0.0, "tps": 0.0}
    steps_this_call = 0
    last_time = time.perf_counter()
    ckpt_every = t["checkpoint_every"] or t["eval_every"]
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    columns = TextColumn("{task.fields[stats]}")
    with make_progress(columns, disable=not dist.is_main()) as progress:
        bar = progress.add_task("train", total=t["steps"], completed=state.step, stats="")
        while state.step < t["steps"]:
            if stop_after is not None and steps_this_call >= stop_after:
                return {"stopped_at": state.step, "run_dir": str(run_dir)}
            idx = batch_indices(state.step, len(train_split), t["batch_size"], t["seed"], dist.rank(), world)
            tokens, labels = to_batch(train_split, idx, dev)
            for group in optimizer.param_groups:
                group["lr"] = t["lr"] * factor(state.step + 1)
            with _autocast(dev, amp):
                logits = ddp_model(tokens)
            loss = F.cross_entropy(logits.float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if t["grad_clip"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
            optimizer.step()
            state.step += 1
            steps_this_call += 1
            window_steps += 1
            loss_sum += loss.detach()
            correct_sum += (logits.argmax(-1) == labels).sum()
            seen += len(labels)

            at_eval = state.step % t["eval_every"] == 0 or state.step == t["steps"]
            if state.step % t["log_every"] == 0 or at_eval or state.step % ckpt_every == 0:
                totals = dist.all_reduce_sum(torch.stack([loss_sum, correct_sum, loss_sum.new_tensor(float(seen))]))
                mean_loss = totals[0].item() / (window_steps * world)
                if not math.isfinite(mean_loss):
                    raise NonFiniteLossError(
                        f"the training loss became {mean_loss} between steps {state.step - window_steps + 1} and "
                        f"{state.step}; the last good checkpoint is {ckpt_path if ckpt_path.is_file() else 'none'}. "
                        f"Lower train.lr, raise train.warmup, set train.grad_clip, or try train.amp=none"
                    )
                now = time.perf_counter()
                dt = now - window_start
                # the first window holds compilation and warm-up: keep it out of the throughput figure
                if state.step > window_steps or t["steps"] <= window_steps:
                    state.step_time += dt
                    state.timed_steps += window_steps
                sps = window_steps / dt if dt > 0 else 0.0
                stats.update(
                    loss=mean_loss,
                    acc=totals[1].item() / max(totals[2].item(), 1),
                    sps=sps,
                    tps=sps * t["batch_size"] * seq_tokens,
                )
                mem = f" mem {torch.cuda.max_memory_allocated(dev) / 2**20:,.0f}MB" if dev.type == "cuda" else ""
                progress.update(
                    bar,
                    completed=state.step,
                    stats=f"loss {stats['loss']:.3f} acc {stats['acc']:.3f} {stats['sps']:.2f} step/s "
                    f"{stats['tps']:,.0f} tok/s{mem}",
                )
                loss_sum.zero_()
                correct_sum.zero_()
                seen, window_steps = 0, 0
                state.train_time += now - last_time
                last_time = now
                window_start = time.perf_counter()

            if at_eval:
                val = evaluate(ddp_model, val_split, t["batch_size"], dev, amp, t["eval_batches"])
                now = time.perf_counter()
                state.train_time += now - last_time
                last_time = now
                entry = {"step": state.step, "train_loss": stats["loss"], "train_acc": stats["acc"]}
                entry.update({"val_loss": val["loss"], "val_acc": val["acc"], "time": round(state.train_time, 3)})
                state.history.append(entry)
                for thr in t["acc_thresholds"]:
                    if val["acc"] >= thr and str(thr) not in state.thresholds:
                        state.thresholds[str(thr)] = round(state.train_time, 3)
                if on_eval is not None:
                    on_eval(state.step, model)
                if val["acc"] > state.best_val_acc:
                    state.best_val_acc, state.best_step = val["acc"], state.step
                    if dist.is_main():
                        save_checkpoint(run_dir / BEST, {"model": model.state_dict(), "step": state.step})
                if dist.is_main():
                    with atomic_open(run_dir / "metrics.jsonl", "w") as f:
                        f.writelines(json.dumps(h) + "\n" for h in state.history)
                    progress.console.print(
                        f"step {state.step}: val loss {val['loss']:.4f} acc {val['acc']:.4f} "
                        f"(best {state.best_val_acc:.4f} at {state.best_step})"
                    )
                window_start = time.perf_counter()
            if state.step % ckpt_every == 0 or state.step == t["steps"]:
                checkpoint()

    dist.barrier()  # rank 0 has written the final checkpoints
    best = load_checkpoint(run_dir / BEST, map_location=dev) if (run_dir / BEST).is_file() else None
    if best is not None:
        model.load_state_dict(best["model"])
    test = evaluate(ddp_model, test_split, t["batch_size"], dev, amp)
    steps_per_s = state.timed_steps / state.step_time if state.step_time > 0 else 0.0
    metrics = {
        "test_acc": test["acc"],
        "test_loss": test["loss"],
        "val_acc": state.best_val_acc,
        "best_step": state.best_step,
        "steps_per_s": steps_per_s,
        "tokens_per_s": steps_per_s * t["batch_size"] * seq_tokens,
        "peak_mem_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None,
        "train_time_s": state.train_time,
        "time_to_acc_s": dict(state.thresholds),
        "majority_acc": _majority(test_split.labels),
    }
    summary = {
        "kind": "run",
        "task": config["task"],
        "backend": backend,
        "preset": config["preset"],
        "steps": state.step,
        "seq_len": task.seq_len,
        "world_size": world,
        "metrics": metrics,
        "config": config,
        "config_hash": chash,
        "run_dir": str(run_dir),
        **environment(dev),
    }
    if dist.is_main():
        write_json(run_dir / "summary.json", summary)
        if save_result:
            summary["record"] = str(save_record(summary, results_store))
        console.print(
            f"[bold green]done[/] {info}: test acc {test['acc']:.4f} (val {state.best_val_acc:.4f}, majority "
            f"{metrics['majority_acc']:.4f}), {steps_per_s:.2f} steps/s, {metrics['tokens_per_s']:,.0f} tokens/s"
        )
    return summary


def _majority(labels) -> float:
    import numpy as np

    counts = np.bincount(np.asarray(labels).astype(np.int64))
    return float(counts.max() / max(counts.sum(), 1))


def _read_init_state(path: str) -> dict[str, torch.Tensor]:
    p = Path(path)
    if p.is_dir():
        p = p / BEST if (p / BEST).is_file() else p / LAST
    ckpt = load_checkpoint(p)
    return ckpt["model"]
