"""Backward kernels: recompute P from the stored logsumexp.

- `bwd_preprocess`: delta_i = sum_d dO_id * O_id (fp32), the row term of the softmax gradient.
- `bwd_dkdv`: one program per key block accumulates dK and dV over the query blocks that attend to it (a contiguous
  range below the query length, or this key block's list of query blocks for block-sparse layouts). With ATOMIC_DQ
  it also adds each step's dS K into an fp32 dQ buffer by atomics (FlashAttention-2's one-pass backward: P and the
  dropout mask are drawn once per backward instead of twice; the order of the additions, hence dQ's last bits, varies).
- `bwd_dq`: one program per query block accumulates dQ over its key blocks (the forward's visit, range or list). The
  two-pass backward (the default) uses no atomics, so every gradient is bitwise reproducible.

With P = exp2(s * scale * log2(e) - lse), dropout keep-mask Z and c = 1/(1 - p) (p the quantised drop probability):
dV = (Z * c * P)^T dO, dP = dO V^T, dS = P * (Z * c * dP - delta), dQ = scale * dS K, dK = scale * dS^T Q.
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
def bwd_preprocess(
    O,
    DO,
    Delta,
    stride_ob,
    stride_oh,
    stride_on,
    stride_dob,
    stride_doh,
    stride_don,
    H,
    Nq,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """delta = rowsum(dO * O) for BLOCK_M rows of one (batch, head)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(
        O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :],
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    do = tl.load(
        DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh + offs_m[:, None] * stride_don + offs_d[None, :],
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    tl.store(Delta + bh.to(tl.int64) * Nq + offs_m, tl.sum(o * do, axis=1), mask=offs_m < Nq)


@triton.jit
def scale_cast(Src, Dst, n, scale, BLOCK: tl.constexpr):
    """Dst = (Src * scale) cast to Dst's dtype, both contiguous: the one-pass backward's fp32 dQ, stored as the other
    kernels store (the same rounding, also under the interpreter, whose casts truncate)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(Src + offs, mask=offs < n, other=0.0)
    tl.store(Dst + offs, (x * scale).to(Dst.dtype.element_ty), mask=offs < n)


@triton.jit
def dkdv_inner(
    dk,
    dv,
    k,
    v,
    Q_base,
    DO_base,
    Lse_base,
    Delta_base,
    stride_qn,
    stride_don,
    DQ_base,
    stride_dqn,
    list_ptr,
    lo,
    hi,
    start_n,
    offs_d,
    q_len,
    qk_scale,
    seed,
    offset,
    threshold,
    keep_scale,
    bh,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SPARSE: tl.constexpr,
    MASK_Q: tl.constexpr,
    DROPOUT: tl.constexpr,
    PREC: tl.constexpr,
    UPCAST: tl.constexpr,
    LIST_IN_REGS: tl.constexpr,
    MAX_LIST: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
):
    """Add the query blocks lo..hi-1 (range or list) into this key block's dK, dV accumulators (and, ATOMIC_DQ, their
    share of dQ, unscaled, into the fp32 buffer at DQ_base)."""
    BLOCK_N: tl.constexpr = k.shape[0]
    PAD_D: tl.constexpr = k.shape[1] != HEAD_DIM
    offs_m0, d_ok, nxt, entries = walk_start(
        list_ptr, lo, hi, offs_d, BLOCK_M, HEAD_DIM, SPARSE, LIST_IN_REGS, MAX_LIST
    )
    for i in range(lo, hi):
        _, offs_m, m_ok, nxt = walk_step(list_ptr, i, hi, nxt, entries, offs_m0, q_len, SPARSE, LIST_IN_REGS, MAX_LIST)
        qT = load_cols(Q_base, offs_m, stride_qn, m_ok, offs_d, d_ok, MASK_Q, PAD_D)
        if MASK_Q:
            lse = tl.load(Lse_base + offs_m, mask=m_ok, other=float("inf"))
            delta = tl.load(Delta_base + offs_m, mask=m_ok, other=0.0)
        else:
            lse = tl.load(Lse_base + offs_m)
            delta = tl.load(Delta_base + offs_m)
        sT = mma(k, qT, tl.zeros([k.shape[0], BLOCK_M], tl.float32), PREC, UPCAST)
        pT = tl.math.exp2(sT * qk_scale - lse[None, :])
        do = load_block(DO_base, offs_m, stride_don, m_ok, offs_d, d_ok, MASK_Q, PAD_D)
        dpT = mma(v, tl.trans(do), tl.zeros([k.shape[0], BLOCK_M], tl.float32), PREC, UPCAST)
        if DROPOUT:
            keepT = tl.trans(dropout_keep(seed, offset, bh, offs_m, start_n, threshold, BLOCK_N))
            pdT = tl.where(keepT, pT * keep_scale, 0.0)
            dpT = tl.where(keepT, dpT * keep_scale, 0.0)
        else:
            pdT = pT
        dv = mma(pdT.to(do.dtype), do, dv, PREC, UPCAST)
        dsT = (pT * (dpT - delta[None, :])).to(qT.dtype)
        dk = mma(dsT, tl.trans(qT), dk, PREC, UPCAST)
        if ATOMIC_DQ:
            dq = mma(tl.trans(dsT), k, tl.zeros([BLOCK_M, k.shape[1]], tl.float32), PREC, UPCAST)
            dq_ptrs = DQ_base + offs_m[:, None] * stride_dqn + offs_d[None, :]
            tl.atomic_add(dq_ptrs, dq, mask=m_ok[:, None] & d_ok[None, :], sem="relaxed")
    return dk, dv


@triton.jit
def bwd_dkdv(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    DQ,
    Lse,
    Delta,
    Lengths,
    QList,
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
    stride_dob,
    stride_doh,
    stride_don,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_dqb,
    stride_dqh,
    stride_dqn,
    list_stride_h,
    list_stride_row,
    H,
    Nq,
    Nk,
    qk_scale,
    scale,
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
    ATOMIC_DQ: tl.constexpr,
):
    """One program: dK, dV of BLOCK_N keys of one (batch, head). Grid (cdiv(Nk, BLOCK_N), batch * heads).

    DK and DV share the strides (stride_g*) of freshly allocated gradient tensors. DQ (ATOMIC_DQ only): a zeroed
    fp32 buffer of q's shape with strides stride_dq*, which receives the unscaled dQ; rows past q_len stay zero.
    """
    pid_n, bh, b, h, q_len, kv_len, seed, offset = program_start(
        Lengths, Rng, H, Nq, Nk, HAS_LENGTHS, PAD_QUERIES, DROPOUT
    )
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    n_ok = offs_n < kv_len
    k = load_rows(head_ptr(K, b, h, stride_kb, stride_kh), offs_n, stride_kn, n_ok, offs_d, HEAD_DIM)
    v = load_rows(head_ptr(V, b, h, stride_vb, stride_vh), offs_n, stride_vn, n_ok, offs_d, HEAD_DIM)
    q_base = head_ptr(Q, b, h, stride_qb, stride_qh)
    do_base = head_ptr(DO, b, h, stride_dob, stride_doh)
    lse_base = Lse + bh.to(tl.int64) * Nq
    delta_base = Delta + bh.to(tl.int64) * Nq
    dq_base = head_ptr(DQ, b, h, stride_dqb, stride_dqh)
    # A fully padded key block gets zero gradients.
    list_ptr, n_full, n_any = visit_plan(
        QList, h, pid_n, list_stride_h, list_stride_row, q_len, start_n, kv_len, BLOCK_M, SPARSE, MAX_LIST
    )

    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dk, dv = dkdv_inner(
        dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qn, stride_don, dq_base, stride_dqn, list_ptr, 0,
        n_full, start_n, offs_d, q_len, qk_scale, seed, offset, threshold, keep_scale, bh, HEAD_DIM, BLOCK_M, SPARSE,
        False, DROPOUT, PREC, UPCAST, LIST_IN_REGS, MAX_LIST, ATOMIC_DQ,
    )  # fmt: skip
    dk, dv = dkdv_inner(
        dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qn, stride_don, dq_base, stride_dqn, list_ptr,
        n_full, n_any, start_n, offs_d, q_len, qk_scale, seed, offset, threshold, keep_scale, bh, HEAD_DIM, BLOCK_M,
        SPARSE, True, DROPOUT, PREC, UPCAST, LIST_IN_REGS, MAX_LIST, ATOMIC_DQ,
    )  # fmt: skip
    # Keys past the row's length were loaded as zeros and picked up junk in their own rows only: zero them.
    dk = tl.where(n_ok[:, None], dk * scale, 0.0)
    dv = tl.where(n_ok[:, None], dv, 0.0)
    store_rows(head_ptr(DK, b, h, stride_gb, stride_gh), offs_n, stride_gn, offs_n < Nk, offs_d, dk, HEAD_DIM)
    store_rows(head_ptr(DV, b, h, stride_gb, stride_gh), offs_n, stride_gn, offs_n < Nk, offs_d, dv, HEAD_DIM)


@triton.jit
def dq_inner(
    dq,
    q,
    do,
    lse,
    delta,
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
    keep_scale,
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
    """Add key blocks lo..hi-1 (range or list, as the forward visits them) into this query block's dQ."""
    PAD_D: tl.constexpr = q.shape[1] != HEAD_DIM
    offs_n0, d_ok, nxt, entries = walk_start(
        list_ptr, lo, hi, offs_d, BLOCK_N, HEAD_DIM, SPARSE, LIST_IN_REGS, MAX_LIST
    )
    for i in range(lo, hi):
        start_n, offs_n, n_ok, nxt = walk_step(
            list_ptr, i, hi, nxt, entries, offs_n0, kv_len, SPARSE, LIST_IN_REGS, MAX_LIST
        )
        kT = load_cols(K_base, offs_n, stride_kn, n_ok, offs_d, d_ok, MASK_KV, PAD_D)
        vT = load_cols(V_base, offs_n, stride_vn, n_ok, offs_d, d_ok, MASK_KV, PAD_D)
        s = mma(q, kT, tl.zeros([q.shape[0], BLOCK_N], tl.float32), PREC, UPCAST)
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if MASK_KV:
            p = tl.where(n_ok[None, :], p, 0.0)
        dp = mma(do, vT, tl.zeros([q.shape[0], BLOCK_N], tl.float32), PREC, UPCAST)
        if DROPOUT:
            keep = dropout_keep(seed, offset, bh, offs_m, start_n, threshold, BLOCK_N)
            dp = tl.where(keep, dp * keep_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(kT.dtype), tl.trans(kT), dq, PREC, UPCAST)
    return dq


@triton.jit
def bwd_dq(
    Q,
    K,
    V,
    DO,
    DQ,
    Lse,
    Delta,
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
    stride_dob,
    stride_doh,
    stride_don,
    stride_gb,
    stride_gh,
    stride_gn,
    list_stride_h,
    list_stride_row,
    H,
    Nq,
    Nk,
    qk_scale,
    scale,
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
    """One program: dQ of BLOCK_M query rows of one (batch, head). Grid (cdiv(Nq, BLOCK_M), batch * heads)."""
    pid_m, bh, b, h, q_len, kv_len, seed, offset = program_start(
        Lengths, Rng, H, Nq, Nk, HAS_LENGTHS, PAD_QUERIES, DROPOUT
    )
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < Nq
    q = load_rows(head_ptr(Q, b, h, stride_qb, stride_qh), offs_m, stride_qn, m_ok, offs_d, HEAD_DIM)
    do = load_rows(head_ptr(DO, b, h, stride_dob, stride_doh), offs_m, stride_don, m_ok, offs_d, HEAD_DIM)
    lse = tl.load(Lse + bh.to(tl.int64) * Nq + offs_m, mask=m_ok, other=float("inf"))
    delta = tl.load(Delta + bh.to(tl.int64) * Nq + offs_m, mask=m_ok, other=0.0)
    k_base = head_ptr(K, b, h, stride_kb, stride_kh)
    v_base = head_ptr(V, b, h, stride_vb, stride_vh)
    list_ptr, n_full, n_any = visit_plan(
        KvList, h, pid_m, list_stride_h, list_stride_row, kv_len, start_m, q_len, BLOCK_N, SPARSE, MAX_LIST
    )

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dq = dq_inner(
        dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, list_ptr, 0, n_full, offs_m, offs_d, kv_len,
        qk_scale, seed, offset, threshold, keep_scale, bh, HEAD_DIM, BLOCK_N, SPARSE, False, DROPOUT, PREC, UPCAST,
        LIST_IN_REGS, MAX_LIST,
    )  # fmt: skip
    dq = dq_inner(
        dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_vn, list_ptr, n_full, n_any, offs_m, offs_d, kv_len,
        qk_scale, seed, offset, threshold, keep_scale, bh, HEAD_DIM, BLOCK_N, SPARSE, True, DROPOUT, PREC, UPCAST,
        LIST_IN_REGS, MAX_LIST,
    )  # fmt: skip
    # Padded query rows are selected to zero: NaN or inf in their q, dO or delta must not reach dQ.
    dq = tl.where((offs_m < q_len)[:, None], dq * scale, 0.0)
    store_rows(head_ptr(DQ, b, h, stride_gb, stride_gh), offs_m, stride_gn, m_ok, offs_d, dq, HEAD_DIM)
