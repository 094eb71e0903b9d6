"""`longformer`: Longformer (Beltagy et al. 2020) as a block layout on the block-sparse flash kernel
(`block_sparse_flash`).

Computes exact softmax attention over the pairs of a sliding window of 5 blocks (about +-256 tokens at block 128)
plus 1 global block. Source: the LRA repo's lra_benchmarks/models/longformer/longformer.py,
sliding_window_size=512 (so +-256).
"""

from __future__ import annotations

from attention_impls.block_sparse_flash import BlockSparseFlash
from attention_impls.registry import register_backend


@register_backend("longformer")
class LongformerBlocks(BlockSparseFlash):
    """Longformer (Beltagy et al. 2020) as blocks: a sliding window of 5 blocks (about +-256 tokens at block 128)
    plus 1 global block, on the block-sparse kernel.

    Differs from the token-level original: the window is block-quantised (each query sees its block and two blocks
    either side, so between 256 and 384 tokens to each side instead of exactly w/2), and global attention covers the
    whole first block (128 tokens, CLS included) instead of chosen single tokens. Source: the LRA repo's
    lra_benchmarks/models/longformer/longformer.py, sliding_window_size=512 (so +-256) and global_mask=None (no
    global tokens there: `layout: [{local: {width: 5}}]` drops the global block), attention dropout applied (as here).
    """

    default_layout = [{"local": {"width": 5}}, {"global": {"blocks": 1}}]
