"""`block_sparse_flash` on a CUDA GPU: output and gradients against dense fp64 attention with the layout expanded
to a token mask, for the named patterns and random per-head layouts at real sizes (dropout included), both ways of
reading the block lists; an all-ones layout equals flash bit for bit."""

from __future__ import annotations

import pytest
import torch

from attention_impls.kernels import LayoutLists, effective_dropout, rng_state
from attention_impls.layouts import build_layout, layout_token_mask
from lra.core.numbers import ceil_div
from tests.reference import TEST_SEED, reference_attention, rel_err, right_padded_mask

pytestmark = pytest.mark.gpu
TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


@pytest.mark.parametrize(
    "spec,block,b,h,n,d,dtype,lengths,per_head",
    [
        ("butterfly", 128, 1, 2, 8192, 64, torch.bfloat16, None, False),
        (["local", "global"], 128, 2, 2, 4000, 16, torch.float16, [4000, 2500], False),
        ({"random": {"blocks": 3, "per_head": True}}, 64, 2, 2, 2049, 128, torch.bfloat16, [2049, 700], True),
        ([{"strided": {"stride": 4}}, "local"], 128, 2, 2, 3000, 8, torch.float32, [3000, 129], False),
        ([{"local": {"width": 5}}, {"global": {"blocks": 2}}, {"random": {"blocks": 2}}], 64, 1, 2, 4096, 32,
         torch.float16, None, False),
    ],
)  # fmt: skip
def test_layouts_match_token_mask_reference(spec, block, b, h, n, d, dtype, lengths, per_head):
    from attention_impls.kernels.function import dropout_keep_mask, flash_attention

    lay = build_layout(spec, ceil_div(n, block), heads=h, seed=TEST_SEED)
    g = torch.Generator(device="cuda").manual_seed(TEST_SEED * 7919 + n)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).to(dtype).requires_grad_() for _ in range(3))
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda") if lengths else None
    mask = right_padded_mask(lengths, n, "cuda") if lengths else None
    p = 0.1 if dtype == torch.float16 else 0.0  # dropout in the list loops too
    state = rng_state(TEST_SEED, 1, "cuda")
    out = flash_attention(q, k, v, lens, lists=LayoutLists(lay, block), dropout_p=p, seed=state)
    keep = dropout_keep_mask(state, b, h, n, n, p, "cuda") if p else None
    token = layout_token_mask(lay, block, n, n).cuda()
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, mask, token_mask=token, dropout_keep=keep, dropout_p=effective_dropout(p))
    assert rel_err(out, ref) < TOL[dtype]
    for got, want in zip(grads, torch.autograd.grad(ref, (q64, k64, v64), go.double())):
        assert rel_err(got, want) < 3 * TOL[dtype]


@pytest.mark.parametrize("in_registers", [True, False])
def test_both_list_reading_paths(in_registers, monkeypatch):
    from attention_impls.kernels import function  # lists up to REGISTER_LIST_MAX wide are held in registers

    monkeypatch.setattr(function, "REGISTER_LIST_MAX", 1 << 20 if in_registers else 0)
    test_layouts_match_token_mask_reference(
        ["butterfly", {"random": {"blocks": 2}}], 128, 2, 2, 5000, 64, torch.bfloat16, [5000, 3210], False
    )


def test_all_ones_layout_equals_flash_bitwise():
    from attention_impls.kernels.function import flash_attention

    g = torch.Generator(device="cuda").manual_seed(TEST_SEED)
    q, k, v = (torch.randn(2, 4, 4096, 64, device="cuda", generator=g).bfloat16().requires_grad_() for _ in range(3))
    lens = torch.tensor([4096, 3333], dtype=torch.int32, device="cuda")
    go = torch.randn_like(q)
    dense = flash_attention(q, k, v, lens)
    sparse = flash_attention(q, k, v, lens, lists=LayoutLists(build_layout("dense", 32), 128))
    assert torch.equal(dense, sparse)
    for a, b in zip(torch.autograd.grad(dense, (q, k, v), go), torch.autograd.grad(sparse, (q, k, v), go)):
        assert torch.equal(a, b)
