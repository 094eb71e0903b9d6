"""The compiled training step: forward, loss and (through AOTAutograd) backward as one torch.compile graph.

`train.compile` picks the mode:

- `none`: eager PyTorch.
- `default`: torch.compile (inductor) of the model with the loss, so LayerNorm, dropout, residuals, GELU and the
  cross-entropy fuse around the attention kernels (the Triton kernels are torch.library custom ops); the backward
  graph is compiled too.
- `max`: `default` plus CUDA-graph capture of the forward and backward graphs (inductor's CUDA graph trees), so a
  step is a few graph launches instead of hundreds of kernel launches. CUDA only; on the CPU it is `default`.
- `auto` (the config default): `none` on the CPU, AUTO_CUDA on CUDA.

Every mode is exact: the same loss and gradients as eager up to float rounding. Inductor draws random numbers with
eager's ops (`fallback_random`), so dropout masks are the eager masks of the same seed, and a resumed compiled run
repeats an uninterrupted one. One measured exception: on CUDA, compiled `naive` is 2.3e-4 (relative, fp32) off eager's
loss at the first step and drifts from there (tests/test_compiled_gpu.py, strict xfails); its run is valid
training, not eager's trajectory.

Shapes are static (`dynamic=False`): a training step and an evaluation batch each compile once per padding pattern.
A backend that cannot be compiled (a graph break under `fullgraph=True`, a compiler error) prints one line and the
step runs eagerly from then on.

LRA_COMPILER names another torch.compile backend (`aot_eager` in the CPU tests, where inductor compiles slowly).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attention_impls.base import AttentionBackend
from lra.core.errors import RunSetupError
from lra.train import distributed as dist

MODES = ("auto", "none", "default", "max")
AUTO_CUDA = "max"  # the fastest exact mode on CUDA (measure with `lra bench train --compile none,default,max`)


def resolve_mode(mode: str, device: torch.device) -> str:
    """The mode `mode` means on `device`: auto -> none (CPU) or AUTO_CUDA; max -> default on the CPU."""
    if mode not in MODES:
        raise RunSetupError(f"train.compile must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "auto":
        return AUTO_CUDA if device.type == "cuda" else "none"
    if mode == "max" and device.type != "cuda":
        return "default"  # CUDA graphs need CUDA
    return mode


def compile_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "this could not be compiled" (not a bug in the eager model)."""
    import torch._dynamo.exc as dynamo_exc

    return (dynamo_exc.TorchDynamoException,)


class LossModel(nn.Module):
    """What a step computes: logits under autocast, then the fp32 cross-entropy and the correct predictions.

    `reduction="mean"` (training) gives the mean loss and the correct count; "none" (evaluation) the per-example
    loss and correctness, so a caller can leave out the rows that only pad a batch to its compiled shape.
    """

    def __init__(self, net: nn.Module, *, device_type: str, autocast: torch.dtype | None) -> None:
        super().__init__()
        self.net = net
        self.device_type, self.autocast = device_type, autocast

    def forward(
        self, tokens: torch.Tensor, labels: torch.Tensor, padded: Sequence[bool] | None, reduction: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cast = contextlib.nullcontext() if self.autocast is None else torch.autocast(self.device_type, self.autocast)
        with cast:
            logits = self.net(tokens, padded)
        loss = F.cross_entropy(logits.float(), labels, reduction=reduction)
        hits = logits.argmax(-1) == labels
        return loss, hits.sum() if reduction == "mean" else hits


def _prepare_attention(loss_model: LossModel, device: torch.device) -> None:
    """Let every attention module build its per-shape constants eagerly, for the dtype its inputs will have."""
    dtype = loss_model.autocast or torch.float32
    for module in loss_model.modules():
        if isinstance(module, AttentionBackend):
            module.prepare(dtype, device)


class CompiledLoss:
    """`LossModel` called compiled (or eagerly for mode none, or after a compile failure), DDP-wrapped under a
    launcher. DDP wraps the compiled module (DDP itself cannot be traced into one graph); its all-reduce hooks fire
    as the compiled backward produces the gradients."""

    def __init__(self, loss_model: LossModel, mode: str, *, device: torch.device, name: str) -> None:
        self.eager, self.device = loss_model, device
        self.mode = mode
        self.name = name  # the attention backend, for the fallback message
        self.fallback: str | None = None  # why the step fell back to eager
        self.compiled = mode != "none"
        if self.compiled:
            _prepare_attention(loss_model, device)
        self.fn = dist.wrap(self._compile(loss_model, mode) if self.compiled else loss_model, device)

    @staticmethod
    def _compile(loss_model: LossModel, mode: str) -> nn.Module:
        torch._dynamo.reset()  # this trainer owns the process's compiled code (no stale graphs, no recompile limit)
        backend = os.environ.get("LRA_COMPILER", "inductor")
        options = None
        if backend == "inductor":
            options = {"fallback_random": True, "triton.cudagraphs": mode == "max"}
        return torch.compile(loss_model, backend=backend, options=options, fullgraph=True, dynamic=False)

    @property
    def cudagraphs(self) -> bool:
        return self.compiled and self.mode == "max"

    def effective(self) -> dict[str, str | None]:
        """The mode the steps take now (none after a fallback) and the fallback's reason, for records."""
        return {"mode": self.mode if self.compiled else "none", "requested": self.mode, "fallback": self.fallback}

    def __call__(self, tokens, labels, padded, reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's graph outputs are consumed
        return self.fn(tokens, labels, padded, reduction)

    def fall_back(self, err: BaseException) -> None:
        """Run eagerly from now on, saying why in one line (every rank fails alike, so every rank re-wraps)."""
        from lra.core.progress import console

        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        self.fallback = f"{type(err).__name__}: {first}"[:200]
        self.compiled = False
        self.fn = dist.wrap(self.eager, self.device)
        if dist.is_main():
            console.print(
                f"[yellow]train.compile={self.mode}[/]: {self.name} cannot be compiled ({self.fallback}); "
                f"training eagerly (set train.compile=none to skip the attempt)",
                highlight=False,
                soft_wrap=True,
            )

    def after_oom(self) -> None:
        """Compile afresh after an out-of-memory error, where CUDA graphs are on: an OOM inside a graph tree's warm-up
        or recording leaves its bookkeeping inconsistent, and the next recording fails an internal assertion
        (`len(node.tensor_weakrefs) == len(node.stack_traces)`, seen on an H100 when evaluation ran out of memory
        beside four other runs). The graphs are recorded again on the next calls; eager and plain compiled steps
        need nothing."""
        if self.cudagraphs:
            self.fn = dist.wrap(self._compile(self.eager, self.mode), self.device)  # _compile resets the graph trees

    def keep(self, t: torch.Tensor) -> torch.Tensor:
        """An output the caller may hold past the next step (the next replay overwrites a CUDA graph's outputs)."""
        return t.detach().clone() if self.cudagraphs else t.detach()
