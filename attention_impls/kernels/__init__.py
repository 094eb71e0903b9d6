"""This project's Triton attention kernels: one family for dense and block-sparse FlashAttention.

Laid out like the Triton fused-attention tutorial: `common` (tile loads, the dot, the dropout RNG), `fwd` (the forward
and its inner loop), `bwd` (the row-sum pre-pass, dK/dV, dQ), `function` (launches and the autograd Function),
`tiles` (tile sizes and tuned defaults), `lists` (block lists for block-sparse layouts).

Importing this package does not import triton; `function` does (import it where the kernel is about to run).
"""

from attention_impls.kernels.lists import LayoutLists
from attention_impls.kernels.tiles import TILE_OPTIONS, Tiles, default_tiles

__all__ = ["TILE_OPTIONS", "LayoutLists", "Tiles", "default_tiles"]
