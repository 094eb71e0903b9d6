"""`flash_blockwise`: the FlashAttention algorithm in plain PyTorch, tile by tile: the readable version of the kernels.

Forward: for each query tile, walk the key tiles below the longest row length, keeping a running row maximum m, a
running sum l of exp(s - m) and an unnormalised output; rescale both by exp(m_old - m_new) when the maximum grows; at
the end out = acc / l and lse = m + log(l). Backward: delta = rowsum(dO * O), then for each tile pair recompute
P = exp(S - lse), dV += P^T dO, dP = dO V^T, dS = P * (dP - delta), dQ += scale * dS K, dK += scale * dS^T Q. (The
Triton kernels split this double loop into a dK/dV pass and a dQ pass so that no two programs write one gradient.)

Exact; memory O(N * tile) per head; runs on CPU and CUDA in any float dtype (tiles accumulate in fp32, fp64 for fp64).
Dropout uses its own counter-based hash of (seed, head, row, column), so the backward redraws the same mask; it is
not the kernels' Philox stream. `tile_mask` (heads or 1, query tiles, key tiles) restricts it to a block layout.
"""

from __future__ import annotations

import torch

from attention_impls.base import ALL_FLOAT, AttentionBackend, Capabilities
from attention_impls.flash import draw_seed
from attention_impls.masking import lengths_from_mask, zero_padded_inputs
from attention_impls.registry import register_backend

_M32 = 0xFFFFFFFF


def hash_uniform(seed: int, bh: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Uniform [0, 1) numbers from a 32-bit integer hash (murmur3's finaliser) of (seed, bh, row, col), broadcast."""
    x = (rows * 0x9E3779B1 + cols * 0x85EBCA77 + bh * 0xC2B2AE3D + seed) & _M32
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _M32  # int64 products wrap; the low 32 bits stay exact
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _M32
    x = x ^ (x >> 16)
    return x.to(torch.float64) / 2.0**32


def _tile_keep(seed, heads, b0, rows, cols, p, device):
    """Keep-mask (B, H, len(rows), len(cols)) of one tile pair."""
    batch = torch.arange(b0, device=device, dtype=torch.int64)[:, None, None, None]
    head = torch.arange(heads, device=device, dtype=torch.int64)[None, :, None, None]
    u = hash_uniform(seed, batch * heads + head, rows[:, None].long(), cols[None, :].long())
    return u >= p


class _Blockwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, kv_len, q_len, scale, p, seed, bm, bn, tile_mask):
        B, H, Nq, _ = q.shape
        Nk = k.shape[2]
        acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
        out = torch.zeros(q.shape, dtype=acc_t, device=q.device)
        lse = torch.full((B, H, Nq), float("inf"), dtype=acc_t, device=q.device)
        k_end = int(kv_len.max().item()) if B else 0
        for qs in range(0, Nq, bm):
            rows = torch.arange(qs, min(qs + bm, Nq), device=q.device)
            qb = q[:, :, rows].to(acc_t)
            m = torch.full((B, H, len(rows)), float("-inf"), dtype=acc_t, device=q.device)
            l = torch.zeros_like(m)
            acc = torch.zeros(B, H, len(rows), v.shape[-1], dtype=acc_t, device=q.device)
            for ks in range(0, min(Nk, k_end), bn):
                allowed = _allowed(kv_len, tile_mask, qs // bm, ks // bn, ks, min(ks + bn, Nk), q.device)
                if allowed is None:
                    continue
                cols = torch.arange(ks, min(ks + bn, Nk), device=q.device)
                s = (qb @ k[:, :, cols].to(acc_t).transpose(-1, -2)) * scale
                s = s.masked_fill(~allowed, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                pt = torch.exp(s - m_safe[..., None])
                alpha = torch.exp(m - m_safe)
                l = l * alpha + pt.sum(-1)
                if p > 0:
                    pt = torch.where(_tile_keep(seed, H, B, rows, cols, p, q.device), pt / (1 - p), 0.0)
                acc = acc * alpha[..., None] + pt.to(v.dtype).to(acc_t) @ v[:, :, cols].to(acc_t)
                m = m_new
            valid = (rows[None, None, :] < q_len[:, None, None]) & (l > 0)
            l_safe = torch.where(valid, l, torch.ones_like(l))
            out[:, :, rows] = torch.where(valid[..., None], acc / l_safe[..., None], torch.zeros_like(acc))
            lse[:, :, rows] = torch.where(valid, m + torch.log(l_safe), torch.full_like(l, float("inf")))
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse, kv_len, q_len, tile_mask)
        ctx.params = (scale, p, seed, bm, bn)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse, kv_len, q_len, tile_mask = ctx.saved_tensors
        scale, p, seed, bm, bn = ctx.params
        B, H, Nq, _ = q.shape
        Nk = k.shape[2]
        acc_t = lse.dtype
        delta = (do.to(acc_t) * out.to(acc_t)).sum(-1)
        dq = torch.zeros(q.shape, dtype=acc_t, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc_t, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc_t, device=q.device)
        k_end = int(kv_len.max().item()) if B else 0
        for qs in range(0, Nq, bm):
            rows = torch.arange(qs, min(qs + bm, Nq), device=q.device)
            qb, dob = q[:, :, rows].to(acc_t), do[:, :, rows].to(acc_t)
            for ks in range(0, min(Nk, k_end), bn):
                allowed = _allowed(kv_len, tile_mask, qs // bm, ks // bn, ks, min(ks + bn, Nk), q.device)
                if allowed is None:
                    continue
                cols = torch.arange(ks, min(ks + bn, Nk), device=q.device)
                kb, vb = k[:, :, cols].to(acc_t), v[:, :, cols].to(acc_t)
                s = (qb @ kb.transpose(-1, -2)) * scale
                pt = torch.exp(s - lse[:, :, rows, None]).masked_fill(~allowed, 0.0)
                dp = dob @ vb.transpose(-1, -2)
                pd = pt
                if p > 0:
                    keep = _tile_keep(seed, H, B, rows, cols, p, q.device)
                    pd = torch.where(keep, pt / (1 - p), 0.0)
                    dp = torch.where(keep, dp / (1 - p), 0.0)
                ds = pt * (dp - delta[:, :, rows, None])
                dv[:, :, cols] += pd.transpose(-1, -2) @ dob
                dk[:, :, cols] += (ds.transpose(-1, -2) @ qb) * scale
                dq[:, :, rows] += (ds @ kb) * scale
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None, None, None, None


def _allowed(kv_len, tile_mask, qt, kt, k0, k1, device):
    """Allowed (B, H or 1, 1, cols) pairs of one tile pair, or None when the tile pair is skipped entirely."""
    allowed = (torch.arange(k0, k1, device=device)[None, :] < kv_len[:, None])[:, None, None, :]
    if tile_mask is not None:
        kept = tile_mask[:, qt, kt]
        if not bool(kept.any()):
            return None
        allowed = allowed & kept[None, :, None, None]
    return allowed


def blockwise_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    block_m: int = 64,
    block_n: int = 64,
    tile_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Blockwise exact attention with the interface's padding rules (see the module docstring)."""
    B, _, Nq, _ = q.shape
    Nk = k.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    full_k = torch.full((B,), Nk, device=q.device, dtype=torch.int64)
    kv_len = full_k if lengths is None else lengths.to(torch.int64).clamp(max=Nk)
    q_len = kv_len.clamp(max=Nq) if (lengths is not None and Nq == Nk) else torch.full_like(full_k, Nq)
    if tile_mask is not None:
        tile_mask = tile_mask.to(device=q.device, dtype=torch.bool)
    return _Blockwise.apply(q, k, v, kv_len, q_len, scale, dropout_p, seed, block_m, block_n, tile_mask)


@register_backend("flash_blockwise")
class FlashBlockwise(AttentionBackend):
    """The FlashAttention algorithm tile by tile in PyTorch (readable reference of the kernels). Options: `scale`,
    `block_m`, `block_n` (tile sizes)."""

    capabilities = Capabilities(dtypes=ALL_FLOAT, notes="pure-PyTorch tiles; slow; the kernels' algorithm")

    def __init__(self, *args, block_m: int = 64, block_n: int = 64, **kwargs):
        super().__init__(*args, **kwargs)
        if block_m < 1 or block_n < 1:
            raise ValueError(f"block_m and block_n must be positive, got {block_m}, {block_n}")
        self.block_m, self.block_n = int(block_m), int(block_n)

    def tile_shape(self, dtype: torch.dtype, device_type: str) -> tuple[int, int]:
        """(block_m, block_n), the same on every device and dtype."""
        return self.block_m, self.block_n

    def forward(self, q, k, v, key_padding_mask=None):
        lengths = lengths_from_mask(key_padding_mask) if key_padding_mask is not None else None
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        p = self.dropout if self.training else 0.0
        return blockwise_attention(
            q,
            k,
            v,
            lengths,
            scale=self.scale,
            dropout_p=p,
            seed=draw_seed() if p > 0 else 0,
            block_m=self.block_m,
            block_n=self.block_n,
        )
