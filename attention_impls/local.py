"""`local`: softmax attention restricted to a window of nearby keys (the LRA paper's "Local Attention" row).

What it computes: exact softmax(Q K^T * scale) V over an allowed set of keys per query, zero weight elsewhere:
- mode 'blocked': the sequence is cut into non-overlapping windows of `window` tokens ([0, w), [w, 2w), ...); a
  token attends to the keys of its own window (the LRA repo's local attention, block-diagonal mask).
- mode 'sliding': a token i attends to the keys j with |i - j| <= window // 2 (a band of width window + 1).
What it approximates: full attention, by dropping every query-key pair outside the window.
Cost: O(N * window) time and memory. Queries are processed in chunks with only the keys those chunks can see, so no
N x N matrix is ever built. Padded keys get no weight (exactly); padded query rows and rows whose window holds no
real key are zero. N need not be a multiple of the window: the sequence is padded internally and the pad is masked.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention_impls._bucketed import (
    ceil_div,
    check_positive_int,
    masked_softmax_lse,
    pad_seq,
    real_tokens,
    score_dtype,
)
from attention_impls.masking import zero_padded_outputs
from attention_impls.registry import AttentionBackend, Capabilities, register_backend

MODES = ("blocked", "sliding")


@register_backend("local")
class LocalAttention(AttentionBackend):
    """Windowed attention. Options: `window` (tokens, default 256), `mode` ('blocked' or 'sliding')."""

    capabilities = Capabilities(exact=False, notes="windowed softmax; O(N * window)")

    def __init__(
        self,
        heads: int,
        head_dim: int,
        seq_len: int,
        dropout: float = 0.0,
        scale: float | None = None,
        window: int = 256,
        mode: str = "blocked",
    ):
        super().__init__(heads, head_dim, seq_len, dropout, scale)
        self.window = check_positive_int("window", window, "local")
        if mode not in MODES:
            raise ValueError(f"local: mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode

    def forward(self, q, k, v, key_padding_mask=None):
        if q.shape[2] != k.shape[2] or k.shape[2] != v.shape[2]:
            raise ValueError(
                f"local attention aligns queries and keys by position, so q, k and v need the same sequence length; "
                f"got {q.shape[2]}, {k.shape[2]}, {v.shape[2]}"
            )
        out = (
            self._blocked(q, k, v, key_padding_mask)
            if self.mode == "blocked"
            else self._sliding(q, k, v, key_padding_mask)
        )
        return zero_padded_outputs(out, key_padding_mask)

    def _attend(self, q_chunks, k_chunks, v_chunks, allowed):
        """Masked softmax attention of each query chunk to its key chunk: (..., c, d) x (..., m, d) -> (..., c, dv)."""
        scores = torch.matmul(q_chunks, k_chunks.transpose(-2, -1))
        scores = scores.to(score_dtype(scores.dtype)) * self.scale
        probs, _ = masked_softmax_lse(scores, allowed)
        if self.training and self.dropout > 0:
            probs = F.dropout(probs, p=self.dropout)
        return torch.matmul(probs.to(v_chunks.dtype), v_chunks)

    def _blocked(self, q, k, v, key_padding_mask):
        b, h, n, d = q.shape
        w = min(self.window, n)  # a window longer than the sequence is one block of n tokens
        nb = ceil_div(n, w)
        npad = nb * w
        real = real_tokens(key_padding_mask, b, n, npad, q.device)
        qb, kb, vb = (pad_seq(t, npad).reshape(b, h, nb, w, t.shape[-1]) for t in (q, k, v))
        allowed = real.reshape(b, 1, nb, 1, w)
        out = self._attend(qb, kb, vb, allowed)
        return out.reshape(b, h, npad, v.shape[-1])[:, :, :n]

    def _sliding(self, q, k, v, key_padding_mask):
        b, h, n, d = q.shape
        half = min(self.window // 2, n - 1)
        c = max(half, 1)  # query chunk; its queries see keys from the previous, own and next chunk
        nc = ceil_div(n, c)
        npad = nc * c
        real = real_tokens(key_padding_mask, b, n, npad, q.device)
        qc = pad_seq(q, npad).reshape(b, h, nc, c, d)
        # Keys padded by one chunk on each side; window i covers original positions [i*c - c, i*c + 2c).
        kp = F.pad(k, (0, 0, c, npad - n + c))
        vp = F.pad(v, (0, 0, c, npad - n + c))
        kc = kp.unfold(2, 3 * c, c).transpose(-2, -1)  # (b, h, nc, 3c, d)
        vc = vp.unfold(2, 3 * c, c).transpose(-2, -1)
        real_c = F.pad(real, (c, c), value=False).unfold(1, 3 * c, c)  # (b, nc, 3c)
        q_pos = torch.arange(npad, device=q.device).reshape(nc, c, 1)
        k_pos = (torch.arange(nc, device=q.device) * c - c).reshape(nc, 1, 1) + torch.arange(3 * c, device=q.device)
        band = (q_pos - k_pos).abs() <= half  # (nc, c, 3c)
        allowed = band[None, None] & real_c[:, None, :, None, :]
        out = self._attend(qc, kc, vc, allowed)
        return out.reshape(b, h, npad, v.shape[-1])[:, :, :n]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}, mode={self.mode}"
