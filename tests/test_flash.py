"""The `flash` Triton kernels on the CPU (TRITON_INTERPRET=1, set by conftest): output and dQ, dK, dV against the
independent fp64 reference on fresh random inputs; odd lengths, Nq != Nk, every head dim and dtype, padding (rows of
length 1 and 0), dropout with the kernel's own keep-mask, large logits, a bitwise-deterministic backward."""

from __future__ import annotations

import pytest
import torch

from attention_impls import build_attention, why_cannot_run
from attention_impls.kernels import Tiles
from tests.reference import reference_attention, rel_err, right_padded_mask

pytest.importorskip("triton")
from attention_impls.kernels.function import dropout_keep_mask, flash_attention  # noqa: E402

# Small tiles so that short sequences still span several tiles and a ragged tail.
SMALL = Tiles(32, 16, 4, 1, 16, 32, 4, 1)
# Relative-error bounds vs fp64: fp32 uses full-precision dots; 16-bit rounds P (and dS) to the input dtype.
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _rand(*shape, dtype, scale=1.0):
    g = torch.Generator().manual_seed(torch.seed() % 2**31)  # fresh inputs every run
    return (torch.randn(*shape, generator=g) * scale).to(dtype).requires_grad_()


def _check(b, h, nq, nk, d, dtype, lengths=None, tiles=SMALL, dropout_p=0.0, shift=0.0, tol=None, poison_padding=False):
    q = _rand(b, h, nq, d, dtype=dtype)
    k = _rand(b, h, nk, d, dtype=dtype)
    v = _rand(b, h, nk, d, dtype=dtype)
    if shift:  # every logit of a row moves by `shift` (q's last coordinate, with k's last coordinate 1)
        with torch.no_grad():
            q[..., -1] = shift * d**0.5
            k[..., -1] = 1.0
    mask = right_padded_mask(lengths, nk) if lengths is not None else None
    lens = torch.tensor(lengths, dtype=torch.int32) if lengths is not None else None
    kk, vv = k, v
    if poison_padding:  # padded keys/values must never be read: NaN there would leak into every row
        pad = ~mask[:, None, :, None]
        kk = k.masked_fill(pad, float("nan"))
        vv = v.masked_fill(pad, float("nan"))
    out = flash_attention(q, kk, vv, lens, tiles=tiles, dropout_p=dropout_p, seed=1234)
    keep = dropout_keep_mask(1234, b, h, nq, nk, dropout_p, "cpu") if dropout_p > 0 else None
    ref = reference_attention(q, k, v, mask, dropout_keep=keep, dropout_p=dropout_p)
    assert out.shape == q.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    tol = tol or TOL[dtype]
    assert rel_err(out, ref) < tol, f"out rel err {rel_err(out, ref):.2e}"
    g = torch.randn(out.shape).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), g)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref_out = reference_attention(q64, k64, v64, mask, dropout_keep=keep, dropout_p=dropout_p)
    ref_grads = torch.autograd.grad(ref_out, (q64, k64, v64), g.double())
    for got, want, name in zip(grads, ref_grads, ("dq", "dk", "dv")):
        assert torch.isfinite(got).all(), name
        assert rel_err(got, want) < 2 * tol, f"{name} rel err {rel_err(got, want):.2e}"
    return out, grads, mask


# (batch, heads, Nq, Nk, head_dim, dtype, lengths): every head dim in every dtype, each at an odd length.
CASES = [
    (1, 1, 1, 1, 16, torch.float32, None),
    (1, 2, 17, 17, 8, torch.float32, None),
    (1, 1, 40, 40, 8, torch.bfloat16, None),
    (1, 1, 33, 33, 8, torch.float16, [20]),
    (1, 1, 127, 127, 16, torch.float32, None),
    (1, 1, 45, 45, 16, torch.bfloat16, None),
    (1, 1, 130, 130, 16, torch.float16, None),
    (1, 1, 50, 50, 32, torch.float32, [31]),
    (1, 1, 63, 63, 32, torch.bfloat16, None),
    (1, 1, 40, 40, 32, torch.float16, None),
    (1, 1, 130, 130, 64, torch.float32, None),
    (1, 1, 35, 35, 64, torch.bfloat16, [35]),
    (1, 1, 49, 49, 64, torch.float16, None),
    (1, 1, 33, 33, 128, torch.float32, None),
    (1, 1, 20, 20, 128, torch.bfloat16, None),
    (1, 1, 37, 37, 128, torch.float16, None),
]


@pytest.mark.parametrize("b,h,nq,nk,d,dtype,lengths", CASES)
def test_matches_fp64_reference(b, h, nq, nk, d, dtype, lengths):
    _check(b, h, nq, nk, d, dtype, lengths)


@pytest.mark.parametrize("nq,nk,lengths", [(33, 70, [70, 41]), (70, 19, [5, 19]), (24, 40, None)])
def test_query_and_key_lengths_differ(nq, nk, lengths):
    out, _, _ = _check(2, 1, nq, nk, 16, torch.float32, lengths)
    if lengths is not None:  # cross-attention: every query row attends (no query padding)
        assert (out.abs().amax(dim=(1, 3)) > 0).all()


def test_padding_rows_of_length_one_and_zero_and_unread_padding():
    out, grads, mask = _check(4, 2, 37, 37, 16, torch.float32, [37, 1, 0, 20], poison_padding=True)
    assert out[2].abs().max() == 0, "a row with no key must be zero"
    assert out[1, :, 1:].abs().max() == 0 and out[3, :, 20:].abs().max() == 0, "padded query rows must be zero"
    # With one real key, every real query's output is exactly that key's value row.
    for g in grads:
        assert g[2].abs().max() == 0


def test_dropout_backward_matches_reference_with_same_mask():
    p = 0.3
    _check(2, 1, 45, 45, 16, torch.float32, [45, 28], dropout_p=p)
    keep = dropout_keep_mask(1234, 2, 2, 45, 45, p, "cpu")
    frac = keep.double().mean().item()
    assert abs(frac - (1 - p)) < 0.03, f"kept fraction {frac:.3f}, expected {1 - p}"
    assert not torch.equal(keep, dropout_keep_mask(1235, 2, 2, 45, 45, p, "cpu")), "the seed must change the mask"
    assert torch.equal(keep, dropout_keep_mask(1234, 2, 2, 45, 45, p, "cpu")), "same seed, same mask"


def test_dropout_mask_independent_of_tiles():
    q, k, v = (_rand(1, 2, 40, 16, dtype=torch.float32) for _ in range(3))
    a = flash_attention(q, k, v, dropout_p=0.2, seed=99, tiles=Tiles(16, 16, 4, 1, 16, 16, 4, 1))
    b = flash_attention(q, k, v, dropout_p=0.2, seed=99, tiles=Tiles(32, 64, 4, 1, 32, 64, 4, 1))
    assert rel_err(a, b) < 1e-6


@pytest.mark.parametrize("dtype,shift", [(torch.float32, 200.0), (torch.bfloat16, 400.0)])
def test_large_logits_do_not_overflow(dtype, shift):
    # Logits near 200-400: exp() overflows fp32 past 88, so this passes only with the running-maximum rescaling.
    # fp32 tolerance 1e-4: the logits themselves carry ~shift * 6e-8 absolute rounding.
    _check(1, 2, 40, 40, 16, dtype, [40], shift=shift, tol=1e-4 if dtype == torch.float32 else None)


def test_saturated_softmax_stays_finite():
    # |logits| ~ 1e3: the softmax is one-hot; the output must be the arg-max value row, finite, no NaN.
    q, k, v = (torch.randn(1, 1, 30, 16) * 30 for _ in range(3))
    out = flash_attention(q, k, v, tiles=SMALL)
    assert torch.isfinite(out).all()
    assert rel_err(out, reference_attention(q, k, v)) < 1e-5


def test_backward_is_bitwise_deterministic():
    q, k, v = (_rand(2, 1, 50, 16, dtype=torch.bfloat16) for _ in range(3))
    lens = torch.tensor([50, 33], dtype=torch.int32)
    g = torch.randn(2, 1, 50, 16).to(torch.bfloat16)
    runs = []
    for _ in range(2):
        out = flash_attention(q, k, v, lens, tiles=Tiles(32, 32, 4, 1, 16, 32, 4, 1), dropout_p=0.1, seed=5)
        runs.append(torch.autograd.grad(out, (q, k, v), g))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_backend_options_and_noncontiguous_inputs():
    attn = build_attention("flash", heads=2, head_dim=16, seq_len=40, options={"block_m": 16, "bwd_block_n": 16})
    assert attn.tiles(torch.float32, "cpu").block_m == 16
    x = torch.randn(2, 40, 3, 2, 16)
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, N, D) views with a non-unit seq stride
    mask = right_padded_mask([40, 13], 40)
    assert rel_err(attn(q, k, v, mask), reference_attention(q, k, v, mask)) < 1e-5
    with pytest.raises(ValueError, match="power of two"):
        build_attention("flash", heads=2, head_dim=16, seq_len=40, options={"block_m": 24})


def test_bad_inputs_are_clear_errors():
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="share one dtype"):
        flash_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="lengths must be int32"):
        flash_attention(q, q, q, torch.tensor([8]))
    with pytest.raises(ValueError, match="right-padded"):
        build_attention("flash", heads=1, head_dim=16, seq_len=8)(q, q, q, torch.tensor([[False] + [True] * 7]))


def test_cpu_without_interpreter_says_what_to_do(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    msg = why_cannot_run("flash", "cpu", torch.float32, 64)
    assert msg is not None and "TRITON_INTERPRET=1" in msg
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert why_cannot_run("flash", "cpu", torch.float32, 64) is None
    assert "head dims" in why_cannot_run("flash", "cpu", torch.float32, 24)
