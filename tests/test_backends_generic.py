"""Every registered backend, picked up by name: the interface's promises, checked on the CPU.

Exact backends must equal the fp64 reference (output and gradients, with padding); approximate ones must keep the
shapes, stay finite with padding (a fully padded row included), pass gradients to q, k, v and their own parameters,
and learn (one optimiser step lowers a loss).
"""

from __future__ import annotations

import pytest
import torch

from attention_impls import BACKENDS, build_attention, why_cannot_run
from tests.reference import reference_attention, rel_err, right_padded_mask

B, H, N, D = 2, 2, 33, 16


def cpu_backends(exact: bool) -> list[str]:
    names = []
    for name, cls in BACKENDS.items():
        if cls.capabilities.exact != exact:
            continue
        names.append(name)
    return names


def build(name: str, n: int = N, d: int = D):
    reason = why_cannot_run(name, "cpu", None, d)
    if reason is not None:
        pytest.skip(reason)
    return build_attention(name, heads=H, head_dim=d, seq_len=n)


def inputs(dtype: torch.dtype, n: int = N, d: int = D, requires_grad: bool = True):
    g = torch.Generator().manual_seed(torch.seed() % 2**31)  # fresh inputs every run
    return [torch.randn(B, H, n, d, generator=g, dtype=dtype).requires_grad_(requires_grad) for _ in range(3)]


@pytest.mark.parametrize("name", cpu_backends(exact=True))
def test_exact_backend_matches_fp64_reference(name):
    attn = build(name)
    caps = attn.capabilities
    dtype = torch.float64 if torch.float64 in caps.dtypes else torch.float32
    tol = 1e-10 if dtype == torch.float64 else 2e-5
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
        assert rel_err(got, want) < tol * 10, f"d{which}"


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
    empty = attn(*inputs(torch.float32, requires_grad=False), right_padded_mask([N, 0], N))
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


def test_registry_lists_capabilities():
    for name, cls in BACKENDS.items():
        assert cls.capabilities.summary()
        assert cls.__doc__, f"{name} needs a docstring saying what it computes"
