"""The emulated FlashAttention (lra.numerics.emulation) against independent references: fp64 attention written from
the definition (tests/reference.py), the `flash_blockwise` backend, the real Triton `flash` kernel, and a check per
precision knob that the knob rounds its intermediate and moves the error only where it must."""

from __future__ import annotations

import pytest
import torch

from attention_impls import BACKENDS, build_attention, why_cannot_run
from attention_impls.flash_blockwise import blockwise_attention
from lra.core.errors import ConfigError
from lra.numerics.backend import EMULATED, implementation
from lra.numerics.emulation import (
    FORMS,
    KNOBS,
    PRESETS,
    Emulation,
    Precision,
    build_emulation,
    emulated_attention,
    round_to,
    tiles_from_sram,
)
from tests.reference import reference_attention, rel_err, right_padded_mask

ALL64 = Precision(**{k: "fp64" for k in KNOBS})
# Knobs whose rounding cannot move the output: the row max cancels between exp(S - m) and exp(m - m'), and baseline
# attention has no rescale factors. Every other knob must move the error from fp64 level to bf16 level.
NO_EFFECT = {("fa1", "m"), ("fa2", "m"), ("baseline", "m"), ("baseline", "rescale")}
IMPLIED = {"s": {"m"}}  # the max of bf16 scores is a bf16 value too


def draw(*shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


def is_bf16(t: torch.Tensor) -> bool:
    finite = t[torch.isfinite(t)]
    return bool(torch.equal(finite, finite.to(torch.bfloat16).to(finite.dtype)))


@pytest.mark.parametrize("form", FORMS)
def test_fp64_everywhere_is_fp64_attention(form):
    q, k, v = draw(2, 3, 45, 16, seed=1)
    lengths = torch.tensor([45, 17])
    emu = Emulation(form=form, precision=ALL64, block_m=16, block_n=8)
    out = emulated_attention(q, k, v, emu, lengths=lengths)
    ref = reference_attention(q, k, v, key_padding_mask=right_padded_mask([45, 17], 45))
    # reference zeroes padded query rows (self-attention); compare the real rows and check the rest separately
    assert (out[0] - ref[0]).abs().max().item() < 1e-12
    assert (out[1, :, :17] - ref[1, :, :17]).abs().max().item() < 1e-12


def assert_same_up_to_product_order(got: torch.Tensor, want: torch.Tensor, what) -> None:
    """got equals want as far as two batchings of the same fp32 tile products allow. A CPU BLAS may sum a product's
    terms in another order for another batch shape, so fp32 results differ by a few fp32 rounding errors, and fp16 or
    bf16 results are the same bits but for rare one-ulp flips where that noise crosses a rounding boundary. A real
    difference in the algorithm (an intermediate in another precision, a missed rescale) moves far more."""
    dtype = got.dtype
    got, want = got.double(), want.double()
    fp32_noise = 8 * torch.finfo(torch.float32).eps * want.abs().max()
    if dtype == torch.float32:
        assert (got - want).abs().max() <= fp32_noise, what
        return
    info = torch.finfo(dtype)
    flips = got != want
    one_ulp = info.eps * torch.maximum(got.abs(), want.abs()) + info.eps * info.smallest_normal
    assert flips.double().mean() <= 0.01, (what, flips.double().mean().item())
    assert bool(((got - want).abs() <= one_ulp)[flips].all()), what


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp32_state_is_flash_blockwise(dtype):
    q, k, v = draw(2, 2, 70, 16, dtype=dtype, seed=2)
    lengths = torch.tensor([70, 33])
    for bm, bn in ((32, 16), (16, 32), (64, 64)):
        emu = build_emulation("fa2-fp32-state", head_dim=16, block_m=bm, block_n=bn)
        got = emulated_attention(q, k, v, emu, lengths=lengths)
        want = blockwise_attention(q, k, v, lengths, block_m=bm, block_n=bn)
        assert got.dtype == dtype
        assert_same_up_to_product_order(got[0], want[0], (bm, bn))
        assert_same_up_to_product_order(got[1, :, :33], want[1, :, :33], (bm, bn))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_same_up_to_product_order_tells_p_in_fp32_from_p_in_the_input_format(dtype):
    q, k, v = draw(2, 2, 70, 16, dtype=dtype, seed=2)
    emu = build_emulation("fa2-fp32-state", head_dim=16, block_m=32, block_n=16, p="fp32")
    got = emulated_attention(q, k, v, emu)
    want = blockwise_attention(q, k, v, None, block_m=32, block_n=16)
    with pytest.raises(AssertionError):
        assert_same_up_to_product_order(got, want, "P in fp32")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("knob", KNOBS)
def test_each_knob_rounds_its_intermediate_and_only_the_expected_error_moves(form, knob):
    q, k, v = draw(1, 2, 96, 16, seed=3)
    ref = reference_attention(q, k, v)
    trace: dict[str, torch.Tensor] = {}
    emu = Emulation(form=form, precision=ALL64.changed(**{knob: "bf16"}), block_m=32, block_n=16)
    err = (emulated_attention(q, k, v, emu, trace=trace) - ref).abs().max().item()
    if (form, knob) in NO_EFFECT:
        assert err < 1e-12, (form, knob, err)
    else:
        assert 1e-5 < err < 1e-1, (form, knob, err)
    for name, value in trace.items():
        rounded = name == knob or name in IMPLIED.get(knob, ())
        assert is_bf16(value) == rounded, (form, knob, name)
    if knob == "rescale" and form == "baseline":
        assert "rescale" not in trace  # baseline attention has no rescale factors


def test_all_bf16_fa1_deviates_more_than_fp32_state_and_grows_with_tiles():
    """The paper's effect in miniature: rounding the state at every tile costs more the more tiles there are."""
    q, k, v = draw(1, 2, 512, 64, dtype=torch.bfloat16, seed=4)
    golden = reference_attention(q, k, v)
    err = {}
    for name, bn in (("fa1-all", 16), ("fa1-all", 256), ("fa2-fp32-state", 16)):
        out = emulated_attention(q, k, v, build_emulation(name, head_dim=64, block_m=64, block_n=bn))
        err[(name, bn)] = (out.double() - golden).abs().max().item()
    assert err[("fa1-all", 16)] > 1.5 * err[("fa1-all", 256)]
    assert err[("fa1-all", 16)] > 3 * err[("fa2-fp32-state", 16)]


def test_rounding_toward_zero_truncates_and_passes_gradients():
    x = torch.tensor([1 + 2**-8 + 2**-10, -(1 + 2**-8 + 2**-10), 3.0, -1e-3], dtype=torch.float64, requires_grad=True)
    near = round_to(x, torch.bfloat16)
    down = round_to(x, torch.bfloat16, toward_zero=True)
    assert near[0].item() == 1 + 2**-7 and near[1].item() == -(1 + 2**-7)  # to nearest: up in magnitude
    assert down[0].item() == 1.0 and down[1].item() == -1.0  # toward zero: the bits below bf16's dropped
    assert down[2].item() == 3.0 and abs(down[3].item()) <= 1e-3
    (g,) = torch.autograd.grad(down.sum(), x)
    assert torch.equal(g, torch.ones_like(x))


def _interpreted_flash_or_skip(dtype):
    if why_cannot_run("flash", "cpu", dtype, 16) is not None:
        pytest.skip("flash needs Triton (TRITON_INTERPRET=1 on the CPU)")
    return build_attention("flash", heads=2, head_dim=16, seq_len=64)


def _to_the_rounding_of_p(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor) -> tuple[float, bool]:
    """Fraction of elements that differ, and whether each difference is within what one P rounded the other way
    (at most eps * max|v|) plus one output rounding (eps * |out|) can make."""
    d = (a.double() - b.double()).abs()
    eps = torch.finfo(a.dtype).eps
    bound = eps * (torch.maximum(a.double().abs(), b.double().abs()) + v.double().abs().amax())
    return (d > 0).double().mean().item(), bool((d <= bound).all())


@pytest.mark.parametrize(("dtype", "rounding"), [(torch.bfloat16, "toward_zero"), (torch.float16, "nearest")])
def test_fp32_state_matches_the_flash_kernel_to_the_rounding_of_p(dtype, rounding):
    """Triton's CPU interpreter converts fp32 to bf16 by truncation (to nearest for fp16); with that rounding the
    emulation reproduces the kernel except where exp2 vs exp flips the rounding of one P."""
    attn = _interpreted_flash_or_skip(dtype)
    q, k, v = draw(2, 2, 64, 16, dtype=dtype, seed=5)
    bm, bn = attn.tile_shape(dtype, "cpu")
    emu = build_emulation("fa2-fp32-state", head_dim=16, block_m=bm, block_n=bn, rounding=rounding)
    differ, close = _to_the_rounding_of_p(emulated_attention(q, k, v, emu), attn(q, k, v), v)
    assert differ < 0.005 and close, differ


@pytest.mark.gpu
def test_fp32_state_matches_the_flash_kernel_on_cuda():
    q, k, v = (x.cuda() for x in draw(4, 8, 1024, 64, dtype=torch.bfloat16, seed=6))
    attn = build_attention("flash", heads=8, head_dim=64, seq_len=1024).cuda()
    bm, bn = attn.tile_shape(torch.bfloat16, "cuda")
    emu = build_emulation("fa2-fp32-state", head_dim=64, block_m=bm, block_n=bn)
    differ, close = _to_the_rounding_of_p(emulated_attention(q, k, v, emu), attn(q, k, v), v)
    assert differ < 0.01 and close, differ


def test_backend_trains_matches_fp64_gradients_and_respects_padding():
    import lra.numerics.backend  # noqa: F401  (registers flash_emulated)

    attn = build_attention(EMULATED, heads=2, head_dim=16, seq_len=33, options={"preset": "fa1-all", "block_n": 8})
    q, k, v = (t.requires_grad_() for t in draw(2, 2, 33, 16, seed=7))
    mask = right_padded_mask([33, 7], 33)
    out = attn(q, k, v, mask)
    ref = reference_attention(q, k, v, mask)
    assert rel_err(out, ref) < 1e-12 and out[1, :, 7:].abs().max().item() == 0.0
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(reference_attention(qr, kr, vr, mask), (qr, kr, vr), g)
    for got, ref_grad in zip(grads, want):
        assert rel_err(got, ref_grad) < 1e-10
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast must not change the emulation's precisions
        low = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert torch.equal(low, attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask))
    assert BACKENDS.get(EMULATED).capabilities.dropout is False


def test_tiles_presets_labels_and_bad_input():
    assert tiles_from_sram(16384, 64) == (64, 64)  # Bc = ceil(M / 4d), Br = min(Bc, d)
    assert tiles_from_sram(100_000, 64) == (64, 391)
    assert tiles_from_sram(1024, 128) == (2, 2)
    assert build_emulation("fa1-all", head_dim=64, sram=4096).block_n == 16
    assert {"fa1-all", "fa2-fp32-state", "baseline-fp32-softmax"} <= set(PRESETS)
    options = {"preset": "fa1-all", "o": "acc", "block_n": 16}
    assert implementation("emu:fa1-all+o=acc+block_n=16") == (EMULATED, options)
    assert implementation("naive") == ("naive", {})
    with pytest.raises(ConfigError, match="known: fa1-all"):
        build_emulation("fa3", head_dim=64)
    with pytest.raises(ConfigError, match="precision of l"):
        Precision(l="fp8")
    with pytest.raises(ConfigError, match="unknown precision knob"):
        build_emulation("fa1-all", head_dim=64, acc="fp32")
    with pytest.raises(ConfigError, match="holds no tile"):
        tiles_from_sram(100, 64)
    with pytest.raises(ConfigError, match="\\+KNOB=VALUE"):
        implementation("emu:fa1-all+o")
