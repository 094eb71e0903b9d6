"""The golden value: naive attention in fp64 on the same (rounded) inputs, under the backend's own mask if it has
one, evaluated a block of query rows at a time so that long sequences fit in memory."""

from __future__ import annotations

import torch

from attention_impls.masking import masked_attention
from attention_impls.registry import build_attention


def chunk_rows(batch: int, heads: int, seq_k: int, device: torch.device) -> int:
    """Query rows per block: fp64 scores, probabilities and a temporary within a budget (2 GiB CUDA, 256 MiB CPU)."""
    budget = 2 * 2**30 if device.type == "cuda" else 256 * 2**20
    per_row = batch * heads * seq_k * 8 * 3
    return max(1, budget // per_row)


@torch.no_grad()
def naive_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dtype: torch.dtype,
    scale: float | None = None,
    token_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Naive attention of q, k, v cast to `dtype`; with `dtype=torch.float64` this is the golden value.

    Without a token mask it runs the registered `naive` backend itself; with one, the one masked softmax of
    attention_impls.masking (the same sequence of operations over the allowed pairs). Query rows are independent in
    attention, so evaluating them in blocks changes nothing but memory.
    """
    b, h, nq, d = q.shape
    nk = k.shape[2]
    scale = d**-0.5 if scale is None else scale
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    naive = build_attention("naive", heads=h, head_dim=d, seq_len=nk, options={"scale": scale}).eval()
    rows = chunk_rows(b, h, nk, q.device)
    parts = []
    for start in range(0, nq, rows):
        stop = min(start + rows, nq)
        if token_mask is None:
            parts.append(naive(q[:, :, start:stop], k, v))
        else:
            parts.append(masked_attention(q[:, :, start:stop], k, v, token_mask[None, :, start:stop], scale))
    return torch.cat(parts, dim=2)
