"""The SDPA backends' padding column (`mask_mode='bias_column'`, how sdpa_flash and sdpa_cudnn take a key mask).

The fused kernels run on CUDA only, so the column is checked on the CPU three ways: its values are finite in every
dtype at every head dim, with a padded key's score where it is meant to be; FlashAttention-2's non-causal forward
arithmetic (an online softmax over key tiles with no check for an infinite row maximum), written out here, gives the
fp64 masked attention from the extended inputs even where a whole key tile is padding (fp16's infinite column gave
NaN there: issue 37's fp16 Image line); and sdpa_math run through the column equals the fp64 reference, outputs and
gradients.
"""

from __future__ import annotations

import math

import pytest
import torch

from attention_impls import build_attention
from attention_impls.sdpa import _MASK_BIAS, _append_bias_column
from tests.reference import generator, reference_attention, rel_err


def inner_padding_mask(batch: int, n: int, pad_from: int, pad_to: int) -> torch.Tensor:
    """Real keys except [pad_from, pad_to) in every row, and one more key padded at the end of row 0."""
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[:, pad_from:pad_to] = False
    mask[0, -1] = False
    return mask


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("head_dim", [8, 16, 32, 64, 128, 256])
def test_the_column_is_finite_and_puts_a_padded_key_at_the_mask_bias(dtype, head_dim):
    g = generator(0)
    b, h, n = 2, 1, 12
    q, k, v = (torch.randn(b, h, n, head_dim, generator=g).to(dtype) for _ in range(3))
    keys = inner_padding_mask(b, n, 3, 7)
    scale = 1 / math.sqrt(head_dim)
    q2, k2, v2 = _append_bias_column(q, k, v, keys, scale)
    assert q2.shape[-1] % 8 == 0 and q2.shape[-1] > head_dim
    for t in (q2, k2, v2):
        assert t.dtype == dtype and torch.isfinite(t).all()
    extra = (q2[..., head_dim:].float() @ k2[..., head_dim:].float().transpose(-1, -2)) * scale
    padded = ~keys[:, None, None, :].expand_as(extra)
    assert torch.allclose(extra[padded], torch.full_like(extra[padded], _MASK_BIAS), rtol=5e-3)
    assert (extra[~padded] == 0).all()
    assert (v2[..., head_dim:] == 0).all()


def online_softmax_no_inf_check(q, k, v, scale: float, tile: int) -> torch.Tensor:
    """softmax(q k^T scale) v over key tiles of `tile`, in fp32, as FlashAttention-2's non-causal forward runs it:
    the running maximum is taken as it comes, and exp(m_old - m_new) is not guarded against m = -inf."""
    q, k, v = q.float(), k.float(), v.float()
    m = torch.full(q.shape[:-1], -math.inf)
    l = torch.zeros(q.shape[:-1])
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    for start in range(0, k.shape[-2], tile):
        s = (q @ k[..., start : start + tile, :].transpose(-1, -2)) * scale
        m_new = torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new[..., None])
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1)
        acc = alpha[..., None] * acc + p @ v[..., start : start + tile, :]
        m = m_new
    return acc / l[..., None]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_a_key_tile_all_padding_stays_finite_in_the_flash_forward_arithmetic(dtype):
    g = generator(1)
    b, h, n, d, tile = 2, 2, 48, 32, 16
    q, k, v = (torch.randn(b, h, n, d, generator=g).to(dtype) for _ in range(3))
    keys = inner_padding_mask(b, n, 0, 16)  # the first key tile of every row is all padding
    scale = 1 / math.sqrt(d)
    q2, k2, v2 = _append_bias_column(q, k, v, keys, scale)
    out = online_softmax_no_inf_check(q2, k2, v2, scale, tile)[..., :d]
    ref = reference_attention(q, k, v, key_padding_mask=keys, scale=scale)
    assert torch.isfinite(out).all()
    real = keys[:, None, :].expand(b, h, n)  # padded query rows: the backend zeroes them after the kernel
    assert rel_err(out[real], ref[real].float()) < 1e-5


def test_sdpa_math_through_the_column_equals_the_fp64_reference_with_gradients():
    g = generator(2)
    b, h, n, d = 2, 2, 40, 16
    attn = build_attention("sdpa_math", heads=h, head_dim=d, seq_len=n, options={"mask_mode": "bias_column"})
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    keys = inner_padding_mask(b, n, 8, 24)
    out = attn(q, k, v, keys)
    ref = reference_attention(q, k, v, key_padding_mask=keys, scale=attn.scale)
    assert rel_err(out, ref) < 1e-10
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad_out)
    for got, want in zip(grads, ref_grads, strict=True):
        assert rel_err(got, want) < 1e-10


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_cudnn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_fused_sdpa_with_a_padded_key_tile_equals_the_fp64_reference_on_cuda(name, dtype):
    g = generator(3)
    b, h, n, d = 2, 2, 1024, 32
    attn = build_attention(name, heads=h, head_dim=d, seq_len=n)
    q, k, v = (torch.randn(b, h, n, d, generator=g).to("cuda", dtype).requires_grad_() for _ in range(3))
    keys = inner_padding_mask(b, n, 0, 256).cuda()  # the first key tiles all padding, as a black band of an image
    out = attn(q, k, v, keys)
    ref = reference_attention(q, k, v, key_padding_mask=keys, scale=attn.scale)
    grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert torch.isfinite(out).all() and all(torch.isfinite(t).all() for t in grads)
    assert rel_err(out, ref) < 2e-2
