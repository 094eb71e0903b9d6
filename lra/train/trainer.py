"""The one training step: `lra run`, `lra bench train` and the numerics study all train through `Trainer.step()`.

A `Trainer` owns the model (DDP-wrapped under a launcher), AdamW with weight-decay groups, the learning-rate
schedule (beta1's too under onecycle), autocast, loss scaling (fp16 on CUDA), gradient clipping and the step counter.
Dropout draws from a torch RNG seeded at every step from (seed, rank, step), so data-parallel ranks draw different
masks and a resumed run draws the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attention_impls.registry import dropout_applied
from lra.core.errors import RunSetupError, is_oom
from lra.core.progress import console
from lra.model import build_model, padding_flags
from lra.train import distributed as dist
from lra.train.compiled import CompiledLoss, LossModel, compile_errors, resolve_mode
from lra.train.config import RunConfig
from lra.train.device import autocast_dtype, wants_loss_scaling
from lra.train.feed import Feed, HostSplit
from lra.train.objective import EVAL_SEED, MaskedLossModel
from lra.train.schedules import beta1_at, lr_factor
from lra.train.settings import TrainSettings
from tasks.base import Split, Task

EVAL_BATCH_FACTOR = 4  # train.eval_batch_size null: this many training batches per evaluation batch


@dataclass
class StepStats:
    """What one step trained on: mean loss and correct count (0-d tensors on the device: reading them syncs)."""

    loss: torch.Tensor
    correct: torch.Tensor
    examples: int


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: matrices decay; biases, norms and position tables (named 'pos') do not; frozen
    parameters are left out."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 and "pos" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def freeze_positions(model: torch.nn.Module) -> None:
    """train.freeze_positions: the learned position tables keep the values they start with. On Path-X the table is
    1.05 M of the model's 1.14 M weights, one vector per pixel: a ready channel for memorising training images."""
    tables = [p for name, p in model.named_parameters() if name.rsplit(".", 1)[-1] == "pos"]
    if not tables:
        raise RunSetupError(
            "train.freeze_positions=true freezes learned positions, and this model has none (model.pos_emb is not "
            "learned: its positions are fixed already); leave it false"
        )
    for p in tables:
        p.requires_grad_(False)


def step_seed(seed: int, rank: int, step: int) -> int:
    """The torch seed of training step `step` (0-based) on `rank`: distinct per rank, the same on every resume."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1, np.uint64)[0] >> 1)


class Trainer:
    """Model, optimizer, schedule, autocast (`autocast`: a dtype, or None for full precision), clipping, step count.

    `train` is the config's `train:` section (TrainSettings). The step counter `global_step` counts optimizer steps
    taken; the learning rate of the next step is lr * schedule(global_step + 1) (schedules are 1-based as in the LRA
    code), and under onecycle its beta1 is beta1_at(global_step + 1) (train.betas[0] is then ignored), so a resumed
    run needs no scheduler state. `compile_mode` is a resolved train.compile mode (lra.train.compiled); `name` the
    attention backend, for messages. `loss_scaling` (None: `wants_loss_scaling`) steps through a
    torch.amp.GradScaler of the device's type: the loss is scaled before backward, gradients unscaled before
    clipping, and a step with inf/nan gradients is skipped by the optimizer but still counted, for the schedule too
    (as Xiong et al.'s run_tasks.py).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        train: TrainSettings,
        *,
        device: torch.device,
        autocast: torch.dtype | None,
        compile_mode: str = "none",
        name: str = "model",
        loss_scaling: bool | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.autocast = autocast
        self.base_lr = train.lr
        self.grad_clip = train.grad_clip
        self.seed = train.seed
        self.eval_batch_size = train.eval_batch_size or EVAL_BATCH_FACTOR * train.batch_size
        schedule = {"warmup": train.warmup, "total_steps": train.steps}
        self.factor = lr_factor(train.schedule, **schedule)
        self.beta1 = beta1_at(train.schedule, **schedule)
        self.fused = {"fused": True} if device.type == "cuda" else {}  # one kernel for the whole AdamW update
        if train.freeze_positions:
            freeze_positions(model)
        self.optimizer = torch.optim.AdamW(
            decay_groups(model, train.weight_decay),
            lr=train.lr,
            betas=tuple(train.betas),
            eps=train.eps,
            **self.fused,
        )
        self.masked = train.objective == "masked"
        if self.masked:
            loss_model = MaskedLossModel(model, rate=train.mask_rate, device_type=device.type, autocast=autocast)
        else:
            loss_model = LossModel(model, device_type=device.type, autocast=autocast)
        self.loss = CompiledLoss(loss_model, compile_mode, device=device, name=name)
        if loss_scaling is None:
            loss_scaling = wants_loss_scaling(device, autocast)
        self.scaler = torch.amp.GradScaler(device.type) if loss_scaling else None
        self.global_step = 0

    def step(self, tokens: torch.Tensor, labels: torch.Tensor, padded: Sequence[bool] | None = None) -> StepStats:
        """One optimizer step on a batch: schedule, forward and loss under autocast, (scaled) backward, clip, AdamW.

        `padded` (per document: does any sequence have padding; see lra.model.padding_flags) is found from the
        tokens when not given, which waits for the device.
        """
        if padded is None:
            padded = padding_flags(tokens, pair=tokens.dim() == 3)
        self._set_schedule(self.global_step + 1)
        self.model.train()
        try:
            loss, correct = self._forward_backward(tokens, labels, padded)
        except compile_errors() as e:  # the compiled step cannot be built for this backend: eager from now on
            self._fall_back(e)
            loss, correct = self._forward_backward(tokens, labels, padded)
        self._update()
        self.global_step += 1  # a step the scaler skipped counts too: the schedule moves on, as in the LRA code
        return StepStats(self.loss.keep(loss), self.loss.keep(correct), len(labels))

    def _update(self) -> None:
        """Clip and take the AdamW step; with loss scaling, unscale before clipping and skip inf/nan gradients."""
        if self.grad_clip:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def _set_schedule(self, step: int) -> None:
        """Each group's lr (and, under onecycle, beta1) for 1-based `step`."""
        lr = self.base_lr * self.factor(step)
        beta1 = self.beta1(step) if self.beta1 is not None else None
        for group in self.optimizer.param_groups:
            group["lr"] = lr
            if beta1 is not None:
                group["betas"] = (beta1, group["betas"][1])

    def _forward_backward(self, tokens, labels, padded) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(step_seed(self.seed, dist.rank(), self.global_step))  # a retry draws the same dropout
        self.optimizer.zero_grad(set_to_none=True)
        loss, correct = self.loss(tokens, labels, tuple(padded), "mean")
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        return loss, correct

    @torch.no_grad()
    def evaluate(self, split: Split | Feed, *, limit: int = 0) -> dict[str, float]:
        """Mean loss and accuracy over `split` (its first `limit` examples when limit > 0), all ranks together.

        Batches of `eval_batch_size` (the last one padded to that shape with a repeated example that is left out of
        the sums, so each batch size compiles once); the figures do not depend on it beyond float rounding. Out of
        memory, the evaluation starts again at half the batch (with CUDA graphs, from freshly compiled code).
        """
        feed = split if not isinstance(split, Split) else HostSplit(split, self.device, pair=split.tokens.ndim == 3)
        while True:
            try:
                return self._evaluate(feed, limit)
            except compile_errors() as e:
                self._fall_back(e)
            except Exception as e:
                if not is_oom(e) or self.eval_batch_size <= 1:
                    raise
                self.eval_batch_size //= 2
                self.loss.after_oom()
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                console.print(f"evaluation ran out of memory; evaluating in batches of {self.eval_batch_size}")

    def _fall_back(self, err: BaseException) -> None:
        """Train and evaluate eagerly after `err` from the compiler; `err` itself when already eager."""
        if not self.loss.compiled:
            raise err
        self.loss.fall_back(err)

    def _evaluate(self, feed: Feed, limit: int) -> dict[str, float]:
        self.model.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, count
        n = min(len(feed), limit) if limit else len(feed)
        width = min(self.eval_batch_size, n)
        for start in range(dist.rank() * width, n, width * dist.world_size()):
            stop = min(start + width, n)
            b = feed.batch(np.arange(start, stop), pad_to=width)
            if self.masked:  # every evaluation hides the same tokens of each batch
                torch.manual_seed(EVAL_SEED + start)
            losses, hits = self.loss(b.tokens, b.labels, b.padded, "none")
            totals[0] += losses[: stop - start].double().sum()
            totals[1] += hits[: stop - start].sum()
            totals[2] += stop - start
        totals = dist.all_reduce_sum(totals)
        self.model.train()
        count = max(totals[2].item(), 1.0)
        return {"loss": totals[0].item() / count, "acc": totals[1].item() / count, "count": int(totals[2].item())}

    def state_dict(self) -> dict[str, Any]:
        """Weights, optimizer state, step count and, with loss scaling, the scaler's (what a checkpoint needs to
        continue exactly)."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.global_step}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The state of `state_dict()`; one without a scaler's (written before loss scaling) starts a fresh one."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # a checkpoint from another device keeps this device's kernel
            group["fused"] = self.fused.get("fused")
        self.global_step = int(state["step"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def dropout_field(model: torch.nn.Module) -> dict[str, bool]:
    """A record's {"attention_dropout_applied": bool} when the run asked for attention dropout (p > 0): False where
    its backend applies none, as its reference code does (AttentionBackend.dropout_note); {} when none was asked."""
    applied = dropout_applied(model)
    return {} if applied is None else {"attention_dropout_applied": applied}


def build_trainer(
    config: RunConfig,
    task: Task,
    backend: str,
    device: torch.device,
    *,
    cpu_amp: bool = False,
    pack_length: int = 0,
) -> Trainer:
    """The trainer for a resolved config, a task's shape and an attention backend.

    The initial weights are a function of train.seed alone, so every rank of a data-parallel run builds the same
    model; `cpu_amp` makes train.amp apply on the CPU too; `pack_length`: model.pack_tokens' packed width, from the
    data the trainer will see (lra.train.feed.pack_length_for).
    """
    t = config.train
    torch.manual_seed(t.seed)
    shape = dict(vocab_size=task.vocab_size, seq_len=task.seq_len, num_classes=task.num_classes, pair=task.pair)
    shape |= {"pack_length": pack_length}
    model = build_model(config, backend, **shape).to(device)
    autocast = autocast_dtype(device, t.amp, cpu_amp=cpu_amp)
    mode = resolve_mode(t.compile, device)
    return Trainer(model, t, device=device, autocast=autocast, compile_mode=mode, name=backend)
