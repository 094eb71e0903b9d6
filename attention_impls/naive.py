"""`naive`: softmax(Q K^T * scale) V with the N x N score matrix materialised; the reference every backend meets.

Matrix products run in the input dtype; the softmax runs in fp32 (fp64 for fp64 inputs). Memory is O(N^2) per head.
"""

from __future__ import annotations

import torch

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import score_dtype, zero_padded_inputs
from attention_impls.registry import register_backend


@register_backend("naive")
class NaiveAttention(AttentionBackend):
    """Exact attention, materialised. Options: `scale` (default 1/sqrt(head_dim))."""

    capabilities = Capabilities(scores_matrix=True, any_key_mask=True, notes="the reference; O(N^2) memory")

    def forward(self, q, k, v, key_padding_mask=None):
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores = scores.to(score_dtype(scores.dtype)) * self.scale
        return self.softmax_attend(scores, v, key_padding_mask)
