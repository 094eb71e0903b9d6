"""This project's Triton attention kernels: one family for dense and block-sparse FlashAttention.

Laid out like the Triton fused-attention tutorial: `common` (tile loads, the dot, the dropout RNG), `fwd` (the forward
and its inner loop), `bwd` (the row-sum pre-pass, dK/dV, dQ), `function` (launches, the custom ops and their autograd
formula), `tiles` (tile sizes, tuned defaults, the supported head dims), `lists` (block lists for block-sparse
layouts), `dropout` (the quantised dropout probability and the RNG state).

Importing this package does not import triton; `function` does (import it where the kernel is about to run).
"""

from attention_impls.kernels.dropout import draw_rng_state, effective_dropout, quantize_dropout, rng_state
from attention_impls.kernels.lists import LayoutLists
from attention_impls.kernels.tiles import (
    MAX_HEAD_DIM,
    REGISTER_OPTIONS,
    SUPPORTED_HEAD_DIMS,
    TILE_OPTIONS,
    Tiles,
    default_tiles,
)

__all__ = [
    "MAX_HEAD_DIM",
    "REGISTER_OPTIONS",
    "SUPPORTED_HEAD_DIMS",
    "TILE_OPTIONS",
    "LayoutLists",
    "Tiles",
    "default_tiles",
    "draw_rng_state",
    "effective_dropout",
    "quantize_dropout",
    "rng_state",
]
