"""Attention dropout in the flash kernels (CPU, TRITON_INTERPRET=1): the keep rate is the documented quantised value;
masks are uncorrelated across seed, offset, batch, head, row and column; the forward and both backward kernels apply
exactly the mask `dropout_keep_mask` reports, whatever their tiles, with the quantised 1/(1-p) scale; output and
gradients match fp64 references built from that mask; the dropout output averages to the no-dropout output; the
backend draws a fresh RNG state per call that torch.manual_seed reproduces."""

from __future__ import annotations

import math

import pytest
import torch

from attention_impls import build_attention
from attention_impls.kernels import LayoutLists, Tiles, effective_dropout, quantize_dropout, rng_state
from attention_impls.layouts import build_layout
from tests.flash_reference import binomial_sigma, emulated_attention, emulated_grads, masks_from_kernels
from tests.reference import TEST_SEED, generator, reference_attention, rel_err, right_padded_mask

pytest.importorskip("triton")
from attention_impls.kernels.function import dropout_keep_mask, flash_attention  # noqa: E402

SEED = 1000 + TEST_SEED  # the kernels' dropout seed in these tests (TEST_SEED varies it with the inputs)


def _tiles(m, n, bm, bn):
    return Tiles(block_m=m, block_n=n, num_stages=1, bwd_block_m=bm, bwd_block_n=bn, bwd_num_stages=1)


def test_quantisation_is_round_to_nearest_256th():
    assert quantize_dropout(0.1) == 26 and effective_dropout(0.1) == 26 / 256  # 25.6 rounds up
    assert quantize_dropout(0.5) == 128 and quantize_dropout(0.0) == 0
    assert quantize_dropout(1.5 / 256) == 2  # ties up
    assert quantize_dropout(0.001) == 0  # below 1/512: no dropout at all
    with pytest.raises(ValueError, match="rounds to 1"):
        quantize_dropout(0.999)
    attn = build_attention("flash", heads=2, head_dim=16, seq_len=8, dropout=0.1)
    assert attn.effective_dropout == 26 / 256


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9, 0.003])
def test_keep_rate_is_the_quantised_value(p):
    keep = dropout_keep_mask(SEED, 2, 2, 256, 256, p, "cpu")
    want = 1.0 - effective_dropout(p)
    got = keep.double().mean().item()
    assert abs(got - want) < 4 * binomial_sigma(want, keep.numel()), f"kept {got:.5f}, expected {want:.5f}"


def _corr(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    a, b = a.double().flatten(), b.double().flatten()
    a, b = a - a.mean(), b - b.mean()
    return (a @ b / (a.norm() * b.norm())).item(), a.numel()


def test_masks_are_uncorrelated():
    p = 0.5
    z = dropout_keep_mask(rng_state(SEED, 7), 2, 2, 128, 256, p, "cpu")
    pairs = {
        "column +1 (same byte word)": (z[..., :-1], z[..., 1:]),
        "column +4 (same Philox call)": (z[..., :-4], z[..., 4:]),
        "column +16 (next call)": (z[..., :-16], z[..., 16:]),
        "row +1": (z[:, :, :-1], z[:, :, 1:]),
        "head": (z[:, 0], z[:, 1]),
        "batch": (z[0], z[1]),
        "batch*heads + head 1 vs 2": (z[0, 1], z[1, 0]),
        "seed": (z, dropout_keep_mask(rng_state(SEED + 1, 7), 2, 2, 128, 256, p, "cpu")),
        "offset": (z, dropout_keep_mask(rng_state(SEED, 8), 2, 2, 128, 256, p, "cpu")),
    }
    for name, (a, b) in pairs.items():
        r, n = _corr(a, b)
        assert abs(r) < 4 / math.sqrt(n), f"{name}: correlation {r:.4f} (4 sigma = {4 / math.sqrt(n):.4f})"


@pytest.mark.parametrize(
    "tiles,lists",
    [
        (_tiles(16, 16, 16, 16), None),
        (_tiles(32, 16, 16, 32), None),
        (_tiles(16, 32, 32, 16), LayoutLists(build_layout("dense", 2), 32)),  # the block-list loops
    ],
)
def test_every_kernel_applies_the_reported_mask_whatever_the_tiles(tiles, lists):
    p, n = 0.3, 32
    state = rng_state(SEED, 3)
    masks = masks_from_kernels(
        lambda q, k, v: flash_attention(q, k, v, dropout_p=p, seed=state, tiles=tiles, lists=lists), 2, 2, n
    )
    want = dropout_keep_mask(state, 2, 2, n, n, p, "cpu")
    for kernel in ("forward", "dq", "dkdv"):
        assert torch.equal(masks[kernel], want), f"{kernel} kernel's mask differs in {(masks[kernel] != want).sum()}"
    assert masks["scale"] == pytest.approx(256 / (256 - quantize_dropout(p)), rel=1e-6)  # the quantised 1/(1-p)


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_and_gradients_match_references_with_the_kernel_mask(dtype, deterministic):
    p, b, h, n, d = 0.2, 2, 1, 45, 16
    gen = generator(11)
    q, k, v = (torch.randn(b, h, n, d, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    lengths = [45, 28]
    lens = torch.tensor(lengths, dtype=torch.int32)
    mask = right_padded_mask(lengths, n)
    state = rng_state(SEED, 11)
    tiles = _tiles(32, 16, 16, 32)
    out = flash_attention(q, k, v, lens, dropout_p=p, seed=state, tiles=tiles, deterministic=deterministic)
    do = torch.randn(out.shape, generator=gen).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), do)
    keep = dropout_keep_mask(state, b, h, n, n, p, "cpu")
    p_eff = effective_dropout(p)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, mask, dropout_keep=keep, dropout_p=p_eff)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    for got, want, name in zip((out, *grads), (ref, *ref_grads), ("out", "dq", "dk", "dv")):
        assert rel_err(got, want) < tol, f"{name} rel err {rel_err(got, want):.2e}"
    if dtype == torch.bfloat16:
        emu_out, lse = emulated_attention(q, k, v, lengths=lens, keep=keep, p_eff=p_eff, block_n=tiles.block_n)
        emu = emulated_grads(q, k, v, do, out, lse, lengths=lens, keep=keep, p_eff=p_eff)
        for got, want, name in zip((out, *grads), (emu_out, *emu), ("out", "dq", "dk", "dv")):
            assert rel_err(got, want) < 5e-4, f"{name} vs emulation {rel_err(got, want):.2e}"


def test_mean_over_seeds_converges_to_the_output_without_dropout():
    """4 seeds x 32 copies of each of 8 queries per head (every query row draws its own mask): the mean's error is
    what the binomial model predicts for an unbiased estimate (its Mahalanobis norm is chi-square distributed)."""
    p, h, nq, copies, nk, d = 0.25, 2, 8, 32, 24, 16
    gen = generator(12)
    q = torch.randn(1, h, nq, d, generator=gen)
    k, v = (torch.randn(1, h, nk, d, generator=gen) for _ in range(2))
    rows = q.repeat(1, 1, copies, 1)  # row r is query r % nq
    tiles = _tiles(128, 32, 32, 32)
    draws = [flash_attention(rows, k, v, dropout_p=p, seed=rng_state(SEED + s), tiles=tiles) for s in range(4)]
    samples = torch.cat(draws).double().view(4, h, copies, nq, d).transpose(1, 2).reshape(-1, h, nq, d)
    error = samples.mean(0) - flash_attention(q, k, v, tiles=tiles).double()[0]
    keep_p = 1 - effective_dropout(p)
    probs = torch.softmax(q[0].double() @ k[0].double().transpose(-1, -2) / d**0.5, dim=-1)
    v64 = v[0].double()
    # Covariance of one draw of a row's output: (1 - k) / k * sum_j P_ij^2 v_j v_j^T (keys dropped independently).
    cov = (1 - keep_p) / keep_p * torch.einsum("hqj,hjd,hje->hqde", probs**2, v64, v64) / samples.shape[0]
    chi2 = torch.einsum("hqd,hqde,hqe->", error, torch.linalg.inv(cov), error).item()
    dof = h * nq * d
    assert abs(chi2 - dof) < 4 * (2 * dof) ** 0.5, f"chi-square {chi2:.1f} for {dof} degrees of freedom"


def test_backend_draws_a_fresh_state_per_call_reproduced_by_manual_seed():
    attn = build_attention("flash", heads=2, head_dim=16, seq_len=40, dropout=0.2)
    gen = generator(13)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen) for _ in range(3))
    torch.manual_seed(TEST_SEED)
    first, second = attn(q, k, v), attn(q, k, v)
    assert not torch.equal(first, second), "each call must draw a fresh mask"
    torch.manual_seed(TEST_SEED)
    assert torch.equal(attn(q, k, v), first) and torch.equal(attn(q, k, v), second)
    attn.eval()
    assert torch.equal(attn(q, k, v), flash_attention(q, k, v, tiles=attn.tiles(q.dtype, "cpu")))
    assert not list(attn.state_dict()), "the RNG state lives in torch's generator, not in the checkpoint"
