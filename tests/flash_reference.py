"""Test helpers for the flash kernels: an fp64 reference that rounds where the kernels round, and masks read back
from the kernels' own outputs.

`emulated_attention` / `emulated_grads` follow the kernels' sequence of operations in fp64 (online softmax over key
tiles of the forward's block_n, P and dS rounded to the input dtype before each product, outputs rounded when
stored), with the rounding this platform's fp32 -> 16-bit casts perform (`cast_rounding`: the Triton interpreter
truncates fp32 -> bf16, a GPU rounds to nearest). 16-bit results can then be held to a tolerance set by fp32
arithmetic instead of by the 16-bit rounding itself.

`masks_from_kernels` recovers the dropout keep-mask each kernel applied from the outputs and gradients of inputs
chosen so that every weight shows (all scores equal, one-hot keys and values).
"""

from __future__ import annotations

import functools
import math

import torch

LOG2E = 1.4426950408889634


@functools.cache
def cast_rounding(dtype: torch.dtype, device: str) -> str:
    """'nearest' or 'truncate': what the kernels' fp32 -> `dtype` cast does on `device` (probed with one kernel)."""
    import triton
    import triton.language as tl

    if dtype == torch.float32:
        return "nearest"

    @triton.jit
    def _cast(X, Y):
        tl.store(Y + tl.arange(0, 2), tl.load(X + tl.arange(0, 2)).to(Y.dtype.element_ty))

    # 1 + 3/4 ulp of the 16-bit type: rounds up to nearest, down when truncated.
    ulp = 2.0 ** -(7 if dtype == torch.bfloat16 else 10)
    x = torch.tensor([1.0 + 0.75 * ulp, -(1.0 + 0.75 * ulp)], device=device)
    y = torch.empty(2, dtype=dtype, device=device)
    _cast[(1,)](x, y)
    return "nearest" if y[0].item() > 1.0 + 0.5 * ulp else "truncate"


def round_to(x: torch.Tensor, dtype: torch.dtype, mode: str) -> torch.Tensor:
    """fp64 values rounded as the kernel rounds an fp32 value to `dtype`, returned in fp64."""
    f32 = x.to(torch.float32)
    if dtype == torch.float32:
        return f32.double()
    if mode == "truncate" and dtype == torch.bfloat16:
        bits = f32.view(torch.int32) & ~0xFFFF
        return bits.view(torch.float32).double()
    if mode == "truncate":
        raise ValueError("truncating fp16 casts are not emulated")
    return f32.to(dtype).double()


def _valid_rows(lengths, b, nq, nk, pad_queries, device):
    q_len = torch.full((b,), nq, device=device) if lengths is None else lengths.long()
    kv_len = torch.full((b,), nk, device=device) if lengths is None else lengths.long().clamp(max=nk)
    if not pad_queries:
        q_len = torch.full((b,), nq, device=device)
    rows = torch.arange(nq, device=device)[None, :] < q_len.clamp(max=nq)[:, None]
    cols = torch.arange(nk, device=device)[None, :] < kv_len[:, None]
    return rows[:, None, :, None], cols[:, None, None, :]


def emulated_attention(q, k, v, *, lengths=None, keep=None, p_eff=0.0, block_n=64, token_mask=None, scale=None):
    """(out as the kernel stores it, lse base 2) in fp64; `keep` the (B, H, Nq, Nk) dropout keep-mask."""
    dtype, mode = q.dtype, cast_rounding(q.dtype, q.device.type)
    b, h, nq, d = q.shape
    nk = k.shape[2]
    scale = d**-0.5 if scale is None else scale
    rows, cols = _valid_rows(lengths, b, nq, nk, nq == nk, q.device)
    allowed = cols.expand(b, h, nq, nk)
    if token_mask is not None:
        allowed = allowed & token_mask[None].to(q.device)
    s = (q.double() @ k.double().transpose(-1, -2)) * (scale * LOG2E)
    s = s.masked_fill(~allowed, float("-inf"))
    z = torch.ones_like(s) if keep is None else keep.double()
    m = torch.full((b, h, nq), float("-inf"), dtype=torch.float64, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(b, h, nq, d, dtype=torch.float64, device=q.device)
    for start in range(0, nk, block_n):
        blk = slice(start, min(start + block_n, nk))
        sb = s[..., blk]
        seen = allowed[..., blk].any(-1)  # the kernel visits a tile only where it holds an allowed key
        m_new = torch.where(seen, torch.maximum(m, sb.amax(-1)), m)
        p = torch.where(seen[..., None], torch.exp2(sb - m_new[..., None]), 0.0)
        alpha = torch.where(seen, torch.exp2(m - m_new), 1.0)
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + round_to(p * z[..., blk], dtype, mode) @ v.double()[..., blk, :]
        m = m_new
    valid = rows[..., 0] & (l > 0)
    out = torch.where(valid[..., None], acc / torch.where(valid, l, 1.0)[..., None] / (1.0 - p_eff), 0.0)
    lse = torch.where(valid, m + torch.log2(torch.where(valid, l, 1.0)), float("inf"))
    return round_to(out, dtype, mode), lse


def emulated_grads(q, k, v, do, out, lse, *, lengths=None, keep=None, p_eff=0.0, scale=None):
    """(dq, dk, dv) as the backward kernels compute and store them, in fp64, from the stored out and lse."""
    dtype, mode = q.dtype, cast_rounding(q.dtype, q.device.type)
    b, h, nq, d = q.shape
    nk = k.shape[2]
    scale = d**-0.5 if scale is None else scale
    rows, cols = _valid_rows(lengths, b, nq, nk, nq == nk, q.device)
    q64, k64, v64, do64 = (t.double() for t in (q, k, v, do))
    delta = (do64 * out.double()).sum(-1)
    s = (q64 @ k64.transpose(-1, -2)) * (scale * LOG2E)
    p = torch.where(cols & rows, torch.exp2(s - lse[..., None]), 0.0)
    c = 1.0 / (1.0 - p_eff)
    z = torch.ones_like(p) if keep is None else keep.double()
    dv = round_to(p * z * c, dtype, mode).transpose(-1, -2) @ do64
    dp = (do64 @ v64.transpose(-1, -2)) * z * c
    ds = round_to(p * (dp - delta[..., None]), dtype, mode)
    dq = torch.where(rows, scale * (ds @ k64), 0.0)
    dk = scale * (ds.transpose(-1, -2) @ q64)
    key_ok = cols.transpose(-1, -2)
    dk, dv = (torch.where(key_ok, g, 0.0) for g in (dk, dv))
    return tuple(round_to(g, dtype, mode) for g in (dq, dk, dv))


def probe_inputs(b: int, h: int, n: int, device="cpu") -> tuple[torch.Tensor, ...]:
    """(q, k, v, dO), fp32 with head dim 2n, for which every dropout decision shows in the output and gradients.

    Q = 0 makes every weight 1/n; K = V = [I 0] (key j is unit vector j); dO = [1 I]. Then out[i, j] = Z_ij c / n
    (forward's mask); dP_ij = 1, so dQ[i, j] = scale (Z_ij c - delta_i) / n with delta_i = sum_j out[i, j] (dQ's
    mask); dV[j, n + i] = Z_ij c / n (dK/dV's mask). q, k, v require grad.
    """
    eye = torch.eye(n, device=device).expand(b, h, n, n)
    zeros = torch.zeros(b, h, n, n, device=device)
    q = torch.zeros(b, h, n, 2 * n, device=device, requires_grad=True)
    k = torch.cat([eye, zeros], dim=-1).requires_grad_()
    v = torch.cat([eye, zeros], dim=-1).requires_grad_()
    return q, k, v, torch.cat([torch.ones_like(eye), eye], dim=-1)


def masks_from_outputs(out: torch.Tensor, dq: torch.Tensor, dv: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each kernel's keep-mask from the probe's out, dQ and dV; also the kept weights' scale c under 'scale'."""
    n = out.shape[2]
    weights = out.detach().double()[..., :n] * n  # Z c
    forward = weights > 0
    scale_c = weights[forward].mean().item()
    delta = weights.sum(-1, keepdim=True) / n
    dq_weights = dq.double()[..., :n] * n / (2 * n) ** -0.5 + delta
    dkdv_weights = dv.double()[..., n:].transpose(-1, -2) * n
    return {"forward": forward, "dq": dq_weights > scale_c / 2, "dkdv": dkdv_weights > scale_c / 2, "scale": scale_c}


def masks_from_kernels(attend, b: int, h: int, n: int, device="cpu") -> dict[str, torch.Tensor]:
    """The keep-mask (B, H, n, n) each kernel applied in one forward and backward of `attend(q, k, v)` on the
    probe inputs, and the scale c of the kept weights."""
    q, k, v, do = probe_inputs(b, h, n, device)
    out = attend(q, k, v)
    dq, dv = torch.autograd.grad(out, (q, v), do)
    return masks_from_outputs(out, dq, dv)


def binomial_sigma(p: float, n: int) -> float:
    """Standard deviation of a kept fraction over n independent decisions of probability p."""
    return math.sqrt(p * (1.0 - p) / n)
