"""Device helpers shared by every kernel of the family: masked tile loads, the dot, and the dropout RNG.

The dropout keep-mask is a pure function of (seed, batch*heads + head, query row, key column): Philox on those four
counters, so the forward, both backward kernels and the test helper `dropout_keep_mask` draw the same bits whatever
their tile sizes.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_tile(ptrs, row_ok, d_ok, MASK_ROWS: tl.constexpr, PAD_D: tl.constexpr):
    """Load a tile; `row_ok`/`d_ok` are already broadcast to the tile's orientation. Masked lanes read 0."""
    # Branches on constexprs (resolved at compile time), written out rather than as conditional expressions.
    if MASK_ROWS:
        if PAD_D:  # noqa: SIM108
            x = tl.load(ptrs, mask=row_ok & d_ok, other=0.0)
        else:
            x = tl.load(ptrs, mask=row_ok, other=0.0)
    else:
        if PAD_D:  # noqa: SIM108
            x = tl.load(ptrs, mask=d_ok, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def mma(a, b, acc, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b. UPCAST: the CPU interpreter multiplies bf16 wrongly, so it gets fp32 copies of the same values."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc, input_precision=PREC)


@triton.jit
def dropout_keep(seed, bh, rows, cols, dropout_p):
    """Keep-mask (True = kept) for the broadcast of `rows` and `cols` (one is a column, the other a row vector)."""
    zero = rows * 0 + cols * 0
    c0 = (cols + zero).to(tl.uint32)
    c1 = (rows + zero).to(tl.uint32)
    c2 = (zero + bh).to(tl.uint32)
    c3 = zero.to(tl.uint32)
    r0, _, _, _ = tl.philox(seed, c0, c1, c2, c3)
    return tl.uint_to_uniform_float(r0) >= dropout_p


@triton.jit
def _keep_mask_kernel(Out, seed, Nq, Nk, dropout_p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    bh = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = dropout_keep(seed, bh, rows[:, None], cols[None, :], dropout_p)
    ptrs = Out + bh.to(tl.int64) * Nq * Nk + rows[:, None].to(tl.int64) * Nk + cols[None, :]
    tl.store(ptrs, keep.to(tl.int8), mask=(rows[:, None] < Nq) & (cols[None, :] < Nk))
