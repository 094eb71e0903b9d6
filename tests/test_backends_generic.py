"""Every registered backend, picked up by name: the interface's promises, checked on the CPU.

Exact backends must equal the fp64 reference (output and gradients, with padding), and backends exact on their own
mask must equal it under that mask; approximate ones must keep the shapes, stay finite with padding (a fully padded
row included), pass gradients to q, k, v and their own parameters, and learn (one optimiser step lowers a loss).
Every backend keeps NaN and inf in padded positions out of its output and of the gradients of the real positions, and
declares its attention dropout truthfully (applied, skipped as its reference code does and said, or refused).
"""

from __future__ import annotations

import pytest
import torch

from attention_impls import BACKENDS, build_attention, why_cannot_run
from attention_impls.registry import dropout_refusal
from lra.core.errors import ConfigError
from tests.reference import TEST_SEED, generator, reference_attention, rel_err, right_padded_mask

B, H, N, D = 2, 2, 33, 16


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(TEST_SEED)  # output gradients, random features and hashes draw from the global RNG


def cpu_backends(exact: bool | None = None, exact_on_mask: bool | None = None) -> list[str]:
    """Registered backends, optionally only the (in)exact ones or those (not) exact on their own token mask."""
    return [
        name
        for name, cls in BACKENDS.items()
        if (exact is None or cls.capabilities.exact == exact)
        and (exact_on_mask is None or cls.capabilities.exact_on_mask == exact_on_mask)
    ]


def build(name: str, n: int = N, d: int = D, heads: int = H):
    reason = why_cannot_run(name, "cpu", None, d)
    if reason is not None:
        pytest.skip(reason)
    return build_attention(name, heads=heads, head_dim=d, seq_len=n)


def inputs(dtype: torch.dtype, n: int = N, d: int = D, requires_grad=True, batch: int = B, heads: int = H, offset=0):
    g = generator(offset)
    return [torch.randn(batch, heads, n, d, generator=g, dtype=dtype).requires_grad_(requires_grad) for _ in range(3)]


@pytest.mark.parametrize("name", cpu_backends(exact=True))
def test_exact_backend_matches_fp64_reference(name):
    attn = build(name)
    caps = attn.capabilities
    dtype = torch.float64 if torch.float64 in caps.dtypes else torch.float32
    # fp64: 1e-8 still fails any step done in fp32 (3e-5 here). Not 1e-10: in about 1 of 15 full-suite runs,
    # flash_blockwise's fp64 output for the unpadded batch came out 7.0e-10 off, always that value, never alone
    # (cause not found; issue 14).
    tol = 1e-8 if dtype == torch.float64 else 2e-5
    grad_tol = tol if dtype == torch.float64 else tol * 10
    q, k, v = inputs(dtype)
    mask = right_padded_mask([N, 7], N)
    out = attn(q, k, v, mask)
    ref = reference_attention(q, k, v, mask)
    assert out.shape == q.shape and out.dtype == dtype
    assert rel_err(out, ref) < tol
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref_grads = torch.autograd.grad(reference_attention(qr, kr, vr, mask), (qr, kr, vr), g.double())
    for got, want, which in zip(grads, ref_grads, "qkv"):
        assert rel_err(got, want) < grad_tol, f"d{which}"


@pytest.mark.parametrize("name", cpu_backends(exact=True))
def test_exact_backend_fully_masked_row_is_zero_not_nan(name):
    attn = build(name)
    dtype = torch.float64 if torch.float64 in attn.capabilities.dtypes else torch.float32
    q, k, v = inputs(dtype)
    mask = right_padded_mask([N, 0], N)
    out = attn(q, k, v, mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()
    assert out[1].abs().max() == 0
    assert out[0].abs().max() > 0


@pytest.mark.parametrize("name", cpu_backends(exact=False))
def test_approximate_backend_contract(name):
    attn = build(name)
    q, k, v = inputs(torch.float32)
    mask = right_padded_mask([N, 9], N)
    out = attn(q, k, v, mask)
    assert out.shape == q.shape
    assert torch.isfinite(out).all()
    assert out[1, :, 9:].abs().max() == 0, "padded query rows must be zero"
    (out * torch.randn_like(out)).sum().backward()
    unused = attn.capabilities.extra.get("unused_inputs", ())  # e.g. Synthesizer makes its weights without keys
    for t, which in zip((q, k, v), "qkv"):
        if which in unused:
            assert t.grad is None or t.grad.abs().max() == 0, f"{which} is declared unused but gets a gradient"
            continue
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0, f"no gradient to {which}"
    for pname, p in attn.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), f"no gradient to parameter {pname}"
    empty = attn(*inputs(torch.float32, requires_grad=False, offset=1), right_padded_mask([N, 0], N))
    assert torch.isfinite(empty).all() and empty[1].abs().max() == 0


@pytest.mark.parametrize("name", cpu_backends(exact=False) + cpu_backends(exact=True))
def test_backend_learns_one_step(name):
    """A one-layer attention regressor: one SGD step on a fixed batch lowers the loss."""
    attn = build(name)
    torch.manual_seed(0)
    proj = torch.nn.Linear(D * H, 3 * D * H)
    x = torch.randn(B, N, D * H)
    target = torch.randn(B, N, D * H)
    mask = right_padded_mask([N, 20], N)
    params = list(proj.parameters()) + list(attn.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    attn.train()

    def loss_fn():
        torch.manual_seed(1)  # same random features / hashing / dropout on both evaluations
        qkv = proj(x).view(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
        out = attn(qkv[0], qkv[1], qkv[2], mask).transpose(1, 2).reshape(B, N, H * D)
        return ((out - target) ** 2 * mask[..., None]).mean()

    before = loss_fn()
    opt.zero_grad()
    before.backward()
    opt.step()
    with torch.no_grad():
        after = loss_fn()
    assert after.item() < before.item()


@pytest.mark.parametrize("name", cpu_backends(exact_on_mask=True))
def test_backend_exact_on_its_mask_matches_fp64_reference_under_that_mask(name):
    """What the numerics study relies on: output and gradients equal softmax attention over `token_mask` x padding,
    at a length past the default windows and blocks (256 and 128 tokens), where most masks leave pairs out."""
    n = 260
    attn = build(name, n=n, heads=1)
    q, k, v = inputs(torch.float32, n=n, batch=1, heads=1)  # one padded row: the kernels are slow when interpreted
    mask = right_padded_mask([140], n)
    token = attn.token_mask(n, n)
    assert token is not None and token.dtype == torch.bool and token.shape[1:] == (n, n)
    out = attn(q, k, v, mask)
    ref = reference_attention(q, k, v, mask, token_mask=token)
    assert rel_err(out, ref) < 2e-5
    g = torch.randn_like(out)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(reference_attention(qr, kr, vr, mask, token_mask=token), (qr, kr, vr), g.double())
    for got, ref_grad, which in zip(torch.autograd.grad(out, (q, k, v), g), want, "qkv"):
        assert rel_err(got, ref_grad) < 2e-4, f"d{which}"


@pytest.mark.parametrize("name", cpu_backends())
def test_nan_or_inf_in_padding_stays_out_of_outputs_and_gradients(name):
    """Padded rows of q (NaN), k (inf) and v (-inf) change nothing: the output (zero on padded rows) and the
    gradients at real positions equal those with finite padding. Padding is selected away, never multiplied by 0."""
    attn = build(name).eval()
    lengths = [N, 9, 0]
    mask = right_padded_mask(lengths, N)
    real = mask[:, None, :, None].expand(len(lengths), H, N, D)
    clean = inputs(torch.float32, batch=len(lengths))
    fills = (float("nan"), float("inf"), float("-inf"))
    dirty = [torch.where(real, t.detach(), fill).requires_grad_() for t, fill in zip(clean, fills)]
    g = torch.randn(clean[0].shape, generator=generator(1))
    runs = []
    for qkv in (clean, dirty):
        out = attn(*qkv, mask)
        runs.append((out, torch.autograd.grad(out, qkv, g, allow_unused=True)))
    (out_clean, grads_clean), (out_dirty, grads_dirty) = runs
    assert torch.isfinite(out_dirty).all(), "padding's NaN/inf reached the output"
    assert out_dirty[1, :, 9:].abs().max() == 0 and out_dirty[2].abs().max() == 0, "padded rows must be zero"
    assert rel_err(out_dirty, out_clean) < 1e-6
    for got, want, which in zip(grads_dirty, grads_clean, "qkv"):
        if want is None:  # an input the backend does not use (synthesizer's keys)
            assert got is None
            continue
        got, want = got[real], want[real]
        assert torch.isfinite(got).all(), f"padding's NaN/inf reached d{which} at real positions"
        assert rel_err(got, want) < 1e-6, f"d{which}"


@pytest.mark.parametrize("name", cpu_backends())
def test_attention_dropout_is_applied_skipped_as_the_reference_or_refused(name):
    """Each backend either applies attention dropout (it changes the training output), applies none as its reference
    code does (it builds with p > 0, trains as with p = 0 and says so in dropout_note), or, with neither, is refused
    by why_cannot_run and build_attention with the fix in the message."""
    caps = BACKENDS.get(name).capabilities
    reason = why_cannot_run(name, "cpu", None, D, dropout=0.1)
    assert why_cannot_run(name, "cpu", None, D, dropout=0.0) == why_cannot_run(name, "cpu", None, D)
    if not caps.dropout and not caps.dropout_reference:
        refusal = dropout_refusal(name, 0.1)
        assert refusal is not None and "model.attention_dropout=0" in refusal and "no attention dropout" in refusal
        assert reason is not None and dropout_refusal(name, 0.0) is None
        with pytest.raises(ConfigError, match="no attention dropout"):
            build_attention(name, heads=H, head_dim=D, seq_len=N, dropout=0.1)
        return
    assert dropout_refusal(name, 0.1) is None
    if reason is not None:
        pytest.skip(reason)
    q, k, v = inputs(torch.float32, requires_grad=False)
    mask = right_padded_mask([N, 20], N)
    outs, built = [], []
    for p in (0.0, 0.5):
        torch.manual_seed(0)  # the same parameters, features and hash seeds for both
        attn = build_attention(name, heads=H, head_dim=D, seq_len=N, dropout=p).train()
        torch.manual_seed(1)  # the same training-time hashes or features
        outs.append(attn(q, k, v, mask))
        built.append(attn)
    if built[1].dropout_skipped:
        assert caps.dropout_reference and "is not applied" in built[1].dropout_note()
        assert torch.equal(outs[0], outs[1]), "a backend that applies no attention dropout changed with p"
        return
    assert built[1].dropout_note() is None
    assert not torch.equal(outs[0], outs[1]), "attention dropout had no effect in training"


def test_bad_dropout_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"attention dropout must be in \[0, 1\), got 1.5"):
        build_attention("naive", heads=H, head_dim=D, seq_len=N, dropout=1.5)


def test_registry_lists_capabilities():
    for name, cls in BACKENDS.items():
        caps = cls.capabilities
        summary = caps.summary()
        assert summary and ("no attention dropout" in summary) == (not caps.dropout), name
        assert ("exact on its mask" in summary) == caps.exact_on_mask, name
        assert cls.__doc__, f"{name} needs a docstring saying what it computes"
