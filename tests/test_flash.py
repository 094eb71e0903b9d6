"""The `flash` Triton kernels on the CPU (TRITON_INTERPRET=1, set by conftest): output and dQ, dK, dV against fp64
references on seeded random inputs (LRA_TEST_SEED picks other draws): the definition (`reference_attention`) and,
for 16-bit inputs, an fp64 emulation that rounds where the kernels round (tests/flash_reference.py), which holds
them to fp32-level tolerances; every declared head dim; odd lengths, Nq != Nk, padding (rows of length 1 and 0,
NaN and inf in padded rows), large logits, a bitwise-deterministic backward, the one-pass backward (dQ by atomics),
options and errors."""

from __future__ import annotations

import zlib

import pytest
import torch

from attention_impls import build_attention, why_cannot_run
from attention_impls.kernels import MAX_HEAD_DIM, SUPPORTED_HEAD_DIMS, Tiles
from tests.flash_reference import emulated_attention, emulated_grads
from tests.reference import generator, reference_attention, rel_err, right_padded_mask

pytest.importorskip("triton")
from attention_impls.kernels.function import flash_attention  # noqa: E402

# Small tiles so that short sequences still span several tiles and a ragged tail.
SMALL = Tiles(block_m=32, block_n=16, num_stages=1, bwd_block_m=16, bwd_block_n=32, bwd_num_stages=1)
# Relative-error bounds. Against the definition: fp32 uses full-precision dots; 16-bit rounds P (and dS) to the input
# dtype. Against the rounding emulation: what is left is fp32 arithmetic and the odd 16-bit rounding it flips.
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}
EMULATED_TOL = {torch.float32: 1e-5, torch.float16: 2e-4, torch.bfloat16: 5e-4}


def _gen(*key) -> torch.Generator:
    """A generator for this test case: TEST_SEED plus a stable hash of `key` (distinct cases, distinct draws)."""
    return generator(zlib.crc32(repr(key).encode()) % 1_000_003)


def _inputs(b, h, nq, nk, d, dtype, gen, shift=0.0):
    q, k, v = (torch.randn(b, h, n, d, generator=gen) for n in (nq, nk, nk))
    if shift:  # every logit of a row moves by `shift` (q's last coordinate, with k's last coordinate 1)
        q[..., -1], k[..., -1] = shift * d**0.5, 1.0
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


def _check(
    b, h, nq, nk, d, dtype, lengths=None, tiles=SMALL, shift=0.0, tol=None, emu_tol=None, key=None, deterministic=True
):
    """Output and gradients against the definition and, for 16-bit inputs, against the rounding emulation."""
    gen = _gen(key or (b, h, nq, nk, d, str(dtype), lengths, shift))
    q, k, v = _inputs(b, h, nq, nk, d, dtype, gen, shift)
    mask = right_padded_mask(lengths, nk) if lengths is not None else None
    lens = torch.tensor(lengths, dtype=torch.int32) if lengths is not None else None
    out = flash_attention(q, k, v, lens, tiles=tiles, deterministic=deterministic)
    assert out.shape == q.shape and out.dtype == dtype and torch.isfinite(out).all()
    do = torch.randn(out.shape, generator=gen).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, mask)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    tol = tol or TOL[dtype]
    assert rel_err(out, ref) < tol, f"out rel err {rel_err(out, ref):.2e}"
    for got, want, name in zip(grads, ref_grads, ("dq", "dk", "dv")):
        assert torch.isfinite(got).all(), name
        assert rel_err(got, want) < 2 * tol, f"{name} rel err {rel_err(got, want):.2e}"
    if dtype != torch.float32:
        emu_out, lse = emulated_attention(q, k, v, lengths=lens, block_n=tiles.block_n)
        emu = emulated_grads(q, k, v, do, out, lse, lengths=lens)
        emu_tol = emu_tol or EMULATED_TOL[dtype]
        for got, want, name in zip((out, *grads), (emu_out, *emu), ("out", "dq", "dk", "dv")):
            assert rel_err(got, want) < emu_tol, f"{name} vs emulation {rel_err(got, want):.2e}"
    return out, grads


# (batch, heads, Nq, Nk, head_dim, dtype, lengths): common head dims in every dtype, each at an odd length.
CASES = [
    (1, 1, 1, 1, 16, torch.float32, None),
    (1, 2, 17, 17, 8, torch.float32, None),
    (1, 1, 40, 40, 8, torch.bfloat16, None),
    (1, 1, 33, 33, 8, torch.float16, [20]),
    (1, 1, 127, 127, 16, torch.float32, None),
    (1, 1, 45, 45, 16, torch.bfloat16, None),
    (1, 1, 130, 130, 16, torch.float16, None),
    (1, 1, 50, 50, 24, torch.bfloat16, [31]),
    (1, 1, 50, 50, 32, torch.float32, [31]),
    (1, 1, 63, 63, 32, torch.bfloat16, None),
    (1, 1, 40, 40, 40, torch.float16, None),
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


# The one-pass backward (dQ by atomics): the small head dims it is for, every dtype, Nq != Nk, rows of length 0.
ONE_PASS_CASES = [
    (2, 2, 45, 45, 8, torch.float32, [45, 20]),
    (1, 1, 40, 40, 8, torch.bfloat16, None),
    (2, 1, 33, 33, 16, torch.float16, [33, 0]),
    (1, 2, 21, 50, 16, torch.float32, None),
    (1, 1, 35, 35, 64, torch.bfloat16, [35]),
]


@pytest.mark.parametrize("b,h,nq,nk,d,dtype,lengths", ONE_PASS_CASES)
def test_one_pass_backward_matches_fp64_reference(b, h, nq, nk, d, dtype, lengths):
    _check(b, h, nq, nk, d, dtype, lengths, deterministic=False, key=("one-pass", b, h, nq, nk, d, str(dtype)))


@pytest.mark.parametrize("d", SUPPORTED_HEAD_DIMS)
def test_every_declared_head_dim_matches_fp64(d):
    tiles = Tiles(block_m=16, block_n=16, num_stages=1, bwd_block_m=16, bwd_block_n=16, bwd_num_stages=1)
    _check(1, 1, 19, 19, d, torch.float32, [13], tiles=tiles)


def test_declared_head_dims_come_from_the_kernels():
    caps = build_attention("flash", heads=2, head_dim=24, seq_len=16).capabilities
    assert caps.head_dims == SUPPORTED_HEAD_DIMS and max(SUPPORTED_HEAD_DIMS) == MAX_HEAD_DIM
    for name in ("flash", "block_sparse_flash"):
        assert why_cannot_run(name, "cpu", torch.float32, 24) is None
        assert why_cannot_run(name, "cpu", torch.float32, 40) is None
        assert "head dims" in why_cannot_run(name, "cpu", torch.float32, MAX_HEAD_DIM + 8)
    q = torch.randn(1, 1, 8, MAX_HEAD_DIM + 8)
    with pytest.raises(ValueError, match="head_dim"):
        flash_attention(q, q, q)


@pytest.mark.parametrize("nq,nk,lengths", [(33, 70, [70, 41]), (70, 19, [5, 19]), (24, 40, None)])
def test_query_and_key_lengths_differ(nq, nk, lengths):
    out, _ = _check(2, 1, nq, nk, 16, torch.float32, lengths)
    if lengths is not None:  # cross-attention: every query row attends (no query padding)
        assert (out.abs().amax(dim=(1, 3)) > 0).all()


def test_padding_rows_of_length_one_and_zero():
    out, grads = _check(4, 2, 37, 37, 16, torch.float32, [37, 1, 0, 20])
    assert out[2].abs().max() == 0, "a row with no key must be zero"
    assert out[1, :, 1:].abs().max() == 0 and out[3, :, 20:].abs().max() == 0, "padded query rows must be zero"
    for g in grads:
        assert g[2].abs().max() == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy meeting the NaN, in the interpreter
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_nan_and_inf_in_padded_rows_stay_out(poison, deterministic):
    """Padded queries, keys, values and output gradients hold NaN or inf: the output and every gradient are those of
    clean inputs, and the padded rows of the output and of dQ are exactly zero (selected, or never added, not
    multiplied by 0). The interpreter runs programs in order, so the one-pass backward's atomics are repeatable."""
    gen = _gen("poison", poison)
    lengths = [37, 20, 1]
    q, k, v = _inputs(3, 2, 37, 37, 16, torch.float32, gen)
    do = torch.randn(q.shape, generator=gen)
    lens = torch.tensor(lengths, dtype=torch.int32)
    pad = ~right_padded_mask(lengths, 37)[:, None, :, None]
    clean_out = flash_attention(q, k, v, lens, tiles=SMALL, deterministic=deterministic)
    clean = torch.autograd.grad(clean_out, (q, k, v), do)
    dirty_in = [t.detach().masked_fill(pad, poison).requires_grad_() for t in (q, k, v)]
    out = flash_attention(*dirty_in, lens, tiles=SMALL, deterministic=deterministic)
    grads = torch.autograd.grad(out, dirty_in, do.masked_fill(pad, poison))
    assert torch.equal(out, clean_out) and out.masked_select(pad).abs().max() == 0
    for got, want, name in zip(grads, clean, ("dq", "dk", "dv")):
        assert torch.equal(got, want), name
        assert got.masked_select(pad).abs().max() == 0, name


@pytest.mark.parametrize("dtype,shift", [(torch.float32, 200.0), (torch.bfloat16, 400.0)])
def test_large_logits_do_not_overflow(dtype, shift):
    # Logits near 200-400: exp() overflows fp32 past 88, so this passes only with the running-maximum rescaling.
    # fp32 tolerance 1e-4: the logits themselves carry ~shift * 6e-8 absolute rounding, which also flips ~1% of the
    # 16-bit roundings the emulation reproduces (hence its 3e-3 here, still 10x below the plain bf16 bound).
    _check(1, 2, 40, 40, 16, dtype, [40], shift=shift, tol=1e-4 if dtype == torch.float32 else None, emu_tol=3e-3)


def test_saturated_softmax_stays_finite():
    # |logits| ~ 1e3: the softmax is one-hot; the output must be the arg-max value row, finite, no NaN.
    gen = _gen("saturated")
    q, k, v = (torch.randn(1, 1, 30, 16, generator=gen) * 30 for _ in range(3))
    out = flash_attention(q, k, v, tiles=SMALL)
    assert torch.isfinite(out).all()
    assert rel_err(out, reference_attention(q, k, v)) < 1e-5


def test_backward_is_bitwise_deterministic():
    gen = _gen("deterministic")
    q, k, v = _inputs(2, 1, 50, 50, 16, torch.bfloat16, gen)
    lens = torch.tensor([50, 33], dtype=torch.int32)
    do = torch.randn(2, 1, 50, 16, generator=gen).to(torch.bfloat16)
    tiles = Tiles(block_m=32, block_n=32, num_stages=1, bwd_block_m=16, bwd_block_n=32, bwd_num_stages=1)
    runs = []
    for _ in range(2):
        out = flash_attention(q, k, v, lens, tiles=tiles, dropout_p=0.1, seed=5)
        runs.append(torch.autograd.grad(out, (q, k, v), do))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_backend_options_and_noncontiguous_inputs():
    attn = build_attention("flash", heads=2, head_dim=16, seq_len=40, options={"block_m": 16, "bwd_block_n": 16})
    assert attn.tiles(torch.float32, "cpu").block_m == 16
    x = torch.randn(2, 40, 3, 2, 16, generator=_gen("noncontiguous"))
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, N, D) views with a non-unit seq stride
    mask = right_padded_mask([40, 13], 40)
    assert rel_err(attn(q, k, v, mask), reference_attention(q, k, v, mask)) < 1e-5
    with pytest.raises(ValueError, match="power of two"):
        build_attention("flash", heads=2, head_dim=16, seq_len=40, options={"block_m": 24})
    with pytest.raises(TypeError):
        Tiles(64, 64)  # keywords only: eight positional numbers were a puzzle


def test_register_caps_reach_every_launch_and_change_nothing_computed(monkeypatch):
    """`maxnreg` caps the forward's registers and `bwd_maxnreg` both backward kernels' (Triton's launch option; the
    interpreter ignores it, so here the values must reach the launches and leave the results bitwise alone)."""
    import attention_impls.kernels.function as function  # noqa: PLC0415 (the module whose launches are watched)

    seen: dict[str, int] = {}
    launch = function._launch

    def watch(kernel, grid, args, consts, num_warps, num_stages, *, maxnreg=0):
        seen[kernel.__name__] = maxnreg
        return launch(kernel, grid, args, consts, num_warps, num_stages, maxnreg=maxnreg)

    monkeypatch.setattr(function, "_launch", watch)
    gen = _gen("maxnreg")
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen, requires_grad=True) for _ in range(3))
    runs = []
    for caps in ({}, {"maxnreg": 168, "bwd_maxnreg": 128}):
        attn = build_attention("flash", heads=2, head_dim=16, seq_len=40, dropout=0.2, options=caps)
        torch.manual_seed(5)
        out = attn(q, k, v)
        runs.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v))))
    assert seen == {"attn_fwd": 168, "bwd_dkdv": 128, "bwd_dq": 128}
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    tiles = Tiles(maxnreg=96, bwd_maxnreg=128)
    assert Tiles.from_values(tiles.values()) == tiles
    for bad in (16, 256):
        with pytest.raises(ValueError, match="maxnreg=.* must be 0 .* or 32..255"):
            Tiles(maxnreg=bad)


def test_the_forward_is_capped_at_128_registers_by_default_under_dropout_at_head_dim_8_only(monkeypatch):
    """The v8 default (docs/flash_kernel.md): measured faster at head dim 8 with dropout only, so only there."""
    import attention_impls.flash as flash_module  # noqa: PLC0415 (the module whose default lookup is watched)

    bf16 = torch.bfloat16
    cases = [(8, True, bf16, 128), (8, True, torch.float16, 128), (8, False, bf16, 0), (16, True, bf16, 0),
             (8, True, torch.float32, 0), (64, True, bf16, 0)]  # fmt: skip
    for name in ("flash", "block_sparse_flash"):
        for head_dim, dropout, dtype, cap in cases:
            tiles = build_attention(name, heads=2, head_dim=head_dim, seq_len=256).tiles(dtype, "cuda", dropout=dropout)
            assert (tiles.maxnreg, tiles.bwd_maxnreg) == (cap, 0), (name, head_dim, dropout, dtype)
        chosen = build_attention(name, heads=2, head_dim=8, seq_len=256, options={"maxnreg": 0, "bwd_maxnreg": 96})
        assert chosen.tiles(bf16, "cuda", dropout=True).values()[-2:] == [0, 96]  # an option wins over the default
        assert build_attention(name, heads=2, head_dim=8, seq_len=256).tiles(bf16, "cpu", dropout=True).maxnreg == 0

    asked = []
    lookup = flash_module.default_tiles
    monkeypatch.setattr(flash_module, "default_tiles", lambda *a, **kw: asked.append(kw["dropout"]) or lookup(*a, **kw))
    attn = build_attention("flash", heads=2, head_dim=8, seq_len=40, dropout=0.2)
    q = torch.randn(1, 2, 40, 8, generator=_gen("cap-default"))
    attn(q, q, q)
    attn.eval()
    attn(q, q, q)
    assert asked == [True, False]  # training draws dropout, evaluation does not


def test_head_dim_8_without_dropout_has_its_own_dense_tiles():
    """v9 (docs/flash_kernel.md): at head dim 8, 16-bit, dense `flash` without dropout takes 128 x 32 forward tiles
    and 128-key backward tiles (measured 1.20x forward+backward at p = 0); under dropout, at other head dims, in fp32
    and for block-sparse layouts the table's tiles stay; an option still wins."""
    from attention_impls.kernels import default_tiles  # noqa: PLC0415

    bf16 = torch.bfloat16
    table = default_tiles(8, bf16, "cuda", dropout=True)
    assert (table.block_m, table.block_n, table.bwd_block_m, table.bwd_block_n) == (64, 64, 32, 64)
    plain = build_attention("flash", heads=2, head_dim=8, seq_len=256).tiles(bf16, "cuda", dropout=False)
    assert (plain.block_m, plain.block_n, plain.bwd_block_m, plain.bwd_block_n, plain.maxnreg) == (128, 32, 32, 128, 0)
    assert (plain.num_warps, plain.num_stages, plain.bwd_num_warps) == (table.num_warps, table.num_stages, 4)
    dropped = build_attention("flash", heads=2, head_dim=8, seq_len=256).tiles(torch.float16, "cuda", dropout=True)
    assert (dropped.block_m, dropped.block_n, dropped.bwd_block_n, dropped.maxnreg) == (64, 64, 64, 128)
    for head_dim, dtype in ((16, bf16), (64, bf16), (8, torch.float32)):
        assert default_tiles(head_dim, dtype, "cuda") == default_tiles(
            head_dim, dtype, "cuda", dropout=True
        ).with_options(maxnreg=0), (head_dim, dtype)
    sparse = build_attention("block_sparse_flash", heads=2, head_dim=8, seq_len=256, options={"block": 128})
    assert sparse.tiles(bf16, "cuda", dropout=False) == sparse.tiles(bf16, "cuda", dropout=True).with_options(maxnreg=0)
    assert default_tiles(8, bf16, "cuda", dense=False) == table.with_options(maxnreg=0)
    chosen = build_attention("flash", heads=2, head_dim=8, seq_len=256, options={"block_m": 64})
    assert chosen.tiles(bf16, "cuda").block_m == 64 and chosen.tiles(bf16, "cuda").block_n == 32
    assert default_tiles(8, bf16, "cpu") == default_tiles(8, bf16, "cpu", dropout=True)  # the interpreter's one set


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_head_dim_8_s_tiles_without_dropout_match_fp64_and_the_emulation(dtype):
    """The CUDA default at head dim 8 without dropout (v9: 128 x 32 forward, 32 x 128 backward), one pipeline stage
    as the interpreter runs, over an odd length that leaves ragged tiles of both shapes and a padded row."""
    from attention_impls.kernels import default_tiles  # noqa: PLC0415

    tiles = default_tiles(8, dtype, "cuda").with_options(num_stages=1, bwd_num_stages=1)
    assert (tiles.block_m, tiles.block_n, tiles.bwd_block_n) == (128, 32, 128)
    _check(2, 2, 301, 301, 8, dtype, [301, 170], tiles=tiles, key=("v9-tiles", str(dtype)))


def test_bad_inputs_are_clear_errors():
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="share one dtype"):
        flash_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="lengths must be int32"):
        flash_attention(q, q, q, torch.tensor([8]))
    with pytest.raises(ValueError, match="right-padded"):
        build_attention("flash", heads=1, head_dim=16, seq_len=8)(q, q, q, torch.tensor([[False] + [True] * 7]))
    with pytest.raises(ValueError, match=r"dropout.*\[0, 1\)"):
        flash_attention(q, q, q, dropout_p=1.0)


def test_cpu_without_interpreter_says_what_to_do(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    msg = why_cannot_run("flash", "cpu", torch.float32, 64)
    assert msg is not None and "TRITON_INTERPRET=1" in msg
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert why_cannot_run("flash", "cpu", torch.float32, 64) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compact_padding_takes_padding_anywhere(dtype):
    """`compact_padding`: a mask with padding inside rows (black pixels) gives the fp64 definition's output and
    gradients, padded query rows zero; a right-padded mask gives what the plain backend gives."""
    gen = _gen("compact", str(dtype))
    opts = {"block_m": 16, "block_n": 16, "bwd_block_m": 16, "bwd_block_n": 16, "compact_padding": True}
    attn = build_attention("flash", heads=2, head_dim=16, seq_len=50, options=opts)
    q, k, v = _inputs(3, 2, 50, 50, 16, dtype, gen)
    mask = torch.rand(3, 50, generator=gen) < 0.4  # about 20 real tokens per row, scattered
    mask[2] = False
    mask[2, [0, 17, 49]] = True  # three real tokens, the last at the end of the row
    out = attn(q, k, v, mask)
    do = torch.randn(out.shape, generator=gen).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, mask)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    assert (out[~mask[:, None, :].expand(-1, 2, -1)] == 0).all()  # padded query rows
    assert rel_err(out, ref) < TOL[dtype]
    for got, want in zip(grads, ref_grads):
        assert rel_err(got, want) < TOL[dtype] * 2
    right = right_padded_mask([50, 31, 7], 50)
    plain = build_attention("flash", heads=2, head_dim=16, seq_len=50, options={**opts, "compact_padding": False})
    torch.testing.assert_close(attn(q, k, v, right), plain(q, k, v, right), rtol=0, atol=0)
    with pytest.raises(ValueError, match="right-padded"):
        plain(q, k, v, mask)


def test_compact_padding_is_checked_and_opens_the_gate():
    from lra.core.errors import RunSetupError
    from lra.train.config import load_config
    from lra.train.gate import gate

    with pytest.raises(ValueError, match="compact_padding"):
        build_attention("flash", heads=2, head_dim=16, seq_len=64, options={"compact_padding": "yes"})
    sets = ["data.black_padding=true", "model.pool=mean_all"]
    with pytest.raises(RunSetupError, match="flash with --set attention.flash.compact_padding=true"):
        gate(load_config("pathfinder", "fa-paper", sets), "flash", "cpu")
    gate(load_config("pathfinder", "fa-paper", [*sets, "attention.flash.compact_padding=true"]), "flash", "cpu")


@pytest.mark.parametrize("fallback", ["kernel", "dense_masked"])
def test_block_sparse_compact_padding_lays_its_blocks_over_the_packed_tokens(fallback):
    """block_sparse_flash with `compact_padding` is block_sparse_flash on the real tokens gathered first (right-padded),
    scattered back: its layout addresses the packed positions, as FlashAttention v1's unpadded block-sparse call."""
    gen = _gen("compact-bsf", fallback)
    opts = {"layout": "local", "block": 16, "fallback": fallback, "block_m": 16, "block_n": 16}
    plain = build_attention("block_sparse_flash", heads=2, head_dim=16, seq_len=64, options=opts)
    attn = build_attention(
        "block_sparse_flash", heads=2, head_dim=16, seq_len=64, options={**opts, "compact_padding": True}
    )
    q, k, v = _inputs(2, 2, 64, 64, 16, torch.float32, gen)
    mask = torch.rand(2, 64, generator=gen) < 0.6
    out = attn(q, k, v, mask)
    for b in range(2):
        idx = mask[b].nonzero().squeeze(1)
        packed = [
            torch.cat([x[b : b + 1, :, idx], torch.zeros_like(x[b : b + 1, :, : 64 - len(idx)])], 2) for x in (q, k, v)
        ]
        want = plain(*packed, right_padded_mask([len(idx)], 64))[0, :, : len(idx)]
        torch.testing.assert_close(out[b][:, idx], want, rtol=1e-6, atol=1e-6)
        assert (out[b][:, ~mask[b]] == 0).all()
