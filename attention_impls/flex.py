"""`flex`: torch's FlexAttention (torch.nn.attention.flex_attention), dense, as the peer a user would pick instead.

On CUDA the flex_attention call is compiled (torch.compile, dynamic=False: one compiled kernel per input shape, kept
by dynamo's cache); on the CPU it runs eagerly (forward only: torch has no CPU backward for it). Key padding becomes a
BlockMask built directly from the per-row lengths (BlockMask.from_kv_blocks, no N x N mask is ever materialised):
key blocks wholly inside a row's length are "full" (no mask_mod call), the one straddling it is partial with
mask_mod `kv_idx < length[b]`, and blocks past it are skipped. Rows with no key and padded query rows are zeroed
afterwards. No attention dropout (FlexAttention has none: capabilities.dropout is False, so a run asking for it is
refused up front). Cost: 4*N^2*D FLOPs forward, O(N) memory.
"""

from __future__ import annotations

import torch

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import lengths_from_mask, zero_padded_inputs, zero_padded_outputs
from attention_impls.registry import register_backend
from lra.core.numbers import ceil_div

_COMPILED = None
_RECOMPILE_LIMIT = 64  # a benchmark sweep compiles one kernel per shape; dynamo's default (8) would fall back to eager


def flex_function(device_type: str):
    """flex_attention, compiled once (per shape, by dynamo) on CUDA; the eager function elsewhere."""
    global _COMPILED
    from torch.nn.attention.flex_attention import flex_attention

    if device_type != "cuda":
        return flex_attention
    if _COMPILED is None:
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, _RECOMPILE_LIMIT)
        _COMPILED = torch.compile(flex_attention, dynamic=False)
    return _COMPILED


def flex_block_mask(
    lengths: torch.Tensor | None,
    batch: int,
    nq: int,
    nk: int,
    block: int,
    layout: torch.Tensor | None = None,
):
    """A BlockMask for right-padded key lengths (batch,) and an optional bool layout (heads or 1, q_blocks, k_blocks).

    The mask_mod is exact on its own (length, and layout block membership), so FlexAttention's eager path, which
    applies it to every pair, agrees with the compiled one, which applies it to partial blocks only.
    """
    from torch.nn.attention.flex_attention import BlockMask

    device = lengths.device if lengths is not None else (layout.device if layout is not None else "cpu")
    qb, kb = ceil_div(nq, block), ceil_div(nk, block)
    if lengths is None:
        lengths = torch.full((batch,), nk, dtype=torch.int32, device=device)
    lengths = lengths.to(torch.int32)
    starts = torch.arange(kb, device=device) * block
    full = ((starts + block)[None, :] <= lengths[:, None])[:, None, None, :]  # (B, 1, 1, KB)
    some = (starts[None, :] < lengths[:, None])[:, None, None, :]
    if layout is None:
        full = full.expand(batch, 1, qb, kb)
        some = some.expand(batch, 1, qb, kb)
    else:
        lay = layout.to(device=device, dtype=torch.bool)[None, :, :qb, :kb]
        full, some = full & lay, some & lay
    partial = some & ~full

    def as_lists(mask: torch.Tensor):
        idx = torch.arange(kb, device=device, dtype=torch.int32)
        key = torch.where(mask, idx, idx + kb)
        return mask.sum(-1).to(torch.int32), (key.sort(dim=-1).values % kb).to(torch.int32).contiguous()

    p_num, p_idx = as_lists(partial)
    f_num, f_idx = as_lists(full)
    lay_t = None if layout is None else layout.to(device=device, dtype=torch.bool)
    lay_heads = 0 if lay_t is None else lay_t.shape[0]

    def mask_mod(b, h, q_idx, kv_idx):
        ok = kv_idx < lengths[b]
        if lay_t is not None:
            hh = h if lay_heads > 1 else h * 0
            ok = ok & lay_t[hh, q_idx // block, kv_idx // block]
        return ok

    return BlockMask.from_kv_blocks(p_num, p_idx, f_num, f_idx, BLOCK_SIZE=block, mask_mod=mask_mod,
                                    seq_lengths=(nq, nk))  # fmt: skip


@register_backend("flex")
class FlexAttention(AttentionBackend):
    """torch FlexAttention, dense (compiled on CUDA). Options: `scale`, `block` (BlockMask block size, default 128).

    CPU: forward only (torch has no CPU backward for FlexAttention), so it is declared CUDA-only.
    """

    capabilities = Capabilities(
        devices=("cuda",),
        dtypes=(torch.float16, torch.bfloat16, torch.float32),
        head_dims=(16, 32, 64, 128, 256),
        dropout=False,
        notes="torch FlexAttention; compiled per shape; no dropout",
    )

    def __init__(self, *args, block: int = 128, **kwargs):
        super().__init__(*args, **kwargs)
        self.block = int(block)

    def _layout(self, nq: int, nk: int, device: torch.device) -> torch.Tensor | None:
        return None

    def forward(self, q, k, v, key_padding_mask=None):
        batch, _, nq, _ = q.shape
        nk = k.shape[2]
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        lengths = lengths_from_mask(key_padding_mask) if key_padding_mask is not None else None
        layout = self._layout(nq, nk, q.device)
        block_mask = None
        if lengths is not None or layout is not None:
            block_mask = flex_block_mask(lengths, batch, nq, nk, self.block, layout)
        out = flex_function(q.device.type)(q, k, v, block_mask=block_mask, scale=self.scale)
        return zero_padded_outputs(out, key_padding_mask)
