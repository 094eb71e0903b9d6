"""`flash_blockwise` (the kernels' algorithm in PyTorch) and `flex` against the fp64 reference on the CPU, and the
attention benchmark's bookkeeping (FLOP counts, peer ratios, statuses) on a CPU run."""

from __future__ import annotations

import pytest
import torch

from attention_impls import build_attention
from attention_impls.flash_blockwise import blockwise_attention, hash_uniform
from lra.bench.attention import attention_flops, bench_attention, format_attention_table, peer_ratios
from lra.core.errors import ConfigError
from tests.reference import TEST_SEED, generator, reference_attention, rel_err, right_padded_mask


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(TEST_SEED)  # output gradients and tile masks draw from the global RNG


def _qkv(b, h, nq, nk, d, dtype=torch.float64):
    g = generator(nq * 1000 + nk)
    q = torch.randn(b, h, nq, d, generator=g, dtype=dtype).requires_grad_()
    k = torch.randn(b, h, nk, d, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(b, h, nk, d, generator=g, dtype=dtype).requires_grad_()
    return q, k, v


def _keep_mask(seed, b, h, nq, nk, p):
    bh = (torch.arange(b)[:, None] * h + torch.arange(h)[None, :])[:, :, None, None]
    return hash_uniform(seed, bh, torch.arange(nq)[:, None], torch.arange(nk)[None, :]) >= p


@pytest.mark.parametrize(
    "nq,nk,lengths,bm,bn,p",
    [
        (37, 37, [37, 1, 0], 16, 7, 0.0),  # ragged tiles, a row of length 1 and one of 0
        (30, 53, [53, 20, 9], 8, 16, 0.0),  # Nq != Nk: no query padding
        (41, 41, [41, 30, 2], 16, 16, 0.25),  # dropout with the blockwise hash
        (1, 1, None, 64, 64, 0.0),
    ],
)
def test_blockwise_matches_fp64_reference(nq, nk, lengths, bm, bn, p):
    b = 3 if lengths is not None else 1
    q, k, v = _qkv(b, 2, nq, nk, 8)
    mask = right_padded_mask(lengths, nk) if lengths is not None else None
    lens = torch.tensor(lengths, dtype=torch.int32) if lengths is not None else None
    out = blockwise_attention(q, k, v, lens, dropout_p=p, seed=11, block_m=bm, block_n=bn)
    keep = _keep_mask(11, b, 2, nq, nk, p) if p > 0 else None
    ref = reference_attention(q, k, v, mask, dropout_keep=keep, dropout_p=p)
    assert rel_err(out, ref) < 1e-12
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    ref_grads = torch.autograd.grad(
        reference_attention(q2, k2, v2, mask, dropout_keep=keep, dropout_p=p), (q2, k2, v2), g
    )
    for got, want in zip(grads, ref_grads):
        assert rel_err(got, want) < 1e-12


def test_blockwise_hash_keeps_the_right_fraction():
    keep = _keep_mask(3, 2, 2, 64, 64, 0.2)
    assert abs(keep.double().mean().item() - 0.8) < 0.02
    assert not torch.equal(keep, _keep_mask(4, 2, 2, 64, 64, 0.2))


def test_blockwise_tile_mask_equals_token_mask_reference():
    q, k, v = _qkv(2, 2, 40, 40, 8)
    tiles = torch.rand(2, 3, 3) < 0.5
    tiles[:, :, 0] = True
    token = tiles.repeat_interleave(16, 1).repeat_interleave(16, 2)[:, :40, :40]
    mask = right_padded_mask([40, 25], 40)
    out = blockwise_attention(q, k, v, torch.tensor([40, 25], dtype=torch.int32), block_m=16, block_n=16,
                              tile_mask=tiles)  # fmt: skip
    assert rel_err(out, reference_attention(q, k, v, mask, token_mask=token)) < 1e-12


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_forward_on_cpu_matches_reference():
    attn = build_attention("flex", heads=2, head_dim=16, seq_len=50, options={"block": 16})
    q, k, v = (t.detach().float() for t in _qkv(3, 2, 50, 50, 16))
    mask = right_padded_mask([50, 17, 0], 50)
    with torch.no_grad():
        out = attn(q, k, v, mask)
    assert torch.isfinite(out).all() and out[2].abs().max() == 0
    assert rel_err(out, reference_attention(q, k, v, mask)) < 1e-5
    with pytest.raises(ConfigError, match="'flex' has no attention dropout.*model.attention_dropout=0"):
        build_attention("flex", heads=2, head_dim=16, seq_len=50, dropout=0.1)


def test_flops_and_peer_ratios_and_statuses():
    assert attention_flops(2, 8, 1024, 64, "fwd") == 4 * 2 * 8 * 1024**2 * 64
    assert attention_flops(2, 8, 1024, 64, "fwd_bwd", density=0.5) == 3.5 * 0.5 * 4 * 2 * 8 * 1024**2 * 64
    rows = bench_attention(["naive", "flash_blockwise", "sdpa_flash"], [32], [8], "fp32", batch_tokens=64,
                           device="cpu", rep_ms=5)  # fmt: skip
    assert len(rows) == 6
    by = {(r["backend"], r["mode"]): r for r in rows}
    assert by[("sdpa_flash", "fwd")]["status"].startswith("unsupported: ")
    ok = by[("naive", "fwd_bwd")]
    assert ok["status"] == "ok" and ok["batch"] == 2 and ok["heads"] == 64 and ok["ms"] > 0
    assert ok["tflops"] == pytest.approx(attention_flops(2, 64, 32, 8, "fwd_bwd") / (ok["ms"] * 1e-3) / 1e12, rel=0.02)
    ratios = peer_ratios(rows)
    key = ("naive", 32, 8, 64, 2, "fp32", "fwd")
    assert ratios[key]["flash_blockwise"] == pytest.approx(
        by[("flash_blockwise", "fwd")]["ms"] / by[("naive", "fwd")]["ms"], rel=1e-2
    )
    assert "sdpa_flash" not in ratios[key]
    assert format_attention_table(rows).row_count == 6
