"""The one gate of a run: everything about the attention backend and the process layout that can refuse a run is
decided here, once, before any worker process starts or any data is read.

`gate()` resolves the backend name (a misspelling names the closest), its capabilities on the device (device type,
Triton's availability or CPU interpreter, head dim), its attention dropout (applied, skipped as its reference code
does, or refused), the key-padding masks the task's data needs, the split of the global batch over the ranks, and
whether a backend that builds the N x N scores can hold them. It raises one ConfigError or RunSetupError saying what
to change; what passes is a `RunPlan` that the trainer trusts. `lra run --nproc N` calls it in the launching process,
so a refused run prints one line and no worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attention_impls.base import Capabilities
from attention_impls.registry import BACKENDS, mask_refusal, scores_too_big, why_cannot_run
from lra.core.errors import RunSetupError
from lra.train.augment import check_augment
from lra.train.batches import rank_batch
from lra.train.config import RunConfig
from lra.train.objective import check_objective
from tasks.registry import TASKS, build_task


@dataclass(frozen=True)
class RunPlan:
    """What the gate resolved: the backend and its capabilities, the attention head width, the processes and each
    one's share of the batch, the task's sequence length, and the attention dropout the backend applies."""

    backend: str
    capabilities: Capabilities
    head_dim: int
    world_size: int
    rank_batch: int
    seq_len: int
    attention_dropout: float


def gate(
    config: RunConfig,
    backend: str,
    device: str | torch.device,
    *,
    world_size: int = 1,
    data_dir=None,
    pack_length: int | None = None,
) -> RunPlan:
    """The plan of `config` trained with `backend` on `device` in `world_size` processes, or the one reason it
    cannot run (a ConfigError or RunSetupError that says what would).

    Under model.pack_tokens the attention's length is the pack length, which only the data tells: the N x N check
    waits for it (`pack_length`, given once the data is read), and padding inside a sequence never reaches the
    backend (packing gathers it out)."""
    caps = BACKENDS.get(backend).capabilities  # an unknown name fails here, naming the closest
    m = config.model
    task_class = TASKS.get(config.task)
    check_augment(config.train.augment, config.task, task_class.pose_invariant)
    check_objective(config.train.objective, config.task, task_class.pair)
    per_rank = rank_batch(config.train.batch_size, world_size)
    reason = why_cannot_run(backend, device, None, m.resolved_head_dim, dropout=m.attention_dropout)
    pads_inside = task_class.pads_inside(config.data) and not m.pack_tokens
    reason = reason or mask_refusal(backend, pads_inside, config.options_of(backend))
    seq_len = build_task(config.task, data_dir=data_dir, **config.data).seq_len  # no data is read
    lower = "train.batch_size or data.max_length"
    shape = {"batch": max(1, per_rank), "heads": m.heads, "seq_len": pack_length or seq_len}
    if not m.pack_tokens or pack_length:
        reason = reason or scores_too_big(backend, **shape, device=device, lower=lower)
    if reason:
        raise RunSetupError(reason)
    applied = m.attention_dropout if caps.dropout else 0.0
    return RunPlan(backend, caps, m.resolved_head_dim, world_size, per_rank, seq_len, applied)
