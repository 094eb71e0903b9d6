"""Forward kernel: tiled attention with an online softmax; writes the output and the row logsumexp (base 2).

One program owns BLOCK_M query rows of one (batch, head) and walks key blocks, keeping a running row maximum `m`, a
running sum `l` of exp2(s - m) and an unnormalised accumulator. Which key blocks it walks is the family's one switch:

- SPARSE=False: the contiguous range of key blocks below the row's key length (fully padded blocks are never visited);
- SPARSE=True: this query block's list of key-block indices (block-sparse layouts), sorted, padded with a huge index.

Either way the blocks split into those fully inside the key length (no column mask) and at most one straddling it
(masked), so the common case pays for no masking.
"""

from __future__ import annotations

import triton
import triton.language as tl

from attention_impls.kernels.common import (
    dropout_keep,
    head_ptr,
    load_block,
    load_cols,
    load_rows,
    mma,
    program_start,
    store_rows,
    visit_plan,
    walk_start,
    walk_step,
)


@triton.jit
def fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    K_base,
    V_base,
    stride_kn,
    stride_vn,
    list_ptr,
    lo,
    hi,
    offs_m,
    offs_d,
    kv_len,
    qk_scale,
    seed,
    offset,
    threshold,
    bh,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPARSE: tl.constexpr,
    MASK_KV: tl.constexpr,
    DROPOUT: tl.constexpr,
    PREC: tl.constexpr,
    UPCAST: tl.constexpr,
    LIST_IN_REGS: tl.constexpr,
    MAX_LIST: tl.constexpr,
):
    """Fold key blocks lo..hi-1 (of the range or list) into the running (acc, l, m) of one query block."""
    PAD_D: tl.constexpr = q.shape[1] != HEAD_DIM
    offs_n0, d_ok, nxt, entries = walk_start(
        list_ptr, lo, hi, offs_d, BLOCK_N, HEAD_DIM, SPARSE, LIST_IN_REGS, MAX_LIST
    )
    for i in range(lo, hi):
        start_n, offs_n, n_ok, nxt = walk_step(
            list_ptr, i, hi, nxt, entries, offs_n0, kv_len, SPARSE, LIST_IN_REGS, MAX_LIST
        )
        kT = load_cols(K_base, offs_n, stride_kn, n_ok, offs_d, d_ok, MASK_KV, PAD_D)
        s = mma(q, kT, tl.zeros([q.shape[0], BLOCK_N], tl.float32), PREC, UPCAST)
        if MASK_KV:
            s = tl.where(n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if DROPOUT:
            p = tl.where(dropout_keep(seed, offset, bh, offs_m, start_n, threshold, BLOCK_N), p, 0.0)
        v = load_block(V_base, offs_n, stride_vn, n_ok, offs_d, d_ok, MASK_KV, PAD_D)
        acc = mma(p.to(v.dtype), v, acc, PREC, UPCAST)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd(
    Q,
    K,
    V,
    Out,
    Lse,
    Lengths,
    KvList,
    Rng,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_on,
    list_stride_h,
    list_stride_row,
    H,
    Nq,
    Nk,
    qk_scale,
    threshold,
    keep_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    PAD_QUERIES: tl.constexpr,
    SPARSE: tl.constexpr,
    MAX_LIST: tl.constexpr,
    DROPOUT: tl.constexpr,
    PREC: tl.constexpr,
    UPCAST: tl.constexpr,
    LIST_IN_REGS: tl.constexpr,
):
    """One program: BLOCK_M query rows of one (batch, head). Grid (cdiv(Nq, BLOCK_M), batch * heads)."""
    pid_m, bh, b, h, q_len, kv_len, seed, offset = program_start(
        Lengths, Rng, H, Nq, Nk, HAS_LENGTHS, PAD_QUERIES, DROPOUT
    )
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < Nq
    k_base = head_ptr(K, b, h, stride_kb, stride_kh)
    v_base = head_ptr(V, b, h, stride_vb, stride_vh)
    q = load_rows(head_ptr(Q, b, h, stride_qb, stride_qh), offs_m, stride_qn, m_ok, offs_d, HEAD_DIM)
    # A block whose rows are all padding (or past Nq) visits nothing.
    list_ptr, n_full, n_any = visit_plan(
        KvList, h, pid_m, list_stride_h, list_stride_row, kv_len, start_m, q_len, BLOCK_N, SPARSE, MAX_LIST
    )

    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    acc, l_i, m_i = fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, list_ptr, 0, n_full, offs_m, offs_d, kv_len,
        qk_scale, seed, offset, threshold, bh, HEAD_DIM, BLOCK_N, SPARSE, False, DROPOUT, PREC, UPCAST,
        LIST_IN_REGS, MAX_LIST,
    )  # fmt: skip
    acc, l_i, m_i = fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, list_ptr, n_full, n_any, offs_m, offs_d, kv_len,
        qk_scale, seed, offset, threshold, bh, HEAD_DIM, BLOCK_N, SPARSE, True, DROPOUT, PREC, UPCAST,
        LIST_IN_REGS, MAX_LIST,
    )  # fmt: skip

    # Padded query rows (NaN or inf in them included) and rows that attend to nothing are selected to zero.
    valid = (offs_m < q_len) & (l_i > 0)
    inv_l = 1.0 / tl.where(valid, l_i, 1.0)
    if DROPOUT:
        inv_l = inv_l * keep_scale
    out = tl.where(valid[:, None], acc * inv_l[:, None], 0.0)
    # Rows that attend to nothing get lse = +inf: the backward's exp2(s - lse) is then exactly 0 for them.
    lse = tl.where(valid, m_i + tl.math.log2(tl.where(valid, l_i, 1.0)), float("inf"))
    store_rows(head_ptr(Out, b, h, stride_ob, stride_oh), offs_m, stride_on, m_ok, offs_d, out, HEAD_DIM)
    tl.store(Lse + bh.to(tl.int64) * Nq + offs_m, lse, mask=m_ok)
