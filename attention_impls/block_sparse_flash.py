"""`block_sparse_flash`: the flash kernels visiting only the kept blocks of a block layout (attention_impls/layouts).

Computes softmax over the allowed keys only: query i attends key j when layout[h, i // block, j // block] is kept and
j is below the row's length; rows with no allowed key (and padded query rows) are zero. The kernels are flash's,
switched to list mode: per query tile the sorted list of key tiles to visit (forward, dQ), per key tile the list of
query tiles that visit it (dK/dV), built once per (layout, sequence lengths, tiles) and cached. Work is density x the
dense FLOPs; memory O(N) plus the lists. Same dtypes, head dims, padding, dropout and bitwise-deterministic backward
as `flash`.

Where the kernel cannot run (no CUDA and TRITON_INTERPRET unset) or with `fallback: dense_masked`, the same function
is computed in PyTorch with the layout expanded to an N x N token mask (O(N^2) memory; for CPU runs and tests).

Subclasses with their own default layout and block are the LRA paper's structured-sparse baselines, one module each:
`bigbird.py`, `longformer.py`, `sparse_transformer.py`; each says how its block version differs from the original.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from attention_impls.base import Capabilities
from attention_impls.flash import FlashAttention
from attention_impls.kernels import SUPPORTED_HEAD_DIMS, LayoutLists
from attention_impls.layouts import build_layout, layout_density, layout_token_mask, parse_layout
from attention_impls.masking import lengths_from_mask, masked_attention, zero_padded_inputs, zero_padded_outputs
from attention_impls.registry import register_backend
from lra.core.environment import triton_interpreting
from lra.core.numbers import ceil_div

_FALLBACKS = ("auto", "kernel", "dense_masked")


def dense_masked_attention(q, k, v, key_padding_mask, token_mask, scale: float, dropout_p: float) -> torch.Tensor:
    """softmax over allowed pairs (token_mask (heads or 1, Nq, Nk) and key padding), materialised; empty rows zero."""
    q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
    allowed = token_mask[None].to(q.device)
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    out = masked_attention(q, k, v, allowed, scale, dropout_p)
    return zero_padded_outputs(out, key_padding_mask)


@register_backend("block_sparse_flash")
class BlockSparseFlash(FlashAttention):
    """Block-sparse FlashAttention (own Triton kernels) over a layout of kept blocks.

    Options: `layout` (pattern spec, default butterfly; see attention_impls/layouts.py), `block` (layout block size
    in tokens, default 128; kernel tiles are clamped to it), `seed` (the random pattern's default seed),
    `fallback` ('auto': kernel on CUDA or under TRITON_INTERPRET=1, dense-masked PyTorch otherwise; 'kernel';
    'dense_masked'), and every `flash` option (scale, tiles, allow_tf32, compact_padding). With `compact_padding` the
    layout addresses the packed positions (real tokens first), as FlashAttention v1's FlashBlocksparseAttention
    does after `unpad_input`: the pairs that attend then depend on where the padding was.
    """

    capabilities = Capabilities(
        devices=("cuda", "cpu"),
        dtypes=(torch.float16, torch.bfloat16, torch.float32),
        head_dims=SUPPORTED_HEAD_DIMS,
        exact=False,
        exact_on_mask=True,
        notes="own Triton kernel, kept blocks only; CPU: dense-masked fallback",
    )
    has_fallback = True
    dense_tiles = False  # one set of tiles with and without dropout: `prepare` builds the kernel lists for one
    default_layout: Any = "butterfly"
    default_block: int = 128

    def __init__(
        self,
        *args,
        layout: Any = None,
        block: int | None = None,
        seed: int = 0,
        fallback: str = "auto",
        **flash_options,
    ):
        super().__init__(*args, **flash_options)
        self.layout_spec = parse_layout(layout if layout is not None else self.default_layout)
        self.block = int(block if block is not None else self.default_block)
        if self.block < 16 or self.block & (self.block - 1):
            raise ValueError(f"block must be a power of two >= 16 (the kernel's tiles divide it), got {self.block}")
        self.seed = int(seed)
        if fallback not in _FALLBACKS:
            raise ValueError(f"fallback must be one of {_FALLBACKS}, got {fallback!r}")
        self.fallback = fallback
        self._lists_cache: dict[tuple[int, int], LayoutLists] = {}
        layout_heads = self.layout(self.seq_len, self.seq_len).shape[0]
        if layout_heads not in (1, self.heads):
            raise ValueError(f"layout has {layout_heads} heads; need 1 or {self.heads}")

    def layout(self, nq: int, nk: int) -> torch.Tensor:
        """The bool layout (heads or 1, cdiv(nq, block), cdiv(nk, block)) for these sequence lengths."""
        return self.layout_lists(nq, nk).layout

    def layout_lists(self, nq: int, nk: int) -> LayoutLists:
        key = (nq, nk)
        if key not in self._lists_cache:
            qb, kb = ceil_div(nq, self.block), ceil_div(nk, self.block)
            lay = build_layout(self.layout_spec, qb, kb, heads=self.heads, seed=self.seed)
            self._lists_cache[key] = LayoutLists(lay, self.block)
        return self._lists_cache[key]

    def density(self, seq_len: int | None = None) -> float:
        """Fraction of kept blocks at this sequence length (default: the model's)."""
        n = self.seq_len if seq_len is None else seq_len
        return layout_density(self.layout(n, n))

    def _lists(self, q, k):
        return self.layout_lists(q.shape[2], k.shape[2])

    def prepare(self, dtype: torch.dtype, device: torch.device) -> None:
        """The kernels' block lists at the model's length, built now: building them takes a data-dependent width,
        which torch.compile cannot trace (a compiled step would fall back to eager)."""
        if self.runs_kernel(device):
            from attention_impls.kernels.function import kernel_lists  # imports triton only when it runs

            lists = self.layout_lists(self.seq_len, self.seq_len)
            kernel_lists(lists, self.tiles(dtype, device.type), self.seq_len, self.seq_len, device)

    def token_mask(self, seq_q: int, seq_k: int) -> torch.Tensor:
        """The layout expanded to tokens: bool (heads or 1, seq_q, seq_k)."""
        return layout_token_mask(self.layout(seq_q, seq_k), self.block, seq_q, seq_k)

    def tiles(self, dtype: torch.dtype, device_type: str, *, dropout: bool = False):
        """Flash's tiles clamped to the layout block (the kernel's tiles must divide it)."""
        t = super().tiles(dtype, device_type, dropout=dropout)
        return replace(
            t, **{f: min(getattr(t, f), self.block) for f in ("block_m", "block_n", "bwd_block_m", "bwd_block_n")}
        )

    def runs_kernel(self, device: torch.device) -> bool:
        if self.fallback == "kernel":
            return True
        if self.fallback == "dense_masked":
            return False
        return device.type == "cuda" or triton_interpreting()

    def attend(self, q, k, v, key_padding_mask):
        if self.runs_kernel(q.device):
            return super().attend(q, k, v, key_padding_mask)
        if key_padding_mask is not None:
            lengths_from_mask(key_padding_mask)  # same contract as the kernel: right-padded masks only
        token_mask = self.token_mask(q.shape[2], k.shape[2])
        p = self.effective_dropout if self.training else 0.0  # the kernels' quantised p, on either path
        return dense_masked_attention(q, k, v, key_padding_mask, token_mask, self.scale, p)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, layout={self.layout_spec.describe()}, block={self.block}"
