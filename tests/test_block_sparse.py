"""Block-sparse layouts and the `block_sparse_flash` kernels on the CPU (TRITON_INTERPRET=1): layouts against their
definitions, densities, and output and gradients against dense fp64 attention with the layout expanded to a token
mask; an all-ones layout reproduces `flash` bit for bit; the presets and `flex_block_sparse`."""

from __future__ import annotations

import pytest
import torch

from attention_impls import BACKENDS, build_attention
from attention_impls.kernels import LayoutLists, Tiles, effective_dropout
from attention_impls.layouts import build_layout, layout_density, layout_token_mask, parse_layout
from lra.core.errors import ConfigError, UnknownNameError
from lra.core.numbers import ceil_div
from tests.reference import TEST_SEED, generator, reference_attention, rel_err, right_padded_mask

pytest.importorskip("triton")
from attention_impls.kernels.function import dropout_keep_mask, flash_attention  # noqa: E402

T16 = Tiles(block_m=16, block_n=16, num_stages=1, bwd_block_m=16, bwd_block_n=16, bwd_num_stages=1)
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(TEST_SEED)  # the backend tests' inputs draw from the global RNG


# ---- layouts against their definitions ----------------------------------------------------------------------------


def test_butterfly_is_the_xor_rule_and_its_density():
    n = 16
    lay = build_layout("butterfly", n)[0]
    for i in range(n):
        for j in range(n):
            x = i ^ j
            assert bool(lay[i, j]) == (x == 0 or (x & (x - 1)) == 0), (i, j)
    assert layout_density(build_layout("butterfly", n)) == pytest.approx((1 + 4) / 16)  # log2(16) = 4 factors
    two = build_layout({"butterfly": {"factors": 2}}, n)[0]
    assert int(two.sum()) == n * 3  # x in {0, 1, 2}: three partners per row


def test_local_global_strided_random_dense():
    n = 10
    loc = build_layout({"local": {"width": 3}}, n)[0]
    assert all(bool(loc[i, j]) == (abs(i - j) <= 1) for i in range(n) for j in range(n))
    assert layout_density(build_layout("local", n)) == pytest.approx((3 * n - 2) / n**2)
    glo = build_layout({"global": {"blocks": 2}}, n)[0]
    assert all(bool(glo[i, j]) == (i < 2 or j < 2) for i in range(n) for j in range(n))
    st = build_layout({"strided": {"stride": 3}}, n)[0]
    assert all(bool(st[i, j]) == (j % 3 == 2) for i in range(n) for j in range(n))
    rnd = build_layout({"random": {"blocks": 3, "per_head": True}}, n, heads=4, seed=7)
    assert rnd.shape == (4, n, n) and (rnd.sum(-1) == 3).all()
    assert torch.equal(rnd, build_layout({"random": {"blocks": 3, "per_head": True}}, n, heads=4, seed=7))
    assert not torch.equal(rnd, build_layout({"random": {"blocks": 3, "per_head": True}}, n, heads=4, seed=8))
    assert build_layout("dense", 3, 5).all() and build_layout("dense", 3, 5).shape == (1, 3, 5)


def test_union_and_parsing_forms():
    a = build_layout(["local", {"global": {"blocks": 1}}], 8)
    assert torch.equal(a, build_layout("local", 8) | build_layout("global", 8))
    assert torch.equal(a, build_layout("local,global", 8))
    assert torch.equal(a, build_layout({"local": {}, "global": {"blocks": 1}}, 8))
    assert parse_layout([{"local": {"width": 5}}, "global"]).describe() == "local(width=5) + global"
    with pytest.raises(UnknownNameError, match="unknown layout pattern 'diagonal'; known: butterfly, dense, global"):
        parse_layout("diagonal")
    with pytest.raises(ConfigError, match="layout pattern 'local' has no option.* size; valid options: width"):
        parse_layout({"local": {"size": 3}})
    with pytest.raises(ConfigError, match="local width must be >= 1 block"):
        build_layout({"local": {"width": 0}}, 4)


def test_token_mask_and_lists():
    lay = torch.tensor([[[True, False], [False, True]]])
    tok = layout_token_mask(lay, 16, 20, 30)
    assert tok.shape == (1, 20, 30) and tok[0, 0, 15] and not tok[0, 0, 16] and tok[0, 19, 16]
    lists = LayoutLists(build_layout("butterfly", 4), 32)
    rows = lists.rows(16, 32, 128, 128, torch.device("cpu"))  # 8 query tiles x 4 key tiles
    assert rows.shape[:2] == (1, 8)
    assert rows[0, 2, :3].tolist() == [0, 1, 3] and (rows[0, 2, 3:] >= 1 << 30).all()  # block row 1: 1^0,1^1,1^3
    with pytest.raises(ValueError, match="must divide the layout block"):
        lists.rows(64, 16, 128, 128, torch.device("cpu"))


# ---- kernels against dense fp64 attention with the token mask -----------------------------------------------------


def _run(layout, block, b, h, nq, nk, d, dtype, lengths=None, dropout_p=0.0, tiles=T16, deterministic=True):
    g = generator(nq * 1000 + d)
    q = torch.randn(b, h, nq, d, generator=g).to(dtype).requires_grad_()
    k = torch.randn(b, h, nk, d, generator=g).to(dtype).requires_grad_()
    v = torch.randn(b, h, nk, d, generator=g).to(dtype).requires_grad_()
    lens = torch.tensor(lengths, dtype=torch.int32) if lengths is not None else None
    mask = right_padded_mask(lengths, nk) if lengths is not None else None
    lists = LayoutLists(layout, block)
    out = flash_attention(
        q, k, v, lens, tiles=tiles, lists=lists, dropout_p=dropout_p, seed=3, deterministic=deterministic
    )
    keep = dropout_keep_mask(3, b, h, nq, nk, dropout_p, "cpu") if dropout_p > 0 else None
    token = layout_token_mask(layout, block, nq, nk)
    p_kernel = effective_dropout(dropout_p)  # the kernels drop with p rounded to 1/256
    ref = reference_attention(q, k, v, mask, token_mask=token, dropout_keep=keep, dropout_p=p_kernel)
    tol = TOL[dtype]
    assert torch.isfinite(out).all()
    assert rel_err(out, ref) < tol, f"out {rel_err(out, ref):.2e}"
    go = torch.randn(out.shape, generator=g).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    r = reference_attention(q64, k64, v64, mask, token_mask=token, dropout_keep=keep, dropout_p=p_kernel)
    for got, want, name in zip(grads, torch.autograd.grad(r, (q64, k64, v64), go.double()), ("dq", "dk", "dv")):
        assert rel_err(got, want) < 2 * tol, f"{name} {rel_err(got, want):.2e}"
    return out, grads


@pytest.mark.parametrize(
    "spec,n,lengths,d,dtype",
    [
        ("butterfly", 70, [70, 45], 16, torch.float32),
        ({"local": {"width": 3}}, 81, [81, 16], 8, torch.float32),
        ({"global": {"blocks": 1}}, 50, None, 32, torch.bfloat16),
        ({"strided": {"stride": 2}}, 64, [60, 33], 16, torch.float16),
        ([{"local": {"width": 1}}, {"random": {"blocks": 2}}], 77, [77, 1], 64, torch.float32),
        ("dense", 33, [20, 33], 128, torch.bfloat16),
    ],
)
def test_named_patterns_match_token_mask_reference(spec, n, lengths, d, dtype):
    lay = build_layout(spec, ceil_div(n, 16), seed=TEST_SEED)
    b = 2 if lengths is not None else 1
    _run(lay, 16, b, 1, n, n, d, dtype, lengths)


@pytest.mark.parametrize("trial", range(2))
def test_random_per_head_layouts_cross_lengths_and_dropout(trial):
    g = generator(trial)
    lay = torch.rand(2, 3, 5, generator=g) < 0.4  # per-head, Nq != Nk, some empty rows allowed
    _run(lay, 16, 2, 2, 41, 73, 16, torch.float32, [73, 30], dropout_p=0.2 if trial else 0.0)


def test_one_pass_backward_walks_the_layout_lists():
    """dQ by atomics from the dK/dV kernel's query-block lists: per-head layout, Nq != Nk, padding, dropout."""
    lay = torch.rand(2, 3, 5, generator=generator(7)) < 0.4
    _run(lay, 16, 2, 2, 41, 73, 8, torch.float32, [73, 30], dropout_p=0.2, deterministic=False)


@pytest.mark.parametrize("in_registers", [True, False])
def test_both_list_reading_paths_match_reference(in_registers, monkeypatch):
    # Lists up to REGISTER_LIST_MAX entries are held in registers, longer ones prefetched (kernels/common.py next_block)
    from attention_impls.kernels import function

    monkeypatch.setattr(function, "REGISTER_LIST_MAX", 1 << 20 if in_registers else 0)
    lay = build_layout(["butterfly", {"random": {"blocks": 1}}], 4, seed=TEST_SEED + in_registers)
    _run(lay, 16, 2, 1, 60, 60, 16, torch.float32, [60, 37])


def test_larger_layout_block_than_tiles_and_row_whose_blocks_are_all_padding():
    lay = torch.zeros(1, 2, 2, dtype=torch.bool)
    lay[0, 0, 0] = True
    lay[0, 1, 1] = True  # query block 1 sees only key block 1, which is padding in row 1 (length 20 < 32)
    out, grads = _run(lay, 32, 2, 1, 64, 64, 16, torch.float32, [64, 20], tiles=T16)
    assert out[1, :, 32:].abs().max() == 0
    assert out[1, :, :20].abs().min() > 0 or out[1, :, :20].abs().amax(-1).min() > 0


def test_all_ones_layout_reproduces_flash_bitwise():
    g = generator()
    q, k, v = (torch.randn(2, 2, 50, 16, generator=g).requires_grad_() for _ in range(3))
    lens = torch.tensor([50, 27], dtype=torch.int32)
    go = torch.randn(2, 2, 50, 16, generator=g)
    dense = flash_attention(q, k, v, lens, tiles=T16)
    sparse = flash_attention(q, k, v, lens, tiles=T16, lists=LayoutLists(build_layout("dense", 4), 16))
    assert torch.equal(dense, sparse)
    for a, b in zip(torch.autograd.grad(dense, (q, k, v), go), torch.autograd.grad(sparse, (q, k, v), go)):
        assert torch.equal(a, b)


# ---- backends ------------------------------------------------------------------------------------------------------


def test_backend_kernel_equals_dense_masked_fallback_and_reports_density():
    opts = {"layout": ["butterfly", "global"], "block": 16}
    kern = build_attention("block_sparse_flash", heads=2, head_dim=16, seq_len=90, options=opts)
    fall = build_attention("block_sparse_flash", heads=2, head_dim=16, seq_len=90,
                           options=dict(opts, fallback="dense_masked"))  # fmt: skip
    assert kern.density() == pytest.approx(layout_density(build_layout(["butterfly", "global"], 6)))
    assert kern.density() < 1.0
    q, k, v = (torch.randn(2, 2, 90, 16) for _ in range(3))
    mask = right_padded_mask([90, 40], 90)
    a, b = kern(q, k, v, mask), fall(q, k, v, mask)
    token = layout_token_mask(kern.layout(90, 90), 16, 90, 90)
    assert rel_err(a, b) < 1e-5
    assert rel_err(a, reference_attention(q, k, v, mask, token_mask=token)) < 1e-5


@pytest.mark.parametrize("name", ["bigbird", "longformer", "sparse_transformer"])
def test_presets_are_documented_block_layouts(name):
    cls = BACKENDS.get(name)
    assert "differs from the token-level original" in cls.__doc__.lower()
    attn = build_attention(name, heads=2, head_dim=16, seq_len=4096, options={"fallback": "dense_masked"})
    assert 0 < attn.density() < 0.5
    q, k, v = (torch.randn(1, 2, 200, 16) for _ in range(3))
    nb = ceil_div(200, attn.block)
    token = layout_token_mask(attn.layout(200, 200), attn.block, 200, 200)
    assert attn.layout(200, 200).shape[1:] == (nb, nb)
    assert rel_err(attn(q, k, v), reference_attention(q, k, v, token_mask=token)) < 1e-5


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_block_sparse_forward_matches_token_mask_reference():
    attn = build_attention("flex_block_sparse", heads=2, head_dim=16, seq_len=80,
                           options={"layout": ["local", "strided"], "block": 16})  # fmt: skip
    q, k, v = (torch.randn(2, 2, 80, 16) for _ in range(3))
    mask = right_padded_mask([80, 35], 80)
    with torch.no_grad():
        out = attn(q, k, v, mask)
    token = layout_token_mask(attn._layout(80, 80, torch.device("cpu")), 16, 80, 80)
    assert rel_err(out, reference_attention(q, k, v, mask, token_mask=token)) < 1e-5
    assert attn.density() == pytest.approx(layout_density(build_layout(["local", "strided"], 5)))
