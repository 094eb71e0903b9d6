"""`flex_block_sparse`: FlexAttention with a BlockMask of the same layouts as block_sparse_flash, the peer to beat.

The layout (attention_impls/layouts.py) becomes a BlockMask through BlockMask.from_kv_blocks at the layout's block
size, intersected with the key padding (full blocks skip the mask_mod; the block straddling a row's length is partial).
Compiled once per shape on CUDA; eager (forward only) on the CPU. Work is density x the dense FLOPs. No dropout
(capabilities.dropout is False). Exact softmax attention over the layout's pairs (capabilities.exact_on_mask).
"""

from __future__ import annotations

from typing import Any

import torch

from attention_impls.base import Capabilities
from attention_impls.flex import FlexAttention
from attention_impls.layouts import build_layout, layout_density, layout_token_mask, parse_layout
from attention_impls.registry import register_backend
from lra.core.numbers import ceil_div


@register_backend("flex_block_sparse")
class FlexBlockSparse(FlexAttention):
    """FlexAttention over a block layout. Options: `layout` (default butterfly), `block` (128), `seed`, `scale`."""

    capabilities = Capabilities(
        devices=("cuda",),
        dtypes=(torch.float16, torch.bfloat16, torch.float32),
        head_dims=(16, 32, 64, 128, 256),
        exact=False,
        exact_on_mask=True,
        dropout=False,
        notes="torch FlexAttention with a BlockMask layout",
    )

    def __init__(self, *args, layout: Any = None, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.layout_spec = parse_layout(layout if layout is not None else "butterfly")
        self.seed = int(seed)
        self._cache: dict[tuple[int, int, str], torch.Tensor] = {}

    def _layout(self, nq: int, nk: int, device: torch.device) -> torch.Tensor:
        key = (nq, nk, str(device))
        if key not in self._cache:
            qb, kb = ceil_div(nq, self.block), ceil_div(nk, self.block)
            self._cache[key] = build_layout(self.layout_spec, qb, kb, heads=self.heads, seed=self.seed).to(device)
        return self._cache[key]

    def token_mask(self, seq_q: int, seq_k: int) -> torch.Tensor:
        """The layout expanded to tokens: bool (heads or 1, seq_q, seq_k)."""
        return layout_token_mask(self._layout(seq_q, seq_k, torch.device("cpu")), self.block, seq_q, seq_k)

    def density(self, seq_len: int | None = None) -> float:
        n = self.seq_len if seq_len is None else seq_len
        return layout_density(self._layout(n, n, torch.device("cpu")))
