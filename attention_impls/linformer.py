"""`linformer`: low-rank attention by learned sequence projections (Wang et al. 2020, "Linformer").

What it computes: keys and values are projected along the sequence to k rows by learned (k x N) matrices E and F,

    out = softmax(Q (E K)^T * scale) (F V)

which approximates softmax attention by a rank-k one (the paper's argument: the attention matrix is close to low
rank). Cost O(N k d) time and O(N k) memory per head instead of O(N^2). E and F are shared across heads (the paper's
headwise sharing); `share_kv` makes F = E (the paper's key-value sharing; LRA's Linformer shares one kernel).

Options: `k` (k >= N is allowed, it just saves nothing), `share_kv`, `drop_attention` (apply model.attention_dropout to
the N x k probabilities), `proj_init` (E and F drawn N(0, 1/seq_len), 'seq_len', or N(0, 1/k), 'k'). Defaults are the
FlashAttention recipe's reference code (github.com/mlpen/Nystromformer, LRA/code/): k 256 from lra_config.py's
"linformer-256" entry of every task (linformer_k); share_kv True (attention_linformer.py lines 25-26 project K and V by
the same E); drop_attention False (attention_linformer.py lines 24-35 apply no attention dropout, unlike its
SoftmaxAttention in attention.py line 20), so a run asking for attention dropout trains without it and says so (the
record's attention_dropout_applied: false). The LRA repo's Linformer applies it (linformer_attention.py passes
dropout_rate to dot_product_attention) with k = 16 (its low_rank_features default, which linformer.py never overrides):
`attention: {linformer: {k: 16, drop_attention: true}}`. Deviations kept: that reference has one E per head (num_head,
k, seq_len), shared by all layers (a class attribute), initialised N(0, 0.02^2); here one E per layer shared by the
heads (the paper's headwise sharing), initialised N(0, 1/seq_len) (LRA's lecun-normal; 0.022 at 2,048 tokens). The
projections are N wide, so the backend is built for the model's full padded length `seq_len`
(capabilities.fixed_seq_len); a shorter input uses the first N columns (the same as zero-padding it), a longer one is an
error. The FlashAttention authors' baseline code (HazyResearch/fly, src/models/attention/linformer_attention.py,
which `--preset fly` follows) keeps E and F apart (share_kv False) and draws them N(0, 1/k), "the random projection
interpretation": `share_kv: false, proj_init: k`, which starts the projected keys sqrt(N / k) times larger (4x at 2,000
tokens and k = 128).

Padding (an approximation, unlike softmax masking): padded keys and values are replaced by zeros before the projection
(a selection, so even a NaN there never reaches the output). But the k projected rows are mixtures of tokens, not
tokens, so they cannot be masked: every projected row keeps a softmax weight, a short sequence's projected keys are sums
over fewer tokens (smaller, differently normalised rows than a full one's), and a projected row made only of padding
still scores 0 rather than -inf. LRA's own Linformer ignores the padding mask altogether. Padded query rows and rows
with no real key are zero.
"""

from __future__ import annotations

import torch
from torch import nn

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import score_dtype, zero_padded_inputs
from attention_impls.registry import register_backend

_PROJ_INITS = ("seq_len", "k")  # the variance of E's and F's entries: 1 / seq_len or 1 / k


@register_backend("linformer")
class LinformerAttention(AttentionBackend):
    """Linformer: K and V projected along the sequence to k rows. Options: k=256, share_kv=True,
    drop_attention=False, proj_init='seq_len' ('k': fly's N(0, 1/k))."""

    capabilities = Capabilities(
        exact=False,
        fixed_seq_len=True,
        dropout_reference="mlpen/Nystromformer LRA/code/attention_linformer.py; drop_attention=true applies it",
        notes="Wang et al. 2020; O(N k d); attention dropout off by default (drop_attention)",
    )

    def __init__(
        self,
        *args,
        k: int = 256,
        share_kv: bool = True,
        drop_attention: bool = False,
        proj_init: str = "seq_len",
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.drop_attention = bool(drop_attention)
        if not self.drop_attention:
            self.dropout = 0.0  # as the reference code (see the module docstring)
        if k < 1:
            raise ValueError(f"linformer k (projected length) must be >= 1, got {k}")
        self.k = int(k)
        self.share_kv = bool(share_kv)
        if proj_init not in _PROJ_INITS:
            raise ValueError(f"linformer proj_init must be one of {', '.join(_PROJ_INITS)}, got {proj_init!r}")
        self.proj_init = proj_init
        std = (self.seq_len if proj_init == "seq_len" else self.k) ** -0.5  # lecun-normal (fan-in N), or fly's 1/k
        self.E = nn.Parameter(torch.randn(self.k, self.seq_len) * std)
        self.F = None if self.share_kv else nn.Parameter(torch.randn(self.k, self.seq_len) * std)

    def forward(self, q, k, v, key_padding_mask=None):
        n = k.shape[2]
        if n > self.seq_len:
            raise ValueError(
                f"linformer was built for sequences of at most {self.seq_len} tokens (its projections are that wide) "
                f"but got {n}; build it with seq_len >= {n} (the model's full padded length)"
            )
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        e = self.E[:, :n]
        f = e if self.F is None else self.F[:, :n]
        k_proj = torch.matmul(e.to(k.dtype), k)  # (B, H, k, d)
        v_proj = torch.matmul(f.to(v.dtype), v)
        scores = torch.matmul(q, k_proj.transpose(-2, -1))
        scores = scores.to(score_dtype(scores.dtype)) * self.scale
        return self.softmax_attend(scores, v_proj, key_padding_mask, mask_keys=False)  # projected keys: no padding

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", k={self.k}, share_kv={self.share_kv}, drop_attention={self.drop_attention}, "
            f"proj_init={self.proj_init}"
        )
