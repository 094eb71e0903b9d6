"""`lra run ... --nproc N`: start N local processes through torch's elastic launcher (the engine behind torchrun)."""

from __future__ import annotations

import os


def strip_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = i + 1 < len(argv)
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


def launch_local(nproc: int, argv: list[str]) -> int:
    """Run `python -m lra <argv without --nproc>` in `nproc` processes on this machine (rendezvous on localhost)."""
    from torch.distributed.run import main as torchrun

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off: it can take a shared host's GPUs down
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torchrun(["--standalone", f"--nproc_per_node={nproc}", "-m", "lra", *strip_nproc(argv)])
    return 0
