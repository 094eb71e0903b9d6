"""`local`: softmax attention restricted to a window of nearby keys (the LRA paper's "Local Attention" row).

What it computes: exact softmax(Q K^T * scale) V over an allowed set of keys per query, zero weight elsewhere:
- mode 'blocked': the sequence is cut into non-overlapping windows of `window` tokens ([0, w), [w, 2w), ...); a
  token attends to the keys of its own window (the LRA repo's local attention, block-diagonal mask).
- mode 'sliding': a token i attends to the keys j with |i - j| <= window // 2 (a band of width window + 1).
What it approximates: full attention, by dropping every query-key pair outside the window.
Cost: O(N * window) time and memory. Queries are processed in chunks with only the keys those chunks can see, so no
N x N matrix is ever built. Padded keys get no weight (exactly); padded query rows and rows whose window holds no
real key are zero. N need not be a multiple of the window: the sequence is padded internally and the pad is masked.
The window is the backend's `token_mask` (capabilities.exact_on_mask): the numerics study compares it with naive
attention under that mask, and `density` is the window's share of the N x N pairs. Attention dropout applies to
the window's probabilities in training, as in both reference codes below.

Sources. The FlashAttention paper's "Local Attention" row is not in its recipe's code (mlpen/Nystromformer LRA/code/
has no local attention); its authors' LRA baselines code, HazyResearch/fly, has it: src/models/attention/
local_attention.py, a sliding band of keys i - local_context // 2 .. i + (local_context + 1) // 2 - 1 (its
fast-transformers `local_dot_product`, as its `need_weights` branch maps it; its docstring says |i - j| <
local_context / 2) with attention dropout, and configs/experiment/lra/<task>/local.yaml: local_context 64 for text,
image and pathfinder, 128 for listops, 256 for retrieval, attention dropout 0.1. Defaults here: mode 'sliding',
window 64 (the three tasks' value; the fa-paper presets of ListOps and Retrieval set fly's 128 and 256; here |i - j|
<= window // 2 keeps window + 1 keys to fly's window, one more). The LRA paper's row is the LRA repo's
lra_benchmarks/models/local/local.py: non-overlapping blocks of block_size=50 (the encoder's default, never
overridden by its configs), attention dropout applied (`attention: {local: {mode: blocked, window: 50}}`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention_impls._bucketed import check_positive_int, pad_seq, real_tokens
from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import masked_softmax_lse, score_dtype, zero_padded_inputs, zero_padded_outputs
from attention_impls.registry import register_backend
from lra.core.numbers import ceil_div

MODES = ("blocked", "sliding")


@register_backend("local")
class LocalAttention(AttentionBackend):
    """Windowed attention. Options: `window` (tokens, default 64), `mode` ('sliding', default, or 'blocked')."""

    capabilities = Capabilities(exact=False, exact_on_mask=True, notes="windowed softmax; O(N * window)")

    def __init__(self, *args, window: int = 64, mode: str = "sliding", **kwargs):
        super().__init__(*args, **kwargs)
        self.window = check_positive_int("window", window, "local")
        if mode not in MODES:
            raise ValueError(f"local: mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode

    def token_mask(self, seq_q: int, seq_k: int) -> torch.Tensor:
        """The window as a bool (1, seq, seq) mask: same block of `window` tokens, or |i - j| <= window // 2."""
        if seq_q != seq_k:
            raise ValueError(f"local attention needs equal query and key lengths, got {seq_q} and {seq_k}")
        i, j = torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :]
        if self.mode == "blocked":
            return (i // self.window == j // self.window)[None]
        return ((i - j).abs() <= self.window // 2)[None]

    def density(self, seq_len: int | None = None) -> float:
        """The share of (query, key) pairs inside the window, counted without building the mask."""
        n = self.seq_len if seq_len is None else seq_len
        if self.mode == "blocked":
            w = min(self.window, n)
            pairs = (n // w) * w * w + (n % w) ** 2
        else:
            half = min(self.window // 2, n - 1)
            pairs = n + 2 * (half * n - half * (half + 1) // 2)  # the diagonal and half off-diagonals each side
        return pairs / (n * n)

    def forward(self, q, k, v, key_padding_mask=None):
        if q.shape[2] != k.shape[2] or k.shape[2] != v.shape[2]:
            raise ValueError(
                f"local attention aligns queries and keys by position, so q, k and v need the same sequence length; "
                f"got {q.shape[2]}, {k.shape[2]}, {v.shape[2]}"
            )
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
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
        return torch.matmul(self.drop(probs).to(v_chunks.dtype), v_chunks)

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
