"""Host side of the kernel family: launches, the custom ops with their autograd formula, the keep-mask helper.

`flash_attention(q, k, v, ...)` is the entry point: dense (every key block below each row's length) or block-sparse
(`lists`: a LayoutLists, visiting only kept blocks), with per-row key lengths, dropout and tile options. The kernels
run inside two `torch.library` custom ops, `lra::flash_fwd` and `lra::flash_bwd` (with fake implementations and
an autograd formula), so torch.compile traces a model that uses them without graph breaks and CUDA graphs capture
them: every per-call input is a tensor or a Python constant, and nothing here waits for the device.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch
import triton
from triton.runtime.errors import OutOfResources

from attention_impls.kernels.bwd import bwd_dkdv, bwd_dq, bwd_preprocess, scale_cast
from attention_impls.kernels.common import _keep_mask_kernel
from attention_impls.kernels.dropout import draw_rng_state, keep_scale, quantize_dropout, rng_state
from attention_impls.kernels.fwd import attn_fwd
from attention_impls.kernels.lists import LayoutLists
from attention_impls.kernels.tiles import (
    MAX_HEAD_DIM,
    SUPPORTED_HEAD_DIMS,
    Tiles,
    default_tiles,
    padded_head_dim,
)
from lra.core.environment import triton_interpreting

LOG2E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Lists up to this wide are held in registers (entry i picked per step); wider ones are read one entry ahead.
# Measured on the H200 (docs/flash_kernel.md, v2): registers win on short lists (butterfly: 16-32 entries), the
# prefetch on long ones (a 256-entry list reduced every step cost +59% over the range loop, the prefetch +10%).
REGISTER_LIST_MAX = 64
_PRE_BLOCK_M = 64  # rows per program of the backward's row-sum pre-pass
_CAST_BLOCK = 1024  # elements per program of the one-pass backward's dQ cast
_warned: set[str] = set()


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor | None) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (batch, heads, seq, head_dim); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")  # fmt: skip
    if q.shape[:2] != k.shape[:2] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: batch, heads and head_dim must "
                         f"agree and k, v must have the same shape")  # fmt: skip
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"q, k, v must share one dtype among fp16, bf16, fp32; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {q.shape[-1]} is not one the kernels take: multiples of 8 up to {MAX_HEAD_DIM}")
    if q.device.type != "cuda" and not triton_interpreting():
        raise RuntimeError("the flash kernels need a CUDA device, or TRITON_INTERPRET=1 to emulate them on the CPU")
    if lengths is not None and (lengths.shape != (q.shape[0],) or lengths.dtype != torch.int32):
        raise ValueError(f"lengths must be int32 of shape (batch,) = ({q.shape[0]},), got {lengths.dtype} "
                         f"{tuple(lengths.shape)}")  # fmt: skip


def _unit_stride(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _launch(kernel, grid, args: list, consts: dict, num_warps: int, num_stages: int, *, maxnreg: int = 0) -> None:
    """Launch; when shared memory runs out, retry with fewer pipeline stages (slower but valid), warning once.
    `maxnreg` > 0 caps the registers per thread (0: the compiler's choice)."""
    registers = {"maxnreg": maxnreg} if maxnreg else {}
    for stages in range(num_stages, 0, -1):
        try:
            kernel[grid](*args, **consts, num_warps=num_warps, num_stages=stages, **registers)
        except OutOfResources as err:
            if stages == 1:
                raise
            reason = err
            continue
        if stages < num_stages:
            tile = f"{kernel.__name__} {consts['BLOCK_M']}x{consts['BLOCK_N']}, D={consts['BLOCK_D']}"
            _warn_once(f"{tile}: {num_stages} pipeline stages ran out of resources ({reason}); running with "
                       f"{stages} (slower): choose smaller tiles or fewer stages for this head dim")  # fmt: skip
        return


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _consts(q: torch.Tensor, lengths, pad_queries: bool, sparse: bool, threshold: int, allow_tf32: bool) -> dict:
    fp32 = q.dtype == torch.float32
    return {
        "HEAD_DIM": q.shape[-1],
        "BLOCK_D": padded_head_dim(q.shape[-1]),
        "HAS_LENGTHS": lengths is not None,
        "PAD_QUERIES": bool(pad_queries and lengths is not None),
        "SPARSE": sparse,
        "DROPOUT": threshold > 0,
        "PREC": "tf32" if (not fp32 or allow_tf32) else "ieee",
        "UPCAST": triton_interpreting() and q.dtype == torch.bfloat16,
    }


def _list_args(block_list: torch.Tensor | None, dummy: torch.Tensor) -> tuple[torch.Tensor, int, int, dict]:
    """(list tensor, head stride, row stride, list constexprs) for a kernel: the block list or, dense, a dummy."""
    if block_list is None:
        return dummy, 0, 0, {"MAX_LIST": 1, "LIST_IN_REGS": False}
    width = block_list.shape[2]
    h_stride = block_list.stride(0) if block_list.shape[0] > 1 else 0
    return block_list, h_stride, block_list.stride(1), {"MAX_LIST": width, "LIST_IN_REGS": width <= REGISTER_LIST_MAX}


def _forward(q, k, v, lengths, rng, kv_list, scale, threshold, pad_queries, tiles: Tiles, allow_tf32):
    """Run the forward kernel: (out, lse) with lse (batch, heads, Nq) fp32 in base 2 (+inf for empty rows)."""
    B, H, Nq, _ = q.shape
    Nk = k.shape[2]
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(B, H, Nq, device=q.device, dtype=torch.float32)
    dummy = q.new_empty(2, dtype=torch.int64)
    lst, ls_h, ls_row, list_consts = _list_args(kv_list, dummy)
    args = [
        q, k, v, out, lse, lengths if lengths is not None else dummy, lst, rng if rng is not None else dummy,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        ls_h, ls_row, H, Nq, Nk, scale * LOG2E, threshold, keep_scale(threshold),
    ]  # fmt: skip
    consts = _consts(q, lengths, pad_queries, kv_list is not None, threshold, allow_tf32)
    consts.update(BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, **list_consts)
    grid = (triton.cdiv(Nq, tiles.block_m), B * H)
    _launch(attn_fwd, grid, args, consts, tiles.num_warps, tiles.num_stages, maxnreg=tiles.maxnreg)
    return out, lse


def _backward(do, q, k, v, out, lse, lengths, rng, q_list, dq_list, scale, threshold, pad_queries, tiles: Tiles,
              allow_tf32, deterministic):  # fmt: skip
    """Run the backward kernels: (dq, dk, dv). Deterministic: the pre-pass, dK/dV and dQ kernels, no atomics (bitwise
    reproducible). Otherwise the dK/dV kernel also adds dQ by fp32 atomics and the dQ kernel is skipped (one pass)."""
    B, H, Nq, D = q.shape
    Nk = k.shape[2]
    do = _unit_stride(do)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    delta = torch.empty(B, H, Nq, device=q.device, dtype=torch.float32)
    dummy = q.new_empty(2, dtype=torch.int64)
    bwd_preprocess[(triton.cdiv(Nq, _PRE_BLOCK_M), B * H)](
        out, do, delta, out.stride(0), out.stride(1), out.stride(2), do.stride(0), do.stride(1), do.stride(2),
        H, Nq, HEAD_DIM=D, BLOCK_D=padded_head_dim(D), BLOCK_M=_PRE_BLOCK_M,
    )  # fmt: skip
    consts = _consts(q, lengths, pad_queries, q_list is not None, threshold, allow_tf32)
    head = [q, k, v, do]
    tail = [lengths if lengths is not None else dummy]
    strides = [
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
    ]  # fmt: skip
    scalars = [H, Nq, Nk, scale * LOG2E, scale, threshold, keep_scale(threshold)]
    rng = rng if rng is not None else dummy
    dq_acc = None if deterministic else torch.zeros(B, H, Nq, D, device=q.device, dtype=torch.float32)
    acc, acc_strides = (dummy, [0, 0, 0]) if dq_acc is None else (dq_acc, list(dq_acc.stride()[:3]))
    # dK, dV (and the atomic dQ): key tiles of bwd_block_n, walking query tiles of bwd_block_m.
    m1, n1 = tiles.bwd_block_m, tiles.bwd_block_n
    lst, ls_h, ls_row, list_consts = _list_args(q_list, dummy)
    args = [*head, dk, dv, acc, lse, delta, *tail, lst, rng, *strides, *dk.stride()[:3], *acc_strides, ls_h, ls_row,
            *scalars]  # fmt: skip
    c1 = dict(consts, BLOCK_M=m1, BLOCK_N=n1, ATOMIC_DQ=dq_acc is not None, **list_consts)
    grid = (triton.cdiv(Nk, n1), B * H)
    _launch(bwd_dkdv, grid, args, c1, tiles.bwd_num_warps, tiles.bwd_num_stages, maxnreg=tiles.bwd_maxnreg)
    if dq_acc is not None:
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        scale_cast[(triton.cdiv(dq.numel(), _CAST_BLOCK),)](dq_acc, dq, dq.numel(), scale, BLOCK=_CAST_BLOCK)
        return dq, dk, dv
    # dQ: query tiles of bwd_block_n, walking key tiles of bwd_block_m.
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    m2, n2 = tiles.bwd_block_n, tiles.bwd_block_m
    lst, ls_h, ls_row, list_consts = _list_args(dq_list, dummy)
    args = [*head, dq, lse, delta, *tail, lst, rng, *strides, *dq.stride()[:3], ls_h, ls_row, *scalars]
    c2 = dict(consts, BLOCK_M=m2, BLOCK_N=n2, **list_consts)
    grid = (triton.cdiv(Nq, m2), B * H)
    _launch(bwd_dq, grid, args, c2, tiles.bwd_num_warps, tiles.bwd_num_stages, maxnreg=tiles.bwd_maxnreg)
    return dq, dk, dv


@torch.library.custom_op("lra::flash_fwd", mutates_args=())
def flash_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lengths: torch.Tensor | None,
    rng: torch.Tensor | None,
    kv_list: torch.Tensor | None,
    q_list: torch.Tensor | None,
    dq_list: torch.Tensor | None,
    scale: float,
    threshold: int,
    pad_queries: bool,
    tiles: list[int],
    allow_tf32: bool,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of the forward kernel. `q_list`/`dq_list` and `deterministic` are for the backward."""
    return _forward(q, k, v, lengths, rng, kv_list, scale, threshold, pad_queries, Tiles.from_values(tiles), allow_tf32)


@flash_fwd.register_fake
def _flash_fwd_fake(q, k, v, *_):
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("lra::flash_bwd", mutates_args=())
def flash_bwd(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    lengths: torch.Tensor | None,
    rng: torch.Tensor | None,
    q_list: torch.Tensor | None,
    dq_list: torch.Tensor | None,
    scale: float,
    threshold: int,
    pad_queries: bool,
    tiles: list[int],
    allow_tf32: bool,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of the backward kernels."""
    params = (scale, threshold, pad_queries, Tiles.from_values(tiles), allow_tf32, deterministic)
    return _backward(do, q, k, v, out, lse, lengths, rng, q_list, dq_list, *params)


@flash_bwd.register_fake
def _flash_bwd_fake(do, q, k, v, *_):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, lengths, rng, _, q_list, dq_list, *params = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, lengths, rng, q_list, dq_list)
    ctx.params = params
    ctx.mark_non_differentiable(lse)


def _flash_backward(ctx, d_out, _d_lse):
    q, k, v, out, lse, lengths, rng, q_list, dq_list = ctx.saved_tensors
    dq, dk, dv = flash_bwd(d_out, q, k, v, out, lse, lengths, rng, q_list, dq_list, *ctx.params)
    return dq, dk, dv, *([None] * 11)


flash_fwd.register_autograd(_flash_backward, setup_context=_setup_context)


def _sparse_tiles(tiles: Tiles, lists: LayoutLists | None) -> Tiles:
    """Tiles no larger than the layout block (they must divide it)."""
    if lists is None:
        return tiles
    b = lists.block
    fields = ("block_m", "block_n", "bwd_block_m", "bwd_block_n")
    return replace(tiles, **{f: min(getattr(tiles, f), b) for f in fields})


def kernel_lists(lists: LayoutLists, tiles: Tiles, nq: int, nk: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The forward's key-tile lists, the dK/dV kernel's query-tile lists and the dQ kernel's key-tile lists (cached
    in `lists`; a cold cache under torch.compile cannot be traced: BlockSparseFlash.prepare warms it)."""
    tiles = _sparse_tiles(tiles, lists)
    return (
        lists.rows(tiles.block_m, tiles.block_n, nq, nk, device),
        lists.cols(tiles.bwd_block_m, tiles.bwd_block_n, nq, nk, device),
        lists.rows(tiles.bwd_block_n, tiles.bwd_block_m, nq, nk, device),
    )


def _state(seed: int | torch.Tensor | None, device: torch.device) -> torch.Tensor:
    if seed is None:
        return draw_rng_state(device)
    if isinstance(seed, torch.Tensor):
        same_device = seed.device.type == device.type and device.index in (None, seed.device.index)
        if seed.shape != (2,) or seed.dtype != torch.int64 or not same_device:
            raise ValueError(f"the RNG state must be an int64 (seed, offset) tensor on {device}, got {seed.dtype} "
                             f"{tuple(seed.shape)} on {seed.device}")  # fmt: skip
        return seed
    return rng_state(int(seed), 0, device)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
    seed: int | torch.Tensor | None = None,
    pad_queries: bool | None = None,
    tiles: Tiles | None = None,
    lists: LayoutLists | None = None,
    allow_tf32: bool = False,
    deterministic: bool = True,
) -> torch.Tensor:
    """softmax(q k^T * scale) v with the kernels; differentiable in q, k, v.

    `lengths` (int32, batch): right-padded key lengths; with Nq == Nk (pad_queries default) query rows at or past the
    length are zero too. `dropout_p`: attention dropout, quantised to 1/256 (kernels/dropout.py); its keep-mask is
    `dropout_keep_mask(seed, ...)` for `seed` an int (offset 0) or an int64 (seed, offset) tensor on q's device;
    None draws a fresh state from torch's generator. `lists`: a LayoutLists for block-sparse attention. `tiles`:
    tile sizes (default: tuned for the head dim). `deterministic=False`: the one-pass backward, dQ added by atomics
    (faster where the exponentials and the dropout RNG bound the backward; dQ's last bits vary from run to run).
    """
    _check_inputs(q, k, v, lengths)
    threshold = quantize_dropout(dropout_p)
    if lists is not None and lists.heads not in (1, q.shape[1]):
        raise ValueError(f"layout has {lists.heads} heads; it must have 1 or {q.shape[1]} (the model's heads)")
    q, k, v = _unit_stride(q), _unit_stride(k), _unit_stride(v)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if pad_queries is None:
        pad_queries = q.shape[2] == k.shape[2]
    if tiles is None:
        tiles = default_tiles(q.shape[-1], q.dtype, q.device.type, dropout=threshold > 0, dense=lists is None)
    tiles = _sparse_tiles(tiles, lists)
    rng = _state(seed, q.device) if threshold > 0 else None
    kv_list = q_list = dq_list = None
    if lists is not None:
        kv_list, q_list, dq_list = kernel_lists(lists, tiles, q.shape[2], k.shape[2], q.device)
    params = (scale, threshold, bool(pad_queries), tiles.values(), bool(allow_tf32), bool(deterministic))
    out, _ = flash_fwd(q, k, v, lengths, rng, kv_list, q_list, dq_list, *params)
    return out


def dropout_keep_mask(
    seed: int | torch.Tensor, batch: int, heads: int, nq: int, nk: int, dropout_p: float, device
) -> torch.Tensor:
    """The bool keep-mask (batch, heads, nq, nk) the kernels draw for `seed` (an int or a (seed, offset) state)."""
    device = torch.device(device)
    out = torch.empty(batch, heads, nq, nk, dtype=torch.int8, device=device)
    block = 256 if triton_interpreting() else 64  # the interpreter's cost is per program
    grid = (triton.cdiv(nq, block), triton.cdiv(nk, block), batch * heads)
    threshold = quantize_dropout(dropout_p)
    _keep_mask_kernel[grid](out, _state(seed, device), nq, nk, threshold, BLOCK_M=block, BLOCK_N=block)
    return out.bool()
