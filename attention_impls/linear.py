"""`linear`: the Linear Transformer's kernelised attention (Katharopoulos et al. 2020, "Transformers are RNNs").

What it computes (non-causal), with the feature map phi(x) = elu(x) + 1 (positive everywhere):

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

It replaces softmax's similarity exp(q.k) by the kernel phi(q).phi(k), which factorises, so the N x N matrix is never
formed: cost O(N d^2) time and O(d^2) extra memory per head instead of O(N^2). It approximates softmax attention only
in spirit (a different, smoother similarity), not numerically; no scale is applied (the method has none, so the
`scale` argument is ignored).

Padding: padded keys get phi(k) = 0 (selected, so a NaN in padding stays out), so they are excluded exactly from
both sums. Padded query rows and rows with no real key are zero. The sums run in fp32 (fp64 for fp64 inputs) with
autocast off: the denominator is a long sum of positives.

Sources. The method has no hyperparameters beyond `eps` (1e-6: LRA's linear_attention.py, linear_attention(eps=1e-6),
also the normalisation_eps of the FlashAttention authors' HazyResearch/fly src/models/attention/linear_attention.py).
There is no attention matrix, so there is no attention dropout, and none of the reference codes applies one: LRA's
lra_benchmarks/models/linear_transformer/linear_attention.py deletes its dropout_rate ("TODO: figure out how to apply
attention dropout"), and mlpen/Nystromformer LRA/code/attention_linear.py (the FlashAttention recipe's code) has
none. A run asking for it trains without it and says so (capabilities.dropout_reference; the record's
attention_dropout_applied: false).

Option `normalize` (default True: the paper's, LRA's and fly's form above). False is the FlashAttention recipe's code
as it stands: mlpen/Nystromformer attention_linear.py scales phi(Q) and phi(K) by N^(-1/4) each (`Q.size(2)`, the
padded sequence length) and returns phi(Q) (phi(K)^T V) / sqrt(N) with no normaliser, padded keys and values zeroed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import safe_key_mask, score_dtype, zero_padded_inputs, zero_padded_outputs
from attention_impls.registry import register_backend


@register_backend("linear")
class LinearAttention(AttentionBackend):
    """Linear Transformer attention, elu(x)+1 features, non-causal. Options: `eps` (denominator guard, 1e-6),
    `normalize` (True; False: the Nystromformer code's phi(Q) (phi(K)^T V) / sqrt(N_padded))."""

    capabilities = Capabilities(
        exact=False,
        dropout=False,
        dropout_reference="LRA linear_attention.py deletes dropout_rate; mlpen/Nystromformer attention_linear.py",
        notes="Katharopoulos et al. 2020; O(N d^2)",
    )

    def __init__(self, *args, eps: float = 1e-6, normalize: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if eps < 0:
            raise ValueError(f"linear attention eps must be >= 0, got {eps}")
        if not isinstance(normalize, bool):
            raise ValueError(f"linear attention normalize must be true or false, got {normalize!r}")
        self.eps = float(eps)
        self.normalize = normalize

    def forward(self, q, k, v, key_padding_mask=None):
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        compute = score_dtype(q.dtype)
        with torch.autocast(device_type=q.device.type, enabled=False):
            phi_q = F.elu(q.to(compute)) + 1.0
            phi_k = F.elu(k.to(compute)) + 1.0
            if key_padding_mask is not None:
                phi_k = torch.where(safe_key_mask(key_padding_mask)[:, None, :, None], phi_k, phi_k.new_zeros(()))
            kv = torch.matmul(phi_k.transpose(-2, -1), v.to(compute))  # (B, H, d, d_v)
            if self.normalize:
                denom = torch.matmul(phi_q, phi_k.sum(dim=2).unsqueeze(-1)) + self.eps  # (B, H, N, 1)
            else:
                denom = math.sqrt(k.shape[-2])
            out = torch.matmul(phi_q, kv) / denom
        return zero_padded_outputs(out.to(v.dtype), key_padding_mask)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", eps={self.eps}, normalize={self.normalize}"
