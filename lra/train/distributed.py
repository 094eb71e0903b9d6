"""torch.distributed glue: rank/world from the launcher's environment, DDP wrapping, metric reduction.

Single-process runs go through the same calls, which then do nothing.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch
import torch.distributed as td


def is_initialized() -> bool:
    return td.is_available() and td.is_initialized()


def rank() -> int:
    return td.get_rank() if is_initialized() else 0


def world_size() -> int:
    return td.get_world_size() if is_initialized() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel around `model` when several processes run, else the model itself."""
    if world_size() == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def _all_reduce(t: torch.Tensor, op) -> torch.Tensor:
    """`t` reduced over all ranks (a copy; `t` itself is left alone); `t` for one process."""
    if world_size() > 1:
        t = t.clone()
        td.all_reduce(t, op=op)
    return t


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    return _all_reduce(t, td.ReduceOp.SUM)


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    return _all_reduce(t, td.ReduceOp.MAX)


def init_from_env(device: str | None = None) -> None:
    """Join the process group the launcher (torchrun, `lra run --nproc`) describes; nothing for one process.

    NCCL on CUDA, gloo on CPU.
    """
    if not is_worker_process() or is_initialized():
        return
    use_cuda = torch.cuda.is_available() and (device is None or not str(device).startswith("cpu"))
    if use_cuda:
        torch.cuda.set_device(local_rank())
    td.init_process_group(backend="nccl" if use_cuda else "gloo")


def shutdown() -> None:
    """Leave the process group together: a rank that tears its group down while another is still in a collective
    (e.g. after an early stop) can abort that process."""
    if is_initialized():
        td.barrier()
        td.destroy_process_group()


def exit_worker(code: int) -> NoReturn:
    """End a data-parallel worker process at once, its output flushed, without the interpreter's teardown.

    After DDP, gloo's worker threads outlive `destroy_process_group` (DDP keeps the group alive). A gloo thread that
    drops the last reference to a tensor while the interpreter finalizes needs the GIL, and Python 3.11 ends such a
    thread with pthread_exit, which C++ turns into std::terminate: SIGABRT, "terminate called without an active
    exception", now and then after a run that had finished and written everything. Leaving with `os._exit` skips
    that teardown (and atexit handlers: call this when nothing is left to write)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def is_worker_process() -> bool:
    """True in a process that a launcher started as one of several ranks (torchrun, `lra run --nproc`)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def broadcast_object(obj):
    """Rank 0's value of `obj` on every rank (e.g. a run directory named after the time)."""
    if world_size() == 1:
        return obj
    box = [obj]
    td.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if world_size() > 1:
        td.barrier()
