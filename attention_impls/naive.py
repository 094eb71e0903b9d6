"""`naive`: softmax(Q K^T * scale) V with the N x N score matrix materialised; the reference every backend meets.

Matrix products run in the input dtype; the softmax runs in fp32 (fp64 for fp64 inputs). Memory is O(N^2) per head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention_impls.masking import safe_key_mask, zero_padded_outputs
from attention_impls.registry import AttentionBackend, Capabilities, register_backend


@register_backend("naive")
class NaiveAttention(AttentionBackend):
    """Exact attention, materialised. Options: `scale` (default 1/sqrt(head_dim))."""

    capabilities = Capabilities(notes="the reference; O(N^2) memory")

    def forward(self, q, k, v, key_padding_mask=None):
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) * self.scale
        if key_padding_mask is not None:
            scores = scores.masked_fill(~safe_key_mask(key_padding_mask)[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if self.training and self.dropout > 0:
            probs = F.dropout(probs, p=self.dropout)
        out = torch.matmul(probs.to(v.dtype), v)
        return zero_padded_outputs(out, key_padding_mask)
