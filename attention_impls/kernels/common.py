"""Device helpers shared by every kernel of the family: masked tile loads, the dot, the inner loops' block walk, and
the dropout RNG.

Dropout keep-mask layout (a pure function of the RNG state, batch * heads + head, query row and key column, so the
forward, both backward kernels and `dropout_keep_mask` draw the same bits whatever their tile sizes): key column c
belongs to group g = c // 16; one Philox4x32-7 call per (query row, group) with key `seed` and counters
(g, row, batch * heads + head, offset) gives four 32-bit words r0..r3, and column 16 g + 4 a + b reads byte b (bits
8b .. 8b+7) of word a. The weight is kept when that byte is >= the 8-bit drop threshold (kernels/dropout.py), so
one Philox call decides 16 weights and all 128 bits are used. Seven rounds, not Random123's default ten: seven is the
fewest with which Salmon et al. (2011) found Philox4x32 to pass TestU01's BigCrush (ten is their safety margin), and
they cut the forward's time at head dim 8 with dropout by 5% on the H200 (docs/flash_kernel.md, v5);
tests/test_flash_dropout.py checks the keep rate and the independence of the decisions across keys, queries, heads,
calls and seeds.
"""

from __future__ import annotations

import triton
import triton.language as tl

GROUP = tl.constexpr(16)  # keys decided by one Philox call (4 words x 4 bytes)
PHILOX_ROUNDS = tl.constexpr(7)


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
def load_rng(Rng, DROPOUT: tl.constexpr):
    """(seed, offset) from the int64 state tensor; zeros (unused) without dropout."""
    seed = 0
    offset = 0
    if DROPOUT:
        seed = tl.load(Rng)
        offset = tl.load(Rng + 1)
    return seed, offset


@triton.jit
def program_start(Lengths, Rng, H, Nq, Nk, HAS_LENGTHS: tl.constexpr, PAD_QUERIES: tl.constexpr, DROPOUT: tl.constexpr):
    """Every kernel's prologue: (tile index, batch * heads + head, batch, head, query length, key length, RNG seed,
    RNG offset) of this program, for the grid (tiles, batch * heads). Lengths are the row's key length (clipped to
    Nk) and, with PAD_QUERIES, the same for the queries; otherwise Nq and Nk."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    kv_len = Nk
    q_len = Nq
    if HAS_LENGTHS:
        length = tl.load(Lengths + b)
        kv_len = tl.minimum(length, Nk)
        if PAD_QUERIES:
            q_len = tl.minimum(length, Nq)
    seed, offset = load_rng(Rng, DROPOUT)
    return pid, bh, b, h, q_len, kv_len, seed, offset


@triton.jit
def head_ptr(X, b, h, stride_b, stride_h):
    """X at (batch b, head h), in 64-bit offsets."""
    return X + b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h


@triton.jit
def load_rows(base, offs, stride, ok, offs_d, HEAD_DIM: tl.constexpr):
    """The [len(offs), BLOCK_D] tile of rows `offs` (row stride `stride`); rows not `ok` and padded columns read 0."""
    PAD_D: tl.constexpr = offs_d.shape[0] != HEAD_DIM
    ptrs = base + offs[:, None] * stride + offs_d[None, :]
    return load_tile(ptrs, ok[:, None], (offs_d < HEAD_DIM)[None, :], True, PAD_D)


@triton.jit
def store_rows(base, offs, stride, ok, offs_d, x, HEAD_DIM: tl.constexpr):
    """Store tile `x` (cast to base's dtype) into rows `offs` where `ok`, columns below HEAD_DIM."""
    ptrs = base + offs[:, None] * stride + offs_d[None, :]
    tl.store(ptrs, x.to(base.dtype.element_ty), mask=ok[:, None] & (offs_d < HEAD_DIM)[None, :])


@triton.jit
def visit_plan(
    List, h, pid, list_stride_h, list_stride_row, valid_len, own_start, own_len, BLOCK: tl.constexpr,
    SPARSE: tl.constexpr, MAX_LIST: tl.constexpr,
):  # fmt: skip
    """(list pointer, number of fully valid blocks, number of blocks with any valid position) of this program's walk:
    its row of the block list (block-sparse) or the range of blocks below `valid_len`. A program whose own block
    (starting at `own_start`) lies past `own_len` (padding, or past the end) visits nothing."""
    list_ptr = List
    if SPARSE:
        list_ptr = List + h * list_stride_h + pid * list_stride_row
    n_full, n_any = visit_bounds(list_ptr, valid_len, BLOCK, SPARSE, MAX_LIST)
    n_full = tl.where(own_start < own_len, n_full, 0)
    n_any = tl.where(own_start < own_len, n_any, 0)
    return list_ptr, n_full, n_any


@triton.jit
def list_prologue(list_ptr, lo, hi, SPARSE: tl.constexpr, LIST_IN_REGS: tl.constexpr, MAX_LIST: tl.constexpr):
    """State for `next_block` before a loop: (the first entry, prefetched; the whole padded list in registers)."""
    nxt = hi * 0
    entries = tl.zeros([MAX_LIST], tl.int32)
    if SPARSE:
        if LIST_IN_REGS:
            entries = tl.load(list_ptr + tl.arange(0, MAX_LIST))
        else:
            nxt = tl.load(list_ptr + lo, mask=lo < hi, other=0)
    return nxt, entries


@triton.jit
def next_block(list_ptr, i, hi, nxt, entries, SPARSE: tl.constexpr, LIST_IN_REGS: tl.constexpr, MAX_LIST: tl.constexpr):
    """(block index of step i, state for step i+1). A range visits block i. A short list (LIST_IN_REGS) is held in
    registers and entry i picked out of it, so the step's K/V addresses depend only on i and the pipeliner
    prefetches them; a long one is read one entry ahead (entry i+1 loads during step i). docs/flash_kernel.md, v2."""
    if SPARSE:
        if LIST_IN_REGS:
            blk = tl.sum(tl.where(tl.arange(0, MAX_LIST) == i, entries, 0), axis=0)
        else:
            blk = nxt
            nxt = tl.load(list_ptr + i + 1, mask=i + 1 < hi, other=0)
    else:
        blk = i
    return blk, nxt


@triton.jit
def walk_start(
    list_ptr,
    lo,
    hi,
    offs_d,
    BLOCK: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPARSE: tl.constexpr,
    LIST_IN_REGS: tl.constexpr,
    MAX_LIST: tl.constexpr,
):
    """Before an inner loop over blocks lo..hi-1: (the block's offsets 0..BLOCK-1, the head-dim mask, and the
    `next_block` state), the same for the forward's and both backward loops."""
    offs0 = tl.arange(0, BLOCK)
    d_ok = offs_d < HEAD_DIM
    nxt, entries = list_prologue(list_ptr, lo, hi, SPARSE, LIST_IN_REGS, MAX_LIST)
    return offs0, d_ok, nxt, entries


@triton.jit
def walk_step(
    list_ptr,
    i,
    hi,
    nxt,
    entries,
    offs0,
    valid_len,
    SPARSE: tl.constexpr,
    LIST_IN_REGS: tl.constexpr,
    MAX_LIST: tl.constexpr,
):
    """Step i of an inner loop: (first position of its block, the block's positions, which are below `valid_len`,
    the `next_block` state for step i+1)."""
    BLOCK: tl.constexpr = offs0.shape[0]
    blk, nxt = next_block(list_ptr, i, hi, nxt, entries, SPARSE, LIST_IN_REGS, MAX_LIST)
    start = blk * BLOCK
    offs = start + offs0
    return start, offs, offs < valid_len, nxt


@triton.jit
def load_cols(base, offs, stride, ok, offs_d, d_ok, MASK_ROWS: tl.constexpr, PAD_D: tl.constexpr):
    """The [BLOCK_D, len(offs)] tile of rows `offs` (row stride `stride`), transposed: the inner loops' K^T, V^T and
    Q^T. Masked as `load_tile` masks (rows not `ok` only with MASK_ROWS, padded columns only with PAD_D)."""
    return load_tile(base + offs[None, :] * stride + offs_d[:, None], ok[None, :], d_ok[:, None], MASK_ROWS, PAD_D)


@triton.jit
def load_block(base, offs, stride, ok, offs_d, d_ok, MASK_ROWS: tl.constexpr, PAD_D: tl.constexpr):
    """The [len(offs), BLOCK_D] tile of rows `offs`, masked as `load_cols` masks: the inner loops' V and dO."""
    return load_tile(base + offs[:, None] * stride + offs_d[None, :], ok[:, None], d_ok[None, :], MASK_ROWS, PAD_D)


@triton.jit
def visit_bounds(list_ptr, valid_len, BLOCK: tl.constexpr, SPARSE: tl.constexpr, MAX_LIST: tl.constexpr):
    """(number of fully valid blocks, number of blocks holding any valid position) among those to visit.

    For a range these are valid_len // BLOCK and cdiv(valid_len, BLOCK); for a sorted list, the counts of its entries
    below them (one vector load of the padded list).
    """
    n_full = valid_len // BLOCK
    n_any = (valid_len + BLOCK - 1) // BLOCK
    if SPARSE:
        entries = tl.load(list_ptr + tl.arange(0, MAX_LIST))
        n_full = tl.sum((entries < n_full).to(tl.int32), axis=0)
        n_any = tl.sum((entries < n_any).to(tl.int32), axis=0)
    return n_full, n_any


@triton.jit
def dropout_keep(seed, offset, bh, offs_m, start_n, threshold, BLOCK_N: tl.constexpr):
    """Keep-mask (True = kept) of query rows `offs_m` x keys start_n .. start_n + BLOCK_N - 1, shape
    [len(offs_m), BLOCK_N]; `start_n` is a multiple of 16 (tiles are powers of two >= 16)."""
    BLOCK_M: tl.constexpr = offs_m.shape[0]
    N_GROUPS: tl.constexpr = BLOCK_N // GROUP
    groups = start_n // GROUP + tl.arange(0, N_GROUPS)
    zero = offs_m[:, None] * 0 + groups[None, :] * 0
    c0 = (groups[None, :] + zero).to(tl.uint32)
    c1 = (offs_m[:, None] + zero).to(tl.uint32)
    c2 = (zero + bh).to(tl.uint32)
    c3 = (zero + (offset & 0xFFFFFFFF)).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3, PHILOX_ROUNDS)
    # [..., i, j] = word 2i + j, so that the flattened minor index is the word index a.
    words = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), [BLOCK_M, N_GROUPS * 4])
    # byte b >= threshold  <=>  (word & (0xFF << 8b)) >= threshold << 8b: two integer ops per decision, not three.
    shifts = (tl.arange(0, 4) * 8).to(tl.uint32)
    masks = (tl.full([4], 0xFF, tl.uint32) << shifts)[None, None, :]
    levels = ((tl.zeros([4], tl.uint32) + threshold) << shifts)[None, None, :]
    return tl.reshape((words[:, :, None] & masks) >= levels, [BLOCK_M, BLOCK_N])


@triton.jit
def _keep_mask_kernel(Out, Rng, Nq, Nk, threshold, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The keep-mask (int8) of one (batch, head) tile, as the attention kernels draw it."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    bh = tl.program_id(2)
    seed, offset = load_rng(Rng, True)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = dropout_keep(seed, offset, bh, rows, pid_n * BLOCK_N, threshold, BLOCK_N)
    ptrs = Out + bh.to(tl.int64) * Nq * Nk + rows[:, None].to(tl.int64) * Nk + cols[None, :]
    tl.store(ptrs, keep.to(tl.int8), mask=(rows[:, None] < Nq) & (cols[None, :] < Nk))
