"""Independent fp64 reference attention for tests: written from the definition, one (batch, head) at a time; torch's
OneCycleLR as the reference of the onecycle schedule; and the seed every random test draws from."""

from __future__ import annotations

import math
import os

import torch

# Every random test draws from this seed, so a run is repeatable; set LRA_TEST_SEED to run the suite on other draws.
TEST_SEED = int(os.environ.get("LRA_TEST_SEED", "0"))


def generator(offset: int = 0) -> torch.Generator:
    """A CPU generator seeded with TEST_SEED + offset (tests that draw several independent streams vary offset)."""
    return torch.Generator().manual_seed(TEST_SEED + offset)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    token_mask: torch.Tensor | None = None,
    dropout_keep: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """softmax(q k^T * scale) v in fp64 with the interface's padding rules.

    `token_mask` (heads or 1, Nq, Nk) bool: extra allowed-pairs mask (block-sparse layouts, bands).
    `dropout_keep` (B, H, Nq, Nk) bool: kept attention probabilities, scaled by 1/(1-p).
    Rows with no allowed key, and padded query rows in self-attention, are zero.
    """
    q, k, v = q.double(), k.double(), v.double()
    b, h, nq, d = q.shape
    nk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(b, h, nq, v.shape[-1], dtype=torch.float64, device=q.device)
    for bi in range(b):
        for hi in range(h):
            s = (q[bi, hi] @ k[bi, hi].T) * scale
            allowed = torch.ones(nq, nk, dtype=torch.bool, device=q.device)
            if key_padding_mask is not None:
                allowed &= key_padding_mask[bi][None, :]
            if token_mask is not None:
                allowed &= token_mask[hi if token_mask.shape[0] > 1 else 0]
            s = s.masked_fill(~allowed, float("-inf"))
            row_ok = allowed.any(dim=1)
            p = torch.zeros_like(s)
            p[row_ok] = torch.softmax(s[row_ok], dim=-1)
            if dropout_keep is not None:
                p = p * dropout_keep[bi, hi].double() / (1.0 - dropout_p)
            o = p @ v[bi, hi]
            if key_padding_mask is not None and nq == nk:
                o = torch.where(key_padding_mask[bi][:, None], o, 0.0)
            out[bi, hi] = o
    return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64 (0 when both are zero)."""
    num = (out.double() - ref.double()).norm().item()
    den = ref.double().norm().item()
    return num / den if den > 0 else num


def right_padded_mask(lengths: list[int], n: int, device: str = "cpu") -> torch.Tensor:
    """A bool (batch, n) mask with lengths[i] real tokens on the left of row i."""
    return torch.arange(n, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]


def onecycle_reference(lr: float, warmup: int, steps: int, beta2: float = 0.999) -> list[tuple[float, float]]:
    """(lr, beta1) of each 1-based step 1..steps under torch.optim.lr_scheduler.OneCycleLR as Xiong et al.'s
    run_tasks.py builds it (linear annealing, pct_start = warmup / steps, defaults otherwise): read from a dummy
    AdamW's group before each optimizer.step() / scheduler.step() pair, i.e. at torch's step_num = step - 1."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=lr, betas=(0.9, beta2), eps=1e-6)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, pct_start=warmup / steps, anneal_strategy="linear", total_steps=steps
    )
    out = []
    for _ in range(steps):
        group = optimizer.param_groups[0]
        out.append((group["lr"], group["betas"][0]))
        param.grad = torch.ones_like(param)
        optimizer.step()
        scheduler.step()
    return out
