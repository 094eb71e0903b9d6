"""`flash` on a CUDA GPU at real sizes (N up to 16K): output and gradients against fp64 attention and against the
fp64 emulation of the kernels' roundings (round to nearest on a GPU), padding, Nq != Nk, head dims beyond the
tuned tables, dropout with the kernel's keep-mask, the same mask in all three kernels, CUDA-graph replays with fresh
masks that torch.manual_seed reproduces, torch.compile, large logits, a bitwise-deterministic backward, O(N) memory."""

from __future__ import annotations

import pytest
import torch

from attention_impls import build_attention
from attention_impls.kernels import effective_dropout, rng_state
from tests.flash_reference import (
    emulated_attention,
    emulated_grads,
    masks_from_kernels,
    masks_from_outputs,
    probe_inputs,
)
from tests.reference import TEST_SEED, reference_attention, rel_err, right_padded_mask

pytestmark = pytest.mark.gpu
OUT_TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 3e-2}


def _inputs(b, h, nq, nk, d, dtype, shift=0.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(TEST_SEED * 7919 + seed)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g) for n in (nq, nk, nk))
    if shift:
        q[..., -1], k[..., -1] = shift * d**0.5, 1.0
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


def _check(b, h, nq, nk, d, dtype, lengths=None, dropout_p=0.0, shift=0.0, out_tol=None, deterministic=True):
    from attention_impls.kernels.function import dropout_keep_mask, flash_attention

    q, k, v = _inputs(b, h, nq, nk, d, dtype, shift, seed=nq + d)
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda") if lengths is not None else None
    mask = right_padded_mask(lengths, nk, "cuda") if lengths is not None else None
    state = rng_state(77, 5, "cuda")
    out = flash_attention(q, k, v, lens, dropout_p=dropout_p, seed=state, deterministic=deterministic)
    keep = dropout_keep_mask(state, b, h, nq, nk, dropout_p, "cuda") if dropout_p > 0 else None
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attention(q64, k64, v64, mask, dropout_keep=keep, dropout_p=effective_dropout(dropout_p))
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


@pytest.mark.parametrize(
    "b,h,nq,nk,d,dtype,lengths,dropout_p",
    [
        (8, 4, 1024, 1024, 8, torch.bfloat16, None, 0.1),
        (2, 2, 16384, 16384, 16, torch.float16, [16384, 9999], 0.1),
        (3, 2, 2049, 2049, 8, torch.float32, [2049, 1000, 0], 0.0),
        (2, 2, 1000, 3000, 64, torch.bfloat16, [3000, 1234], 0.1),
    ],
)
def test_one_pass_backward_matches_fp64(b, h, nq, nk, d, dtype, lengths, dropout_p):
    """dQ by atomics from the dK/dV kernel, at the tuned tiles: the same gradients up to fp32 summation order."""
    _check(b, h, nq, nk, d, dtype, lengths, dropout_p=dropout_p, deterministic=False)


@pytest.mark.parametrize("d,dtype", [(24, torch.bfloat16), (40, torch.float16), (72, torch.bfloat16),
                                     (200, torch.bfloat16), (256, torch.float16), (256, torch.float32)])  # fmt: skip
def test_head_dims_beyond_the_tuned_tables(d, dtype):
    _check(2, 2, 1500, 1500, d, dtype, [1500, 777])


@pytest.mark.parametrize("dtype,dropout_p", [(torch.bfloat16, 0.0), (torch.float16, 0.1), (torch.bfloat16, 0.1)])
def test_matches_the_fp64_emulation_of_its_roundings(dtype, dropout_p):
    """Round-to-nearest casts emulated in fp64: 16-bit results agree to fp32-level error, 10-100x below the 16-bit
    rounding the plain fp64 comparison has to allow for."""
    from attention_impls.kernels import default_tiles
    from attention_impls.kernels.function import dropout_keep_mask, flash_attention

    b, h, n, d = 2, 4, 2048, 64
    q, k, v = _inputs(b, h, n, n, d, dtype, seed=3)
    lens = torch.tensor([2048, 1500], dtype=torch.int32, device="cuda")
    state = rng_state(9, 0, "cuda")
    out = flash_attention(q, k, v, lens, dropout_p=dropout_p, seed=state)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    keep = dropout_keep_mask(state, b, h, n, n, dropout_p, "cuda") if dropout_p else None
    p_eff = effective_dropout(dropout_p)
    block_n = default_tiles(d, dtype, "cuda").block_n
    emu_out, lse = emulated_attention(q, k, v, lengths=lens, keep=keep, p_eff=p_eff, block_n=block_n)
    emu = emulated_grads(q, k, v, do, out, lse, lengths=lens, keep=keep, p_eff=p_eff)
    for got, want, name in zip((out, *grads), (emu_out, *emu), ("out", "dq", "dk", "dv")):
        assert rel_err(got, want) < 2e-3, f"{name} vs emulation {rel_err(got, want):.2e}"


def test_dropout_matches_reference_with_kernel_mask():
    _check(2, 2, 2048, 2048, 64, torch.bfloat16, [2048, 1500], dropout_p=0.1)


@pytest.mark.parametrize("n", [64, 128])
def test_every_kernel_applies_the_reported_mask_with_the_tuned_tiles(n):
    from attention_impls.kernels.function import dropout_keep_mask, flash_attention

    state = rng_state(31, 2, "cuda")
    masks = masks_from_kernels(lambda q, k, v: flash_attention(q, k, v, dropout_p=0.1, seed=state), 2, 4, n, "cuda")
    want = dropout_keep_mask(state, 2, 4, n, n, 0.1, "cuda")
    for kernel in ("forward", "dq", "dkdv"):
        assert torch.equal(masks[kernel], want), kernel
    assert masks["scale"] == pytest.approx(256 / 230, rel=1e-6)


def test_cuda_graph_replays_draw_fresh_masks_that_manual_seed_reproduces():
    """A captured forward + backward with `flash` dropout: each replay draws a new mask (the RNG state is drawn by a
    device op inside the graph), the three kernels agree in every replay, and re-seeding replays the same masks."""
    n = 64
    attn = build_attention("flash", heads=2, head_dim=2 * n, seq_len=n, dropout=0.3).cuda().train()
    q, k, v, do = probe_inputs(2, 2, n, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up: compile the kernels outside the capture
        for _ in range(2):
            torch.autograd.grad(attn(q, k, v), (q, v), do)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attn(q, k, v)
        dq, dv = torch.autograd.grad(out, (q, v), do)

    def replay():
        graph.replay()
        masks = masks_from_outputs(out, dq, dv)
        assert torch.equal(masks["forward"], masks["dq"]) and torch.equal(masks["forward"], masks["dkdv"])
        return masks["forward"].clone()

    torch.manual_seed(TEST_SEED)
    first, second = replay(), replay()
    assert not torch.equal(first, second), "two replays drew the same mask"
    torch.manual_seed(TEST_SEED)
    assert torch.equal(replay(), first) and torch.equal(replay(), second)


def test_compiled_model_matches_eager():
    from tests.test_flash_compile import TinyAttention

    torch.manual_seed(TEST_SEED)
    # Without dropout: inductor draws its own random numbers, so compiled and eager masks differ.
    model = TinyAttention("flash", head_dim=64, seq_len=1024, dropout=0.0).cuda().to(torch.bfloat16)
    x = torch.randn(4, 1024, 32, device="cuda", dtype=torch.bfloat16)
    mask = right_padded_mask([1024, 1000, 600, 1], 1024, "cuda")
    compiled = torch.compile(model, fullgraph=True)
    eager_loss, compiled_loss = model(x, mask), compiled(x, mask)
    assert rel_err(compiled_loss, eager_loss) < 1e-2
    eager_grads = torch.autograd.grad(eager_loss, list(model.parameters()))
    for got, want in zip(torch.autograd.grad(compiled_loss, list(model.parameters())), eager_grads):
        assert rel_err(got, want) < 2e-2


def test_large_logits_fp32():
    _check(1, 2, 2048, 2048, 64, torch.float32, shift=200.0, out_tol=1e-4)


def test_backward_bitwise_deterministic():
    from attention_impls.kernels.function import flash_attention

    q, k, v = _inputs(4, 4, 4096, 4096, 64, torch.bfloat16)
    lens = torch.tensor([4096, 3000, 100, 4000], dtype=torch.int32, device="cuda")
    go = torch.randn(4, 4, 4096, 64, device="cuda", dtype=torch.bfloat16)
    state = rng_state(3, 0, "cuda")
    first = torch.autograd.grad(flash_attention(q, k, v, lens, dropout_p=0.1, seed=state), (q, k, v), go)
    for _ in range(2):
        again = torch.autograd.grad(flash_attention(q, k, v, lens, dropout_p=0.1, seed=state), (q, k, v), go)
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
