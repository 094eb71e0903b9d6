"""`flash` on a CUDA GPU at real sizes (N up to 16K): rel. error of output and gradients against fp64 attention,
padding, Nq != Nk, dropout with the kernel's keep-mask, large logits, a bitwise-deterministic backward."""

from __future__ import annotations

import pytest
import torch

from attention_impls import build_attention
from tests.reference import reference_attention, rel_err, right_padded_mask

pytestmark = pytest.mark.gpu
OUT_TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 3e-2}


def _inputs(b, h, nq, nk, d, dtype, shift=0.0):
    g = torch.Generator(device="cuda").manual_seed(torch.seed() % 2**31)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g) for n in (nq, nk, nk))
    if shift:
        q[..., -1], k[..., -1] = shift * d**0.5, 1.0
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


def _check(b, h, nq, nk, d, dtype, lengths=None, dropout_p=0.0, shift=0.0, out_tol=None):
    from attention_impls.kernels.function import dropout_keep_mask, flash_attention

    q, k, v = _inputs(b, h, nq, nk, d, dtype, shift)
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda") if lengths is not None else None
    mask = right_padded_mask(lengths, nk, "cuda") if lengths is not None else None
    out = flash_attention(q, k, v, lens, dropout_p=dropout_p, seed=77)
    keep = dropout_keep_mask(77, b, h, nq, nk, dropout_p, "cuda") if dropout_p > 0 else None
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, mask, dropout_keep=keep, dropout_p=dropout_p)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), go.double())
    assert torch.isfinite(out).all()
    err = rel_err(out, ref)
    assert err < (out_tol or OUT_TOL[dtype]), f"out rel err {err:.2e}"
    for got, want, name in zip(grads, ref_grads, ("dq", "dk", "dv")):
        e = rel_err(got, want)
        assert e < GRAD_TOL[dtype], f"{name} rel err {e:.2e}"
    return out


@pytest.mark.parametrize(
    "b,h,nq,nk,d,dtype,lengths",
    [
        (1, 2, 16384, 16384, 64, torch.bfloat16, None),
        (2, 1, 16384, 16384, 16, torch.float16, [16384, 11111]),
        (2, 2, 4096, 4096, 128, torch.float32, [4096, 3001]),
        (2, 2, 4097, 4097, 8, torch.bfloat16, [4097, 1]),
        (3, 2, 2049, 2049, 32, torch.float16, [2049, 1000, 0]),
        (2, 2, 1000, 3000, 64, torch.float16, [3000, 1234]),
        (1, 2, 3000, 1000, 128, torch.bfloat16, None),
        (2, 2, 1024, 1024, 16, torch.float32, None),
    ],
)
def test_real_sizes_match_fp64(b, h, nq, nk, d, dtype, lengths):
    out = _check(b, h, nq, nk, d, dtype, lengths)
    if lengths is not None and nq == nk:
        for i, n in enumerate(lengths):
            if n < nq:
                assert out[i, :, n:].abs().max() == 0, "padded query rows must be zero"


def test_dropout_matches_reference_with_kernel_mask():
    _check(2, 2, 2048, 2048, 64, torch.bfloat16, [2048, 1500], dropout_p=0.1)


def test_large_logits_fp32():
    _check(1, 2, 2048, 2048, 64, torch.float32, shift=200.0, out_tol=1e-4)


def test_backward_bitwise_deterministic():
    from attention_impls.kernels.function import flash_attention

    q, k, v = _inputs(4, 4, 4096, 4096, 64, torch.bfloat16)
    lens = torch.tensor([4096, 3000, 100, 4000], dtype=torch.int32, device="cuda")
    go = torch.randn(4, 4, 4096, 64, device="cuda", dtype=torch.bfloat16)
    first = torch.autograd.grad(flash_attention(q, k, v, lens), (q, k, v), go)
    for _ in range(2):
        again = torch.autograd.grad(flash_attention(q, k, v, lens), (q, k, v), go)
        for a, b in zip(first, again):
            assert torch.equal(a, b)


def test_backend_memory_is_linear_in_n():
    attn = build_attention("flash", heads=4, head_dim=8, seq_len=65536)
    q, k, v = _inputs(1, 4, 65536, 65536, 8, torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    attn(q, k, v).sum().backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra < 64 * q.numel() * q.element_size(), f"{extra / 2**20:.0f} MiB beyond the inputs at N=64K"
