"""`synthesizer`: attention weights synthesised without token-token dot products (Tay et al. 2020, "Synthesizer").

What it computes: out = softmax(B) V with the (N x N) logits B per head made without keys:

- `dense`: each query row makes its own row of logits by a two-layer MLP, B_i = W2 relu(W1 q_i + b1) + b2, with
  W1 (head_dim x hidden) and W2 (hidden x seq_len) per head. Cost O(N^2 hidden) time, O(N^2) memory per head.
- `random`: B = R, a (seq_len x seq_len) matrix per head, the same for every input; learned (`trainable`, default)
  or fixed after its random draw. Cost O(N^2 d) time and O(N^2) memory per head, no dependence on q or k at all;
  heads * seq_len^2 parameters per layer (32M at 8 heads and LRA ListOps' 2001 tokens).

It does not approximate softmax(QK^T) V (it replaces it; keys only mark padding), so its cost stays quadratic: the
point is what attention needs to compute, not speed. Parameters are seq_len wide (capabilities.fixed_seq_len); a
shorter input uses the first N rows and columns, a longer one is an error. Weights start as LRA's lecun-normal
kernels (N(0, 1/fan_in); for R, fan_in = seq_len) with zero biases.

Options: `variant` ('dense' or 'random'; dense by default), `hidden` (the dense MLP's width; default head_dim, as in
LRA's dense synthesizer), `trainable` (random variant: learn R, default True). Padding is exact: the logits of padded
keys are -inf before the softmax. Padded query rows and rows with no real key are zero. Attention dropout applies to
the probabilities during training.

Sources. Only the LRA paper has a Synthesizer row; the LRA repo's lra_benchmarks/models/synthesizer/
synthesizer_attention.py applies attention dropout, as here. Its encoder (synthesizer.py) defaults to
synthesizer_mode='random' with ignore_dot_product=False: a learned random matrix added to the dot-product logits
(R + Q K^T / sqrt(d)), which neither variant here computes; `dense` is the paper's Dense Synthesizer.
"""

from __future__ import annotations

import torch
from torch import nn

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import zero_padded_inputs
from attention_impls.registry import register_backend

_VARIANTS = ("dense", "random")


@register_backend("synthesizer")
class SynthesizerAttention(AttentionBackend):
    """Synthesizer attention: dense (per-token MLP logits) or random (a learned N x N matrix per head)."""

    capabilities = Capabilities(
        exact=False,
        fixed_seq_len=True,
        scores_matrix=True,
        notes="Tay et al. 2020; O(N^2), no QK^T",
        extra={"unused_inputs": ("k",)},  # keys only mark padding (the random variant ignores q too)
    )

    def __init__(self, *args, variant: str = "dense", hidden: int | None = None, trainable: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        heads, head_dim, seq_len = self.heads, self.head_dim, self.seq_len
        if variant not in _VARIANTS:
            raise ValueError(f"synthesizer variant must be one of {', '.join(_VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.hidden = int(hidden) if hidden is not None else head_dim
        if self.hidden < 1:
            raise ValueError(f"synthesizer hidden must be >= 1, got {hidden}")
        self.trainable = bool(trainable)
        if variant == "dense":
            self.w1 = nn.Parameter(torch.randn(heads, head_dim, self.hidden) * head_dim**-0.5)
            self.b1 = nn.Parameter(torch.zeros(heads, 1, self.hidden))
            self.w2 = nn.Parameter(torch.randn(heads, self.hidden, seq_len) * self.hidden**-0.5)
            self.b2 = nn.Parameter(torch.zeros(heads, 1, seq_len))
        else:
            random = torch.randn(heads, seq_len, seq_len) * seq_len**-0.5
            if self.trainable:
                self.random = nn.Parameter(random)
            else:
                self.register_buffer("random", random)

    def forward(self, q, k, v, key_padding_mask=None):
        n_q, n_k = q.shape[2], k.shape[2]
        if max(n_q, n_k) > self.seq_len:
            raise ValueError(
                f"synthesizer was built for sequences of at most {self.seq_len} tokens (its weights are that wide) "
                f"but got {max(n_q, n_k)}; build it with seq_len >= {max(n_q, n_k)} (the model's full padded length)"
            )
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        if self.variant == "dense":
            hid = torch.relu(torch.matmul(q, self.w1.to(q.dtype)) + self.b1.to(q.dtype))  # (B, H, Nq, hidden)
            logits = torch.matmul(hid, self.w2[:, :, :n_k].to(hid.dtype)) + self.b2[:, :, :n_k].to(hid.dtype)
        else:
            logits = self.random[:, :n_q, :n_k].unsqueeze(0).expand(q.shape[0], -1, -1, -1)
        return self.softmax_attend(logits, v, key_padding_mask)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", variant={self.variant}, hidden={self.hidden}, trainable={self.trainable}"
