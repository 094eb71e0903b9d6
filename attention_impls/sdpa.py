"""The PyTorch SDPA peers: `torch.nn.functional.scaled_dot_product_attention` pinned to one backend each.

`sdpa_flash` (FlashAttention-2 inside PyTorch), `sdpa_cudnn` (cuDNN's fused attention), `sdpa_mem_efficient`
(xformers' memory-efficient kernel) and `sdpa_math` (the composite reference, the only one that runs on CPU).
Pinning means a shape the chosen kernel cannot take is an error, never a silent fall-back to another kernel.

The flash and cuDNN kernels take no arbitrary mask, so key padding reaches them as an extra head-dim column: q gets
a column of c, k a column of 0 (real) or -30000 / (scale c) (padding), v a column of zeros, padded up to a multiple of
8, so a padded key's score is -30000 after the kernel's scale. exp() of it underflows to exactly 0, so the result is
exact; it costs the wider head dim. c = sqrt(30000 / scale) keeps both factors finite in fp16 at every head dim
(under 700): -30000 / scale alone overflows fp16 from head dim 5 on, and an infinite score is NaN in
FlashAttention-2's non-causal forward wherever a key tile is all padding (its row maximum is then -inf).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import safe_key_mask, zero_padded_inputs, zero_padded_outputs
from attention_impls.registry import register_backend

_MASK_BIAS = -30000.0  # a padded key's score after scaling; exp(-30000) is 0 in every float format


class _SDPA(AttentionBackend):
    """Shared body of the pinned SDPA backends. Option `mask_mode`: 'attn_mask' or 'bias_column'."""

    sdp_backend: ClassVar[SDPBackend]
    default_mask_mode: ClassVar[str] = "attn_mask"

    def __init__(self, *args, mask_mode: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask_mode = mask_mode or self.default_mask_mode
        if self.mask_mode not in ("attn_mask", "bias_column"):
            raise ValueError(f"mask_mode must be 'attn_mask' or 'bias_column', got {self.mask_mode!r}")

    def forward(self, q, k, v, key_padding_mask=None):
        p = self.dropout if self.training else 0.0
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        attn_mask = None
        if key_padding_mask is not None:
            keys = safe_key_mask(key_padding_mask)
            if self.mask_mode == "attn_mask":
                attn_mask = keys[:, None, None, :]
            else:
                q, k, v = _append_bias_column(q, k, v, keys, self.scale)
        with sdpa_kernel(self.sdp_backend):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, scale=self.scale)
        out = out[..., : self.head_dim] if out.shape[-1] != self.head_dim else out
        return zero_padded_outputs(out, key_padding_mask)


def _append_bias_column(q, k, v, keys: torch.Tensor, scale: float):
    d = q.shape[-1]
    extra = 8 - d % 8 if d % 8 else 8
    b, h, nq, _ = q.shape
    nk = k.shape[2]
    c = math.sqrt(-_MASK_BIAS / scale)  # q's factor; k's is _MASK_BIAS / (scale c) = -c: both finite in fp16
    q_pad = q.new_zeros(b, h, nq, extra)
    q_pad[..., 0] = c
    k_pad = k.new_zeros(b, h, nk, extra)
    k_pad[..., 0] = torch.where(keys, 0.0, -c)[:, None, :].to(k.dtype)
    v_pad = v.new_zeros(b, h, nk, extra)
    return torch.cat([q, q_pad], -1), torch.cat([k, k_pad], -1), torch.cat([v, v_pad], -1)


class _FusedSDPA(_SDPA):
    """The fused CUDA kernels (flash, cuDNN): fp16/bf16, head dim <= 256, padding as a bias column."""

    default_mask_mode = "bias_column"
    capabilities = Capabilities(
        devices=("cuda",),
        dtypes=(torch.float16, torch.bfloat16),
        max_head_dim=256,
        any_key_mask=True,
        notes="PyTorch SDPA, pinned",
    )


@register_backend("sdpa_flash")
class SDPAFlash(_FusedSDPA):
    """PyTorch's FlashAttention-2 kernel (CUDA, fp16/bf16, head dim <= 256)."""

    sdp_backend = SDPBackend.FLASH_ATTENTION


@register_backend("sdpa_cudnn")
class SDPACudnn(_FusedSDPA):
    """cuDNN fused attention through SDPA (CUDA, fp16/bf16)."""

    sdp_backend = SDPBackend.CUDNN_ATTENTION


@register_backend("sdpa_mem_efficient")
class SDPAMemEfficient(_SDPA):
    """The memory-efficient (xformers/CUTLASS) kernel through SDPA; takes the padding mask directly."""

    sdp_backend = SDPBackend.EFFICIENT_ATTENTION
    capabilities = Capabilities(
        devices=("cuda",),
        dtypes=(torch.float32, torch.float16, torch.bfloat16),
        any_key_mask=True,
        notes="PyTorch SDPA, pinned",
    )


@register_backend("sdpa_math")
class SDPAMath(_SDPA):
    """SDPA's composite math implementation: runs everywhere, materialises the scores."""

    sdp_backend = SDPBackend.MATH
    capabilities = Capabilities(scores_matrix=True, any_key_mask=True, notes="PyTorch SDPA, pinned")
