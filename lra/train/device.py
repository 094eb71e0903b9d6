"""Where training runs and in which precision: the device from a `--device` value, the autocast dtype from train.amp
and whether its steps scale the loss."""

from __future__ import annotations

import torch

from lra.core.errors import RunSetupError
from lra.train import distributed as dist

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device for `device` ('cpu', 'cuda', 'cuda:N', or None/'auto' for cuda when available).

    A bare 'cuda' means this process's local GPU (each rank of a multi-GPU run takes its own). A device that is not
    there is a RunSetupError naming what is, before anything is built or written.
    """
    if device is None or device == "auto":
        return torch.device("cuda", dist.local_rank()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise RunSetupError(f"device {device!r} is not a device; use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise RunSetupError(f"device {device!r} is not supported; use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise RunSetupError(f"device {device!r}: CUDA is not available on this machine; use cpu")
    if dev.index is None:
        dev = torch.device("cuda", dist.local_rank())
    if dev.index >= torch.cuda.device_count():
        raise RunSetupError(f"device {device!r}: this machine has {torch.cuda.device_count()} GPU(s)")
    return dev


def autocast_dtype(device: torch.device, amp: str, *, cpu_amp: bool = False) -> torch.dtype | None:
    """The autocast dtype of a training step, None for full precision.

    train.amp (bf16, fp16, none) applies on CUDA; on the CPU only with `cpu_amp` (the numerics study compares
    precisions there), since CPU autocast is slow and `lra run` on a laptop should train in fp32.
    """
    if amp not in AMP_DTYPES:
        raise RunSetupError(f"train.amp must be one of {', '.join(AMP_DTYPES)}, got {amp!r}")
    if device.type == "cuda" or (device.type == "cpu" and cpu_amp):
        return AMP_DTYPES[amp]
    return None


def wants_loss_scaling(device: torch.device, autocast: torch.dtype | None) -> bool:
    """Whether a step scales its loss by default: fp16 autocast on CUDA, whose small gradients underflow fp16 unscaled.

    The CPU's fp16 autocast (the numerics study's control) keeps its unscaled steps unless asked (Trainer's
    `loss_scaling`); bf16 has fp32's exponent range and needs no scaling."""
    return autocast is torch.float16 and device.type == "cuda"
