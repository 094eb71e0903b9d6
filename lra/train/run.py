"""A training run: one task, one attention backend, one resolved config -> a run directory and a summary.

`train()` steps a `Trainer` through the schedule with periodic validation, a best-validation checkpoint and a final
test on it. The full state is checkpointed atomically; `resume=True` continues at the same step with the same data
order (batches are a function of the step) and the same dropout draws (seeded per step), so an interrupted run ends
with the same result as an uninterrupted one. A non-finite loss stops the run and leaves the last good checkpoint.
With a `TimeBudget` (`--time-limit`) the run stops cleanly before the budget runs out, its full state saved
(lra.train.budget), and likewise when a signal asks (lra.core.signals.stop_on_terminate); the split hashes
recorded when it started are checked on resume (lra.train.datahash).
The summary is returned and written to the run directory; storing it as a result record is the caller's job
(`lra run`, the sweep), since the training layer sits below the results store.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attention_impls.registry import dropout_applied, dropout_notes, layout_notes
from lra.core.environment import device_name, environment
from lra.core.errors import NonFiniteLossError, RunSetupError
from lra.core.progress import console
from lra.core.records import run_record
from lra.model import load_init
from lra.train import distributed as dist
from lra.train import rundir
from lra.train.augment import dihedral, poses_for
from lra.train.budget import TimeBudget
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import RunConfig, config_hash
from lra.train.datahash import check_same_data, data_hashes
from lra.train.device import resolve_device
from lra.train.display import Throughput, Window, stats_text, train_progress
from lra.train.feed import Feed, TrainBatches, pack_length_for, place_split
from lra.train.gate import gate
from lra.train.objective import majority_token
from lra.train.pace import loop_pace
from lra.train.trainer import Trainer, build_trainer
from tasks import build_task
from tasks.base import SPLITS, Split, Task

PathLike = str | os.PathLike[str]
OnEval = Callable[[int, torch.nn.Module], None]


@dataclass
class RunState:
    """What a checkpoint carries besides the trainer's weights, optimizer state and step."""

    best_val_acc: float = -1.0
    best_step: int = 0
    train_time: float = 0.0  # wall-clock seconds spent training (evaluation included), summed over resumes
    step_time: float = 0.0  # seconds of training steps only (throughput; see display.Throughput)
    timed_steps: int = 0
    thresholds: dict[str, float] = field(default_factory=dict)  # "0.6" -> train_time when val acc first reached it
    history: list[dict[str, Any]] = field(default_factory=list)
    data_hashes: dict[str, str] = field(default_factory=dict)  # split -> datahash.split_digest, from the start
    sessions: list[dict[str, Any]] = field(default_factory=list)  # one per train() call: steps, seconds, device


def train(
    config: RunConfig,
    backend: str,
    *,
    out_dir: PathLike | None = None,
    runs_root: PathLike | None = None,
    device: str | None = None,
    resume: bool = False,
    data_dir: PathLike | None = None,
    stop_after: int | None = None,
    on_eval: OnEval | None = None,
    cpu_amp: bool = False,
    time_budget: TimeBudget | None = None,
    init_root: PathLike | None = None,
) -> dict[str, Any]:
    """Train and test `backend` on `config`'s task; returns the summary (also written to the run directory).

    `out_dir` names the run directory (default: a new one under `runs_root`, see `rundir`); `resume` continues
    `out_dir` or the newest unfinished run of the same task, backend, preset and seed. `stop_after` ends this call
    after that many steps as a kill would (tests of resume) and returns {"stopped_at", "run_dir"}. `on_eval(step,
    model)` is called at every evaluation (the numerics study snapshots weights there). `cpu_amp` applies train.amp
    on the CPU too. The run gate (lra.train.gate) is passed first, once, before anything is read or written.
    `time_budget`: stop cleanly before it runs out, saving the full state, and return {"stopped_at",
    "run_dir", "time_limit_s", "session"}; likewise, within `lra.core.signals.stop_on_terminate`, at the first
    logging point after a SIGTERM or SIGUSR1, with "stopped_by" (the signal's name) for "time_limit_s".
    `init_root`: where a relative train.init_from is read from (default: the working directory; a campaign names
    its state folder).
    """
    dev = resolve_device(device)
    config = config.for_backend(backend)
    gate(config, backend, dev, world_size=dist.world_size(), data_dir=data_dir)
    if not resume and out_dir is not None:
        rundir.check_unused(out_dir)
    where = {"out_dir": out_dir, "runs_root": runs_root}
    opts = {"where": where, "data_dir": data_dir, "dev": dev, "stop_after": stop_after, "on_eval": on_eval}
    opts |= {"time_budget": time_budget, "init_root": init_root}
    try:
        run_dir = None
        if resume:
            run_dir = rundir.on_main(rundir.find_resumable, config, backend, **where)
        return _train(config, backend, run_dir, **opts, cpu_amp=cpu_amp)
    finally:
        rundir.release_all()  # the run directory is ours (RunDir.hold) only while training it


def _train(
    config: RunConfig,
    backend: str,
    run_dir: rundir.RunDir | None,
    *,
    where: dict[str, Any],
    data_dir: PathLike | None,
    dev: torch.device,
    stop_after: int | None,
    on_eval: OnEval | None,
    cpu_amp: bool,
    time_budget: TimeBudget | None,
    init_root: PathLike | None,
) -> dict[str, Any]:
    """`train()` once the run directory to resume (or None: a new one) is known and owned."""
    started = time.perf_counter()
    resume = run_dir is not None
    task = build_task(config.task, data_dir=data_dir, **config.data)
    splits = {name: task.load(name) for name in SPLITS}
    pack = pack_length_for(splits.values(), task.seq_len) if config.model.pack_tokens else 0
    if pack:  # the N x N check at the packed length, now that the data gave it
        gate(config, backend, dev, world_size=dist.world_size(), data_dir=data_dir, pack_length=pack)
    trainer = build_trainer(config, task, backend, dev, cpu_amp=cpu_amp, pack_length=pack)
    feeds = place_splits(splits, task, dev, config.train.data_placement)
    chash = config_hash(config)
    hashes = data_hashes(splits)
    if run_dir is not None:
        state = _restore(trainer, run_dir, chash)
        check_same_data(state.data_hashes, hashes, run=str(run_dir.path), task=config.task)
        state.data_hashes = state.data_hashes or hashes
    else:
        state = RunState(data_hashes=hashes)
        _init_from(trainer.model, config.train.init_from, root=init_root, positions=config.train.init_positions)
        payload = {"config": config.to_dict(), "backend": backend, "config_hash": chash}
        payload |= {"world_size": dist.world_size(), "data_hashes": hashes}
        run_dir = rundir.on_main(rundir.create, config, backend, payload, **where)
    parts = {"task": task, "splits": splits, "feeds": feeds, "trainer": trainer, "run_dir": run_dir, "state": state}
    parts |= {"pack_length": pack}
    run = _Run(config, backend, **parts, on_eval=on_eval, time_budget=time_budget, started=started)
    run.announce(resume)
    try:
        if not run.loop(stop_after):
            stopped = {"stopped_at": trainer.global_step, "run_dir": str(run_dir.path)}
            if run.out_of_time:
                stopped |= {"time_limit_s": time_budget.limit_s, "session": run.session}
            elif run.stopped_by is not None:
                stopped |= {"stopped_by": run.stopped_by, "session": run.session}
            return stopped
    finally:
        run.batches.close()
    return run.finish()


def place_splits(splits: dict[str, Split], task: Task, device: torch.device, placement: str) -> dict[str, Feed]:
    """Each split's feed (train first: it has the first claim on device memory); see lra.train.feed."""
    shape = {"pair": task.pair, "vocab_size": task.vocab_size}
    return {name: place_split(split, device, placement=placement, **shape) for name, split in splits.items()}


def _restore(trainer: Trainer, run_dir: rundir.RunDir, chash: str) -> RunState:
    ckpt = load_checkpoint(run_dir.last, map_location=trainer.device)
    if ckpt["config_hash"] != chash:
        raise RunSetupError(
            f"--resume: {run_dir.path} was started with a different config (hash {ckpt['config_hash']} != {chash}); "
            f"resume with the same task, preset and --set values, or start a new run"
        )
    trainer.load_state_dict(ckpt)
    return RunState(**ckpt["state"])


def _init_from(
    model: torch.nn.Module, source: str | None, root: PathLike | None = None, positions: str = "upsample"
) -> None:
    """Start from another run's weights (train.init_from: a run directory or a checkpoint file; a relative path is
    read from `root` when given; `positions`: train.init_positions)."""
    if not source:
        return
    path = Path(root or ".") / source
    if path.is_dir():
        path = path / BEST if (path / BEST).is_file() else path / LAST
    state = load_checkpoint(path)["model"]
    pretrained = any(k.startswith("token_head.") for k in state) and getattr(model, "head", None) is not None
    adapted = load_init(model, state, positions=positions)
    if adapted and dist.is_main():
        how = "upsampled" if positions == "upsample" else "mirror-tiled"
        console.print(f"init_from {source}: {how} {', '.join(adapted)} on the 2-D grid")
    if pretrained and dist.is_main():
        console.print(f"init_from {source}: the encoder of a self-pretraining run; the classifier head starts fresh")


class _Run:
    """One call of `train()` in progress: the loop, logging, evaluation, checkpoints and the final test."""

    def __init__(
        self,
        config: RunConfig,
        backend: str,
        *,
        task: Task,
        splits: dict[str, Split],
        feeds: dict[str, Feed],
        trainer: Trainer,
        run_dir: rundir.RunDir,
        state: RunState,
        on_eval: OnEval | None,
        time_budget: TimeBudget | None = None,
        started: float | None = None,
        pack_length: int = 0,
    ) -> None:
        self.config, self.t, self.backend = config, config.train, backend
        self.pack_length = pack_length
        self.task, self.splits, self.feeds, self.trainer = task, splits, feeds, trainer
        where = {"rank": dist.rank(), "world": dist.world_size()}
        self.batches = TrainBatches(feeds["train"], batch_size=self.t.batch_size, seed=self.t.seed, **where)
        self.dir, self.state = run_dir, state
        self.on_eval = on_eval
        self.last = (math.nan, math.nan)  # the last window's mean loss and accuracy
        self.main = dist.is_main()
        self.seq_tokens = task.seq_len * (2 if task.pair else 1)
        self.info = f"{config.task} / {backend} / preset {config.preset} on {trainer.device}"
        self.clock = time.perf_counter()
        self.budget, self.out_of_time = time_budget, False
        self.stopped_by: str | None = None  # the signal that stopped the loop (lra.core.signals)
        self.session = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "from_step": trainer.global_step}
        self.session |= {"device": device_name(trainer.device), "world_size": dist.world_size()}
        self.started, self.train_time_at_start = started or self.clock, state.train_time

    def announce(self, resumed: bool) -> None:
        if not self.main:
            return
        params = sum(p.numel() for p in self.trainer.model.parameters())
        console.print(f"[bold]lra run[/] {self.info}: {params:,} parameters -> {self.dir.path}", highlight=False)
        on_device = [name for name, feed in self.feeds.items() if feed.resident]
        data = f"data on the device: {', '.join(on_device)}" if on_device else "data read on the host"
        console.print(f"compile: {self.trainer.loss.mode}; {data}", highlight=False)
        if self.pack_length:
            console.print(
                f"packed tokens: the encoder runs on each sequence's real tokens, {self.pack_length:,} slots of "
                f"{self.task.seq_len:,} (model.pack_tokens)",
                highlight=False,
            )
        model = self.trainer.model
        notes = dropout_notes(model) + layout_notes(model, self.pack_length or self.task.seq_len)
        for note in notes:
            console.print(f"note: {note}", highlight=False)
        if resumed:
            console.print(f"resuming at step {self.trainer.global_step} of {self.t.steps}")

    def _tick(self) -> None:
        """Add the wall-clock time since the last tick to the run's training time."""
        now = time.perf_counter()
        self.state.train_time += now - self.clock
        self.clock = now

    def loop(self, stop_after: int | None) -> bool:
        """Train to the last step (True), or stop after `stop_after` steps of this call, or when the time budget
        would not hold the next stretch (False; `out_of_time`, with the full state saved)."""
        t, trainer = self.t, self.trainer
        ckpt_every = t.checkpoint_every or t.eval_every
        window, timer = Window(trainer.device), Throughput(self.state)
        pace = loop_pace(self.budget, self.splits, self.t)
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)
        with train_progress(disable=not self.main) as progress:
            bar = progress.add_task("train", total=t.steps, completed=trainer.global_step, stats="")
            budget = t.steps if stop_after is None else stop_after
            while trainer.global_step < t.steps and budget > 0:
                batch = self.batches(trainer.global_step)
                window.add(trainer.step(self.posed(batch.tokens, trainer.global_step), batch.labels, batch.padded))
                budget -= 1
                step = trainer.global_step
                at_eval = step % t.eval_every == 0 or step == t.steps
                at_ckpt = step % ckpt_every == 0 or step == t.steps
                if not (step % t.log_every == 0 or at_eval or at_ckpt):
                    continue
                pace.window(window.steps)
                self.log(window, timer)
                progress.update(bar, completed=step, stats=stats_text(*self.last, timer.rate))
                if at_eval:
                    pace.timed(lambda: self.evaluate(progress.console), "evaluation")
                if at_ckpt:
                    pace.timed(self.checkpoint, "saved")
                reason = pace.stop_reason(step, ckpt_every) if step < t.steps else None
                if reason is not None:
                    self._stop(reason)
                    return False
                timer.restart()
                pace.restart()
        return trainer.global_step >= t.steps

    def posed(self, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """The step's training tokens, each image in its pose under train.augment=dihedral (lra.train.augment)."""
        if self.t.augment == "none":
            return tokens
        poses = poses_for(seed=self.t.seed, step=step, rank=dist.rank(), batch=tokens.shape[0], device=tokens.device)
        return dihedral(tokens, poses)

    def _stop(self, reason: str) -> None:
        """Close this session and save the full state (again, with the session) before leaving: on time (`reason`
        'time') or asked by a signal (its name)."""
        self.out_of_time = reason == "time"
        self.stopped_by = None if self.out_of_time else reason
        self._close_session()
        self.checkpoint()
        if not self.main:
            return
        if self.out_of_time:
            used = self.budget.elapsed()
            why = f"to keep within the time limit ({used:.0f} s of {self.budget.limit_s:.0f} s used)"
        else:
            why = f"as {reason} asked"
        console.print(
            f"[bold yellow]stopped[/] at step {self.trainer.global_step} of {self.t.steps} {why}; its full state is "
            f"in {self.dir.last}",
            highlight=False,
            soft_wrap=True,
        )

    def _close_session(self) -> None:
        """Add this call's session (steps, training and wall seconds) to the run's ledger, once."""
        if self.session.get("to_step") is not None:
            return
        self.session["to_step"] = self.trainer.global_step
        self.session["train_s"] = round(self.state.train_time - self.train_time_at_start, 3)
        self.session["wall_s"] = round(time.perf_counter() - self.started, 3)
        self.state.sessions.append(dict(self.session))

    def log(self, window: Window, timer: Throughput) -> None:
        """Close the logging window: mean loss and accuracy on all ranks; a non-finite loss stops the run."""
        step = self.trainer.global_step
        loss, acc, steps = window.collect()
        timer.close(steps, final=step == self.t.steps)
        if not math.isfinite(loss):
            last = self.dir.last if self.dir.last.is_file() else "none"
            raise NonFiniteLossError(
                f"the training loss became {loss} between steps {step - steps + 1} and {step}; the last good "
                f"checkpoint is {last}. Lower train.lr, raise train.warmup, set train.grad_clip, or try train.amp=none"
            )
        self.last = (loss, acc)
        self._tick()

    def evaluate(self, out) -> None:
        """Validate, record the history and thresholds, keep the best checkpoint."""
        step, state = self.trainer.global_step, self.state
        limit = self.t.eval_batches * self.t.batch_size  # eval_batches counts training batches
        val = self.trainer.evaluate(self.feeds["val"], limit=limit)
        self._tick()
        entry = {"step": step, "train_loss": self.last[0], "train_acc": self.last[1], "val_loss": val["loss"]}
        state.history.append({**entry, "val_acc": val["acc"], "time": round(state.train_time, 3)})
        for thr in self.t.acc_thresholds:
            if val["acc"] >= thr and str(thr) not in state.thresholds:
                state.thresholds[str(thr)] = round(state.train_time, 3)
        if self.on_eval is not None:
            self.on_eval(step, self.trainer.model)
        improved = val["acc"] > state.best_val_acc
        if improved:
            state.best_val_acc, state.best_step = val["acc"], step
        if not self.main:
            return
        if improved:
            self.dir.save(BEST, {"model": self.trainer.model.state_dict(), "step": step})
        self.dir.write_metrics(state.history)
        out.print(
            f"step {step}: val loss {val['loss']:.4f} acc {val['acc']:.4f} "
            f"(best {state.best_val_acc:.4f} at {state.best_step}){self._memory()}",
            highlight=False,
        )

    def _memory(self) -> str:
        dev = self.trainer.device
        return f", peak memory {torch.cuda.max_memory_allocated(dev) / 2**20:,.0f} MB" if dev.type == "cuda" else ""

    def checkpoint(self) -> None:
        if self.main:
            state = {**self.trainer.state_dict(), "state": asdict(self.state)}
            self.dir.save(LAST, {**state, "config_hash": config_hash(self.config), "backend": self.backend})

    def finish(self) -> dict[str, Any]:
        """Test the best checkpoint, write summary.json (rank 0) and return the summary."""
        dist.barrier()  # rank 0 has written the final checkpoints
        self._close_session()
        trainer = self.trainer
        if self.dir.best.is_file():
            trainer.model.load_state_dict(load_checkpoint(self.dir.best, map_location=trainer.device)["model"])
        test = trainer.evaluate(self.feeds["test"])
        summary = self.summary(test)
        if self.main:
            self.dir.write_summary(summary)
            m = summary["metrics"]
            what = "masked-token acc" if self.trainer.masked else "acc"  # train.objective=masked names tokens
            console.print(
                f"[bold green]done[/] {self.info}: test {what} {m['test_acc']:.4f} (val {m['val_acc']:.4f}, majority "
                f"{m['majority_acc']:.4f}), {m['steps_per_s']:.2f} steps/s, {m['tokens_per_s']:,.0f} tokens/s",
                highlight=False,
            )
        return summary

    def summary(self, test: dict[str, float]) -> dict[str, Any]:
        state, dev, t = self.state, self.trainer.device, self.t
        steps_per_s = Throughput(state).rate
        metrics = {
            "test_acc": test["acc"],
            "test_loss": test["loss"],
            "val_acc": state.best_val_acc,
            "best_step": state.best_step,
            "steps_per_s": steps_per_s,
            "tokens_per_s": steps_per_s * t.batch_size * self.seq_tokens,
            "peak_mem_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None,
            "train_time_s": state.train_time,
            "time_to_acc_s": dict(state.thresholds),
            "majority_acc": self.majority(),
        }
        if self.pack_length:
            metrics["pack_length"] = self.pack_length  # the encoder's width under model.pack_tokens
        return run_record(
            task=self.config.task,
            backend=self.backend,
            preset=self.config.preset,
            steps=self.trainer.global_step,
            seq_len=self.task.seq_len,
            world_size=dist.world_size(),
            metrics=metrics,
            config=self.config.to_dict(),
            config_hash=config_hash(self.config),
            compile=self.trainer.loss.effective(),
            attention_dropout_applied=dropout_applied(self.trainer.model),
            history=[{k: h[k] for k in ("step", "val_acc", "val_loss", "time")} for h in state.history],
            sessions=state.sessions,
            run_dir=str(self.dir.path),
            env=environment(dev),
            kind="pretrain" if self.trainer.masked else "run",
        )

    def majority(self) -> float:
        """What a constant guess scores on the test split: the commonest label, or (masked) the commonest token."""
        test = self.splits["test"]
        return majority_token(test.tokens) if self.trainer.masked else majority(test.labels)


def majority(labels: np.ndarray) -> float:
    """The accuracy of always predicting the most frequent label."""
    counts = np.bincount(np.asarray(labels).astype(np.int64))
    return float(counts.max() / max(counts.sum(), 1))
