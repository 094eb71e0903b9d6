"""Host side of the kernel family: launches, the autograd Function, the dropout keep-mask helper.

`flash_attention(q, k, v, ...)` is the entry point: dense (every key block below each row's length) or block-sparse
(`lists`: a LayoutLists, visiting only kept blocks), with per-row key lengths, dropout and tile options.
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch
import triton
from triton.runtime.errors import OutOfResources

from attention_impls.kernels.bwd import bwd_dkdv, bwd_dq, bwd_preprocess
from attention_impls.kernels.common import _keep_mask_kernel
from attention_impls.kernels.fwd import attn_fwd
from attention_impls.kernels.lists import LayoutLists
from attention_impls.kernels.tiles import Tiles, default_tiles, padded_head_dim

LOG2E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# How list-mode loops read the block list (kernels/fwd.py next_block): 0 load per step, 1 prefetch one step ahead,
# 2 pick from the list held in registers. Measured on the H200 (notes/flash_kernel.md, v2): mode 2 is fastest for
# short lists (16-32 entries: butterfly at 4K-64K) and slowest for long ones (256 entries: +59% over the range loop,
# against +10% for mode 1), so the default picks by list width. LRA_FLASH_LIST_MODE overrides it (experiments).
REGISTER_LIST_MAX = 64


def list_mode(max_list: int) -> int:
    """The list-reading mode for lists `max_list` entries wide (see above)."""
    env = os.environ.get("LRA_FLASH_LIST_MODE")
    if env is not None:
        if env not in ("0", "1", "2"):
            raise ValueError(f"LRA_FLASH_LIST_MODE must be 0, 1 or 2, got {env!r}")
        return int(env)
    return 2 if max_list <= REGISTER_LIST_MAX else 1


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor | None) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (batch, heads, seq, head_dim); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")  # fmt: skip
    if q.shape[:2] != k.shape[:2] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: batch, heads and head_dim must "
                         f"agree and k, v must have the same shape")  # fmt: skip
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"q, k, v must share one dtype among fp16, bf16, fp32; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] > 256:
        raise ValueError(f"head_dim {q.shape[-1]} is above the kernel's 256")
    if q.device.type != "cuda" and not _interpreting():
        raise RuntimeError("the flash kernels need a CUDA device, or TRITON_INTERPRET=1 to emulate them on the CPU")
    if lengths is not None and (lengths.shape != (q.shape[0],) or lengths.dtype != torch.int32):
        raise ValueError(f"lengths must be int32 of shape (batch,) = ({q.shape[0]},), got {lengths.dtype} "
                         f"{tuple(lengths.shape)}")  # fmt: skip


def _unit_stride(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _launch(kernel, grid, args: list, consts: dict, num_warps: int, num_stages: int) -> None:
    """Launch; when shared memory runs out, retry with fewer pipeline stages (a slower but valid configuration)."""
    stages = num_stages
    while True:
        try:
            kernel[grid](*args, **consts, num_warps=num_warps, num_stages=stages)
            return
        except OutOfResources:
            if stages <= 1:
                raise
            stages -= 1


def _common_consts(q: torch.Tensor, lengths, pad_queries: bool, sparse: bool, dropout_p: float, allow_tf32: bool):
    fp32 = q.dtype == torch.float32
    return {
        "HEAD_DIM": q.shape[-1],
        "BLOCK_D": padded_head_dim(q.shape[-1]),
        "HAS_LENGTHS": lengths is not None,
        "PAD_QUERIES": bool(pad_queries and lengths is not None),
        "SPARSE": sparse,
        "DROPOUT": dropout_p > 0,
        "PREC": "tf32" if (not fp32 or allow_tf32) else "ieee",
        "UPCAST": _interpreting() and q.dtype == torch.bfloat16,
    }


def _sparse_tiles(tiles: Tiles, lists: LayoutLists | None) -> Tiles:
    """Tiles no larger than the layout block (they must divide it)."""
    if lists is None:
        return tiles
    b = lists.block
    return replace(
        tiles,
        block_m=min(tiles.block_m, b),
        block_n=min(tiles.block_n, b),
        bwd_block_m=min(tiles.bwd_block_m, b),
        bwd_block_n=min(tiles.bwd_block_n, b),
    )


def attention_forward(q, k, v, lengths, scale, dropout_p, seed, pad_queries, tiles: Tiles, lists, allow_tf32=False):
    """Run the forward kernel: (out, lse) with lse (batch, heads, Nq) fp32 in base 2 (+inf for empty rows)."""
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(B, H, Nq, device=q.device, dtype=torch.float32)
    dummy = torch.zeros(1, dtype=torch.int32, device=q.device)
    consts = _common_consts(q, lengths, pad_queries, lists is not None, dropout_p, allow_tf32)
    kv_list, ls_h, ls_row, max_list = dummy, 0, 0, 1
    if lists is not None:
        kv_list = lists.rows(tiles.block_m, tiles.block_n, Nq, Nk, q.device)
        ls_h = kv_list.stride(0) if kv_list.shape[0] > 1 else 0
        ls_row, max_list = kv_list.stride(1), kv_list.shape[2]
    args = [
        q, k, v, out, lse, lengths if lengths is not None else dummy, kv_list,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        ls_h, ls_row, H, Nq, Nk, scale * LOG2E, float(dropout_p), int(seed),
    ]  # fmt: skip
    consts.update(BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, MAX_LIST=max_list, LIST_MODE=list_mode(max_list))
    grid = (triton.cdiv(Nq, tiles.block_m), B * H)
    _launch(attn_fwd, grid, args, consts, tiles.num_warps, tiles.num_stages)
    return out, lse


def attention_backward(do, q, k, v, out, lse, lengths, scale, dropout_p, seed, pad_queries, tiles: Tiles, lists,
                       allow_tf32=False):  # fmt: skip
    """Run the three backward kernels: (dq, dk, dv). No atomics: the result is bitwise reproducible."""
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    do = _unit_stride(do)
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    delta = torch.empty(B, H, Nq, device=q.device, dtype=torch.float32)
    dummy = torch.zeros(1, dtype=torch.int32, device=q.device)
    block_d = padded_head_dim(D)
    pre_m = 64
    bwd_preprocess[(triton.cdiv(Nq, pre_m), B * H)](
        out, do, delta, out.stride(0), out.stride(1), out.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, Nq, HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=pre_m,
    )  # fmt: skip
    consts = _common_consts(q, lengths, pad_queries, lists is not None, dropout_p, allow_tf32)
    lens = lengths if lengths is not None else dummy
    strides = [
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
    ]  # fmt: skip
    # dK, dV: key tiles of bwd_block_n, walking query tiles of bwd_block_m.
    m1, n1 = tiles.bwd_block_m, tiles.bwd_block_n
    q_list, ls_h, ls_row, max_list = dummy, 0, 0, 1
    if lists is not None:
        q_list = lists.cols(m1, n1, Nq, Nk, q.device)
        ls_h = q_list.stride(0) if q_list.shape[0] > 1 else 0
        ls_row, max_list = q_list.stride(1), q_list.shape[2]
    args = [q, k, v, do, dk, dv, lse, delta, lens, q_list, *strides, dk.stride(0), dk.stride(1), dk.stride(2),
            ls_h, ls_row, H, Nq, Nk, scale * LOG2E, scale, float(dropout_p), int(seed)]  # fmt: skip
    c1 = dict(consts, BLOCK_M=m1, BLOCK_N=n1, MAX_LIST=max_list, LIST_MODE=list_mode(max_list))
    _launch(bwd_dkdv, (triton.cdiv(Nk, n1), B * H), args, c1, tiles.bwd_num_warps, tiles.bwd_num_stages)
    # dQ: query tiles of bwd_block_n, walking key tiles of bwd_block_m.
    m2, n2 = tiles.bwd_block_n, tiles.bwd_block_m
    kv_list, ls_h, ls_row, max_list = dummy, 0, 0, 1
    if lists is not None:
        kv_list = lists.rows(m2, n2, Nq, Nk, q.device)
        ls_h = kv_list.stride(0) if kv_list.shape[0] > 1 else 0
        ls_row, max_list = kv_list.stride(1), kv_list.shape[2]
    args = [q, k, v, do, dq, lse, delta, lens, kv_list, *strides, dq.stride(0), dq.stride(1), dq.stride(2),
            ls_h, ls_row, H, Nq, Nk, scale * LOG2E, scale, float(dropout_p), int(seed)]  # fmt: skip
    c2 = dict(consts, BLOCK_M=m2, BLOCK_N=n2, MAX_LIST=max_list, LIST_MODE=list_mode(max_list))
    _launch(bwd_dq, (triton.cdiv(Nq, m2), B * H), args, c2, tiles.bwd_num_warps, tiles.bwd_num_stages)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward saves (q, k, v, out, lse); the backward recomputes P from lse."""

    @staticmethod
    def forward(ctx, q, k, v, lengths, scale, dropout_p, seed, pad_queries, tiles, lists, allow_tf32):
        out, lse = attention_forward(q, k, v, lengths, scale, dropout_p, seed, pad_queries, tiles, lists, allow_tf32)
        ctx.save_for_backward(q, k, v, out, lse, lengths)
        ctx.params = (scale, dropout_p, seed, pad_queries, tiles, lists, allow_tf32)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse, lengths = ctx.saved_tensors
        scale, dropout_p, seed, pad_queries, tiles, lists, allow_tf32 = ctx.params
        dq, dk, dv = attention_backward(
            do, q, k, v, out, lse, lengths, scale, dropout_p, seed, pad_queries, tiles, lists, allow_tf32
        )
        return dq, dk, dv, None, None, None, None, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    pad_queries: bool | None = None,
    tiles: Tiles | None = None,
    lists: LayoutLists | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    """softmax(q k^T * scale) v with the kernels; differentiable in q, k, v.

    `lengths` (int32, batch): right-padded key lengths; with Nq == Nk (pad_queries default) query rows at or past the
    length are zero too. `dropout_p`/`seed`: attention dropout whose keep-mask is `dropout_keep_mask(seed, ...)`.
    `lists`: a LayoutLists for block-sparse attention. `tiles`: tile sizes (default: tuned for the head dim).
    """
    _check_inputs(q, k, v, lengths)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if lists is not None and lists.heads not in (1, q.shape[1]):
        raise ValueError(f"layout has {lists.heads} heads; it must have 1 or {q.shape[1]} (the model's heads)")
    q, k, v = _unit_stride(q), _unit_stride(k), _unit_stride(v)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if pad_queries is None:
        pad_queries = q.shape[2] == k.shape[2]
    if tiles is None:
        tiles = default_tiles(q.shape[-1], q.dtype, q.device.type)
    tiles = _sparse_tiles(tiles, lists)
    return FlashAttentionFunction.apply(q, k, v, lengths, scale, dropout_p, seed, pad_queries, tiles, lists, allow_tf32)


def dropout_keep_mask(seed: int, batch: int, heads: int, nq: int, nk: int, dropout_p: float, device) -> torch.Tensor:
    """The bool keep-mask (batch, heads, nq, nk) the kernels draw for `seed` (tests compare against it)."""
    out = torch.empty(batch, heads, nq, nk, dtype=torch.int8, device=device)
    grid = (triton.cdiv(nq, 32), triton.cdiv(nk, 32), batch * heads)
    _keep_mask_kernel[grid](out, int(seed), nq, nk, float(dropout_p), BLOCK_M=32, BLOCK_N=32)
    return out.bool()
