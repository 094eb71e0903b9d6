"""`flash_attn`: the flash-attn package (Dao et al.), registered only when `import flash_attn` works.

The package takes (batch, seq, heads, head_dim), so q, k, v are transposed in and out. Key padding goes through its
variable-length entry point: the real tokens of every row are packed (cu_seqlens), attended, and scattered back, so
padded positions cost nothing; rows with no key and padded query rows come back zero. CUDA, fp16/bf16.
"""

from __future__ import annotations

import torch

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import lengths_from_mask, zero_padded_outputs
from attention_impls.registry import register_backend

try:  # optional peer: absent on most machines
    import flash_attn  # noqa: F401
    from flash_attn import flash_attn_func, flash_attn_varlen_func
except Exception:  # ImportError, or a build that fails to load its CUDA extension
    flash_attn_func = flash_attn_varlen_func = None


def _cu_seqlens(lengths: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(lengths.to(torch.int32).cumsum(0, dtype=torch.int32), (1, 0))


if flash_attn_func is not None:

    @register_backend("flash_attn")
    class FlashAttnPackage(AttentionBackend):
        """The flash-attn package's kernel (FlashAttention-2/3). Options: `scale`."""

        capabilities = Capabilities(
            devices=("cuda",),
            dtypes=(torch.float16, torch.bfloat16),
            max_head_dim=256,
            notes="flash-attn package",
        )

        def forward(self, q, k, v, key_padding_mask=None):
            p = self.dropout if self.training else 0.0
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # (B, N, H, D)
            if key_padding_mask is None:
                out = flash_attn_func(qt, kt, vt, dropout_p=p, softmax_scale=self.scale)
                return out.transpose(1, 2)
            batch, nq = q.shape[0], q.shape[2]
            nk = k.shape[2]
            k_len = lengths_from_mask(key_padding_mask)
            q_len = k_len if nq == nk else torch.full_like(k_len, nq)
            q_len = torch.where(k_len > 0, q_len, torch.zeros_like(q_len))  # rows with no key produce zeros
            q_mask = torch.arange(nq, device=q.device)[None, :] < q_len[:, None]
            k_mask = key_padding_mask
            out_packed = flash_attn_varlen_func(
                qt[q_mask],
                kt[k_mask],
                vt[k_mask],
                _cu_seqlens(q_len),
                _cu_seqlens(k_len),
                int(q_len.max()),
                int(k_len.max()),
                dropout_p=p,
                softmax_scale=self.scale,
            )
            out = qt.new_zeros(batch, nq, *qt.shape[2:])
            out[q_mask] = out_packed
            return zero_padded_outputs(out.transpose(1, 2), key_padding_mask)
