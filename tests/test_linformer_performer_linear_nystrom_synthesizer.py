"""Property tests of the approximate baselines linformer, performer, linear, nystrom and synthesizer.

Each method is checked against an independent fp64 computation written here from its paper: the exact limit where
one exists (identity projections, as many landmarks as tokens, many random features), or its explicit formula.
Shared promises: padded keys' content never reaches the output, bf16 autocast forward+backward stays finite and close
to fp32, eval is deterministic, odd lengths and (for fixed-length ones) shorter inputs work.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attention_impls import build_attention
from attention_impls.nystrom import iterative_pinv, segment_means_matrix, sequence_conv
from tests.reference import TEST_SEED, reference_attention, rel_err, right_padded_mask

NAMES = ["linformer", "performer", "linear", "nystrom", "synthesizer"]
# small-N options so each method is exercised in its approximating regime (k, m < N)
SMALL = {
    "linformer": {"k": 8},
    "performer": {"nb_features": 32},
    "linear": {},
    "nystrom": {"num_landmarks": 5},
    "synthesizer": {},
}
B, H, N, D = 2, 2, 21, 8


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(TEST_SEED)  # inputs, parameters and random features draw from the global RNG


def make(name: str, n: int = N, d: int = D, dropout: float = 0.0, **options):
    return build_attention(name, heads=H, head_dim=d, seq_len=n, dropout=dropout, options=options)


def qkv(n: int = N, d: int = D, dtype=torch.float64, scale: float = 1.0, requires_grad: bool = False):
    return [(torch.randn(B, H, n, d, dtype=dtype) * scale).requires_grad_(requires_grad) for _ in range(3)]


# ----------------------------------------------------------------------------------------------------------------
# shared promises


@pytest.mark.parametrize("name", NAMES + ["synthesizer-random", "nystrom-conv"])
def test_padded_keys_content_never_reaches_the_output(name):
    """Replacing padded q/k/v with huge values changes nothing (Performer's stabiliser must skip padded keys too)."""
    name, options = _variant(name)
    attn = make(name, **options).eval()
    q, k, v = qkv()
    mask = right_padded_mask([N, 12], N)
    out = attn(q, k, v, mask)
    pad = ~mask[:, None, :, None]
    q2, k2, v2 = (torch.where(pad, 30.0 * torch.randn_like(t), t) for t in (q, k, v))
    out2 = attn(q2, k2, v2, mask)
    assert torch.isfinite(out2).all()
    assert rel_err(out2, out) < 1e-12
    assert out[1, :, 12:].abs().max() == 0 and out[1, :, :12].abs().max() > 0


@pytest.mark.parametrize("name", NAMES + ["synthesizer-random", "nystrom-conv"])
def test_bf16_autocast_forward_backward_is_finite_and_close_to_fp32(name):
    name, options = _variant(name)
    torch.manual_seed(0)
    attn = make(name, **options, **SMALL[name]).train()
    q, k, v = qkv(dtype=torch.float32, requires_grad=True)
    mask = right_padded_mask([N, 10], N)
    torch.manual_seed(1)
    ref = attn(q, k, v, mask)
    torch.manual_seed(1)  # same random features if the backend redraws them
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q, k, v, mask)
    (out.float() * torch.randn_like(ref)).sum().backward()
    assert torch.isfinite(out.float()).all()
    assert rel_err(out, ref) < 0.05, "bf16 autocast drifted from fp32"
    for t in (q, k, v):
        assert t.grad is None or torch.isfinite(t.grad).all()
    for p in attn.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


@pytest.mark.parametrize("name", NAMES + ["synthesizer-random", "linformer-dropped"])
def test_eval_is_deterministic_and_dropout_acts_only_in_training(name):
    """Backends with attention dropout drop in training only. The ones whose reference code applies none (performer,
    linear, nystrom; linformer unless drop_attention) build with p > 0, train exactly as with p = 0 and say so."""
    name, options = _variant(name)
    attn = make(name, dropout=0.5, **options, **SMALL[name])
    applies = attn.dropout > 0
    assert attn.dropout_asked == 0.5 and attn.dropout_skipped == (not applies)
    assert (attn.dropout_note() is None) == applies
    q, k, v = qkv(dtype=torch.float32)
    mask = right_padded_mask([N, 15], N)
    attn.train()
    state = torch.get_rng_state()
    train_a, train_b = attn(q, k, v, mask), attn(q, k, v, mask)
    attn.eval()
    eval_a, eval_b = attn(q, k, v, mask), attn(q, k, v, mask)
    assert torch.equal(eval_a, eval_b)
    if applies:
        assert not torch.equal(train_a, train_b), "attention dropout had no effect in training"
        return
    assert "is not applied" in attn.dropout_note() and attn.capabilities.dropout_reference
    plain = make(name, dropout=0.0, **options, **SMALL[name])
    plain.load_state_dict(attn.state_dict())
    plain.train()
    torch.set_rng_state(state)  # the same training-time features as attn's first call
    assert torch.equal(plain(q, k, v, mask), train_a), "a backend that applies no dropout changed with p"


@pytest.mark.parametrize("name", NAMES)
def test_odd_lengths_and_shorter_inputs(name):
    """Odd N not divisible by k / m / a block, and a fixed-length backend fed fewer tokens than it was built for."""
    attn = make(name, n=37, **SMALL[name])
    for n in (37, 30) if attn.capabilities.fixed_seq_len else (37, 41):
        q, k, v = qkv(n=n, dtype=torch.float32)
        out = attn(q, k, v, right_padded_mask([n, n - 9], n))
        assert out.shape == q.shape and torch.isfinite(out).all()
    if attn.capabilities.fixed_seq_len:
        with pytest.raises(ValueError, match="seq_len >= 40"):
            attn(*qkv(n=40, dtype=torch.float32))


def _variant(name: str) -> tuple[str, dict]:
    if name == "synthesizer-random":
        return "synthesizer", {"variant": "random"}
    if name == "nystrom-conv":
        return "nystrom", {"conv_kernel_size": 5}
    if name == "linformer-dropped":
        return "linformer", {"drop_attention": True}
    return name, {}


# ----------------------------------------------------------------------------------------------------------------
# linear


def linear_reference(q, k, v, lengths, eps=1e-6):
    """phi(q) (phi(k)^T v) / (phi(q) . sum phi(k) + eps), phi = elu + 1, over each row's real keys only, fp64."""
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros_like(q)
    for b, n_real in enumerate(lengths):
        pq = F.elu(q[b]) + 1
        pk = F.elu(k[b, :, :n_real]) + 1
        num = pq @ (pk.transpose(-2, -1) @ v[b, :, :n_real])
        den = pq @ pk.sum(dim=1)[..., None] + eps
        out[b, :, :n_real] = (num / den)[:, :n_real]
    return out


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_linear_equals_its_explicit_formula(dtype, tol):
    q, k, v = qkv(dtype=dtype)
    lengths = [N, 13]
    out = make("linear")(q, k, v, right_padded_mask(lengths, N))
    assert out.dtype == dtype
    assert rel_err(out, linear_reference(q, k, v, lengths)) < tol


def test_linear_unnormalised_is_the_nystromformer_codes_formula():
    """normalize=False: (elu(q)+1) N^-1/4 times ((elu(k)+1) N^-1/4 masked)^T (v masked), N the padded length."""
    q, k, v = qkv()
    lengths = [N, 9]
    mask = right_padded_mask(lengths, N)
    out = make("linear", normalize=False)(q, k, v, mask)
    real = mask[:, None, :, None].double()
    pq = (F.elu(q) + 1) / N**0.25
    pk = (F.elu(k) + 1) * real / N**0.25
    ref = torch.einsum("bhnd,bhmd,bhme->bhne", pq, pk, v * real) * real
    assert rel_err(out, ref) < 1e-12
    # padded keys are not excluded from the scale: the same real tokens at another padded length give another output
    longer = make("linear", normalize=False)(*(F.pad(t, (0, 0, 0, 7)) for t in (q, k, v)), F.pad(mask, (0, 7)))
    assert torch.allclose(longer[:, :, :N] * (N + 7) ** 0.5, out * N**0.5, atol=1e-12)


def test_linear_rejects_a_normalize_that_is_not_a_bool():
    with pytest.raises(ValueError, match="normalize must be true or false"):
        make("linear", normalize="no")


# ----------------------------------------------------------------------------------------------------------------
# performer


def test_performer_approaches_softmax_as_features_grow():
    """Mean error over three draws: clearly lower at m=4096 than at m=64 (it falls like 1/sqrt(m))."""
    torch.manual_seed(0)
    errors = {}
    for m in (64, 4096):
        draws = []
        for _ in range(3):
            q, k, v = qkv(d=8, scale=0.5)
            q, k = q * 0.5, k * 0.5  # small norms: the estimator's variance grows like exp(|q|^2 + |k|^2)
            attn = make("performer", nb_features=m).eval()
            draws.append(rel_err(attn(q, k, v), reference_attention(q, k, v)))
        errors[m] = sum(draws) / len(draws)
    assert errors[4096] < errors[64] / 3, errors
    assert errors[4096] < 0.05, errors


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_performer_equals_its_formula_with_the_drawn_features(kernel):
    """With the features W fixed, the output is the renormalised random-feature formula (stabilisers cancel)."""
    attn = make("performer", nb_features=48, kernel=kernel, **({"eps": 1e-6} if kernel == "softmax" else {})).eval()
    q, k, v = qkv(scale=0.7)
    lengths = [N, 11]
    out = attn(q, k, v, right_padded_mask(lengths, N))
    w = attn.features.double()
    c = D**-0.25
    ref = torch.zeros_like(q)
    for b, n_real in enumerate(lengths):
        if kernel == "softmax":

            def phi(x):
                return torch.exp((c * x) @ w.T - 0.5 * (c * x).pow(2).sum(-1, keepdim=True))
        else:

            def phi(x):
                return torch.relu(x @ w.T) + 1e-3

        pq, pk = phi(q[b]), phi(k[b, :, :n_real])
        full = (pq @ (pk.transpose(-2, -1) @ v[b, :, :n_real])) / (pq @ pk.sum(dim=1)[..., None])
        ref[b, :, :n_real] = full[:, :n_real]
    assert rel_err(out, ref) < 5e-4  # the method's feature eps (1e-6 on stabilised features) is left out here


def test_performer_zeroed_padded_keys_estimate_softmax_with_zero_keys_in_the_denominator():
    """pad_keys='zeroed' (the reference code): each padded key acts as a key of zeros with a value of zeros, so the
    estimate approaches exact softmax over real keys plus that many zero keys; the default excludes them."""
    torch.manual_seed(1)
    q, k, v = qkv(d=8, scale=0.3)
    lengths = [N, 6]
    mask = right_padded_mask(lengths, N)
    real = mask[:, None, :, None].double()
    zero_keys = reference_attention(q, k * real, v * real) * real  # no mask: padded keys are zero vectors
    real_only = reference_attention(q, k, v, mask) * real
    zeroed = make("performer", nb_features=8192, d=8, pad_keys="zeroed").eval()(q, k, v, mask)
    excluded = make("performer", nb_features=8192, d=8).eval()(q, k, v, mask)
    assert rel_err(zeroed, zero_keys) < 0.03
    assert rel_err(excluded, real_only) < 0.03
    assert rel_err(zero_keys, real_only) > 0.3  # the two semantics differ by far more than the estimator's error


def test_linformer_projections_start_at_the_chosen_scale():
    """proj_init 'seq_len' (LRA's lecun-normal, the default) draws E and F N(0, 1/N); 'k' (HazyResearch/fly's
    linformer_attention.py) N(0, 1/k), with separate E and F under share_kv=False."""
    n, k = 2000, 128
    lecun = make("linformer", n=n, k=k)
    fly = make("linformer", n=n, k=k, share_kv=False, proj_init="k")
    assert lecun.F is None and fly.F is not None and not torch.equal(fly.E, fly.F)
    for weights, std in ((lecun.E, n**-0.5), (fly.E, k**-0.5), (fly.F, k**-0.5)):
        assert weights.shape == (k, n)
        assert abs(weights.std().item() / std - 1) < 0.01  # 256,000 draws: the estimate's error is ~0.14%
        assert abs(weights.mean().item()) < 4 * std / (k * n) ** 0.5
    with pytest.raises(ValueError, match="proj_init must be one of seq_len, k"):
        make("linformer", proj_init="lecun")


def test_performer_kept_padded_keys_estimate_softmax_over_every_key_with_padded_values_zeroed():
    """pad_keys='kept' (HazyResearch/fly's code): padded keys keep their own content in the denominator and only their
    values are zeroed, so the estimate approaches sum_real e^(q.k) v / sum_all e^(q.k), computed here in fp64."""
    torch.manual_seed(2)
    q, k, v = qkv(d=8, scale=0.3)
    mask = right_padded_mask([N, 6], N)
    real = mask[:, None, :, None].double()
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(8)
    weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)  # every key in the denominator
    every_key = (weights @ (v * real)) * real
    attn = make("performer", nb_features=8192, d=8, pad_keys="kept").eval()
    kept = attn(q, k, v, mask)
    assert rel_err(kept, every_key) < 0.03
    assert rel_err(every_key, reference_attention(q, k, v, mask) * real) > 0.3  # far from softmax over real keys
    moved = attn(q, torch.where(mask[:, None, :, None], k, k + 1.0), v, mask)  # only padded keys' content changed
    assert torch.equal(moved[0], kept[0])  # the unpadded sequence
    assert not torch.allclose(moved[1], kept[1])  # the padded keys' content reaches the padded one's output


def test_performer_rejects_an_unknown_pad_keys():
    with pytest.raises(ValueError, match="pad_keys must be one of excluded, zeroed, kept"):
        make("performer", pad_keys="masked")


def test_performer_features_are_orthogonal_blocks_and_reproducible():
    torch.manual_seed(3)
    a = make("performer", nb_features=20, d=8)
    torch.manual_seed(3)
    b = make("performer", nb_features=20, d=8)
    assert torch.equal(a.features, b.features)
    w = a.features.double()
    for start in (0, 8, 16):  # blocks of d rows: rows within a block are orthogonal
        block = w[start : start + 8]
        gram = block @ block.T
        off = gram - torch.diag(torch.diagonal(gram))
        assert off.abs().max() < 1e-4 * gram.diagonal().max()
    iid = make("performer", nb_features=20, d=8, ortho=False).features.double()
    assert (iid[:8] @ iid[:8].T - torch.diag((iid[:8] ** 2).sum(1))).abs().max() > 0.1


def test_performer_redraws_on_schedule_and_never_in_eval():
    attn = make("performer", nb_features=16, redraw_every=2)
    q, k, v = qkv(dtype=torch.float32)
    seen = []
    for _ in range(5):
        attn(q, k, v)
        seen.append(attn.features.clone())
    # drawn on calls 1, 3, 5: kept across calls 1-2 and 3-4
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[2], seen[3])
    assert not torch.equal(seen[1], seen[2]) and not torch.equal(seen[3], seen[4])
    state = attn.state_dict()
    attn.eval()
    attn(q, k, v)
    assert torch.equal(attn.features, seen[4])
    fresh = make("performer", nb_features=16, redraw_every=2)
    fresh.load_state_dict(state)  # a resumed run continues the schedule: call 6 keeps call 5's features
    assert torch.equal(fresh.features, seen[4]) and fresh.training_calls == 5
    never = make("performer", nb_features=16, redraw_every=0)
    before = never.features.clone()
    never(q, k, v)
    assert torch.equal(never.features, before)


# ----------------------------------------------------------------------------------------------------------------
# linformer


def test_linformer_with_identity_projections_at_k_equal_n_is_softmax_attention():
    attn = make("linformer", k=N, share_kv=False)
    with torch.no_grad():
        attn.E.copy_(torch.eye(N))
        attn.F.copy_(torch.eye(N))
    q, k, v = qkv()
    assert rel_err(attn(q, k, v), reference_attention(q, k, v)) < 1e-12


@pytest.mark.parametrize("share_kv", [True, False])
def test_linformer_equals_projected_attention_with_padding_zeroed(share_kv):
    """softmax(q (E K0)^T / sqrt(d)) (F V0), K0/V0 with padded rows zeroed; a shorter input uses E's first columns."""
    attn = make("linformer", n=N + 4, k=6, share_kv=share_kv)
    q, k, v = qkv()
    lengths = [N, 9]
    out = attn(q, k, v, right_padded_mask(lengths, N))
    e = attn.E.detach().double()[:, :N]
    f = e if share_kv else attn.F.detach().double()[:, :N]
    ref = torch.zeros_like(q)
    for b, n_real in enumerate(lengths):
        k0, v0 = k[b].clone(), v[b].clone()
        k0[:, n_real:] = 0
        v0[:, n_real:] = 0
        probs = torch.softmax(q[b] @ (e @ k0).transpose(-2, -1) / math.sqrt(D), dim=-1)
        ref[b, :, :n_real] = (probs @ (f @ v0))[:, :n_real]
    assert rel_err(out, ref) < 1e-12


# ----------------------------------------------------------------------------------------------------------------
# nystrom


@pytest.mark.parametrize("lengths", [[N, N], [N, 9]])
def test_nystrom_with_as_many_landmarks_as_tokens_is_softmax_attention(lengths):
    q, k, v = qkv()
    mask = right_padded_mask(lengths, N)
    ref = reference_attention(q, k, v, mask)
    exact = make("nystrom", num_landmarks=N, pinv_iterations=40, conv_kernel_size=None)
    assert rel_err(exact(q, k, v, mask), ref) < 1e-9
    # the paper's 6 iterations leave a pseudo-inverse error of a few percent at this size
    assert rel_err(make("nystrom", num_landmarks=N, conv_kernel_size=None)(q, k, v, mask), ref) < 0.1


def test_nystrom_iterative_pinv_converges_to_the_pseudo_inverse():
    a = torch.softmax(torch.randn(3, 12, 12, dtype=torch.float64) * 2, dim=-1)
    want = torch.linalg.pinv(a)
    errs = [rel_err(iterative_pinv(a, it), want) for it in (2, 6, 30)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-8, errs


def test_nystrom_segments_split_each_rows_real_tokens():
    """7 real tokens into 3 segments by rank floor(r*3/7): {0,1,2}, {3,4}, {5,6}; a 2-token row: one each, one empty."""
    real = right_padded_mask([7, 2], 10)
    w = segment_means_matrix(real, 3, torch.float64)
    want = torch.zeros(2, 3, 10, dtype=torch.float64)
    want[0, 0, 0:3] = 1 / 3
    want[0, 1, 3:5] = 1 / 2
    want[0, 2, 5:7] = 1 / 2
    want[1, 0, 0] = 1.0
    want[1, 1, 1] = 1.0
    assert torch.equal(w, want)


def test_nystrom_conv_skip_adds_a_depthwise_convolution_of_real_values():
    plain = make("nystrom", num_landmarks=4, conv_kernel_size=None)
    conv = make("nystrom", num_landmarks=4, conv_kernel_size=3)
    q, k, v = qkv()
    lengths = [N, 10]
    mask = right_padded_mask(lengths, N)
    w = conv.conv_weight.detach().double()[:, 0, :, 0]  # (H, 3)
    skip = torch.zeros_like(v)
    for b, n_real in enumerate(lengths):
        for h in range(H):
            for i in range(n_real):  # padded queries are zero anyway
                for j, tap in zip((i - 1, i, i + 1), w[h]):
                    if 0 <= j < n_real:
                        skip[b, h, i] += tap * v[b, h, j]
    assert rel_err(conv(q, k, v, mask), plain(q, k, v, mask) + skip) < 1e-12


@pytest.mark.parametrize(("n", "taps", "block"), [(21, 3, 8), (1000, 35, 64), (7, 35, 4), (130, 5, 64), (16, 1, 16)])
def test_nystrom_sequence_conv_is_a_depthwise_conv2d_with_its_gradients(n, taps, block):
    """The banded-matrix form equals nn.Conv2d's depthwise k x 1 convolution (the authors' layer), gradients too:
    odd lengths, a last block cut short, kernels wider than a block."""
    v = torch.randn(B, H, n, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(H, taps, dtype=torch.float64, requires_grad=True)
    ours = sequence_conv(v, w, block=block)
    ref = F.conv2d(v, w[:, None, :, None], padding=(taps // 2, 0), groups=H)
    grad = torch.randn_like(ref)
    assert rel_err(ours, ref) < 1e-12
    for got, want in zip(torch.autograd.grad(ours, (v, w), grad), torch.autograd.grad(ref, (v, w), grad)):
        assert rel_err(got, want) < 1e-12


# ----------------------------------------------------------------------------------------------------------------
# synthesizer


def test_synthesizer_random_is_softmax_of_its_masked_matrix_times_v():
    attn = make("synthesizer", n=N + 3, variant="random")
    q, k, v = qkv()
    lengths = [N, 8]
    out = attn(q, k, v, right_padded_mask(lengths, N))
    r = attn.random.detach().double()[:, :N, :N]
    ref = torch.zeros_like(v)
    for b, n_real in enumerate(lengths):
        probs = torch.softmax(r[:, :n_real, :n_real], dim=-1)
        ref[b, :, :n_real] = probs @ v[b, :, :n_real]
    assert rel_err(out, ref) < 1e-12
    fixed = make("synthesizer", variant="random", trainable=False)
    assert list(fixed.parameters()) == [] and fixed.random.shape == (H, N, N)


def test_synthesizer_dense_is_softmax_of_a_per_token_mlp():
    attn = make("synthesizer", hidden=5)
    q, k, v = qkv()
    lengths = [N, 8]
    out = attn(q, k, v, right_padded_mask(lengths, N))
    p = {n: t.detach().double() for n, t in attn.named_parameters()}
    ref = torch.zeros_like(v)
    for b, n_real in enumerate(lengths):
        for h in range(H):
            logits = torch.relu(q[b, h] @ p["w1"][h] + p["b1"][h]) @ p["w2"][h] + p["b2"][h]  # (N, N)
            probs = torch.softmax(logits[:n_real, :n_real], dim=-1)
            ref[b, h, :n_real] = probs @ v[b, h, :n_real]
    assert rel_err(out, ref) < 1e-12
