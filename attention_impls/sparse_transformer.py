"""`sparse_transformer`: the Sparse Transformer's fixed pattern (Child et al. 2019) as a block layout on the
block-sparse flash kernel (`block_sparse_flash`).

Computes exact bidirectional softmax attention over the pairs of a 3-block local band plus every 4th key block column
(the summary columns). Source: the LRA repo's lra_benchmarks/models/sparse_transformer/sparse_attention.py,
Fixed1Pattern(block_size=128) and Fixed2Pattern(block_size=128, c=32).
"""

from __future__ import annotations

from attention_impls.block_sparse_flash import BlockSparseFlash
from attention_impls.registry import register_backend


@register_backend("sparse_transformer")
class SparseTransformerBlocks(BlockSparseFlash):
    """Sparse Transformer (Child et al. 2019, fixed pattern, bidirectional) as blocks: a 3-block local band plus every
    4th key block column (the summary columns), on the block-sparse kernel.

    Differs from the token-level original: the fixed pattern's "same chunk" attention becomes a sliding band of blocks,
    and its last-c-positions summary cells become whole summary blocks; no causal masking. Source: the LRA repo's
    lra_benchmarks/models/sparse_transformer/sparse_attention.py, Fixed1Pattern(block_size=128) (same block) and
    Fixed2Pattern(block_size=128, c=32) (the last 32 columns of every 128), attention dropout applied (as here); its
    _build_mask ANDs every fixed pattern with the lower triangle, so LRA's Sparse Transformer row is causal even on
    its bidirectional tasks.
    """

    default_layout = [{"local": {"width": 3}}, {"strided": {"stride": 4}}]
