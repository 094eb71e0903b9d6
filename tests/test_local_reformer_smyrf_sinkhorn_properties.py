"""What every approximate baseline (`local`, `reformer`, `smyrf`, `sinkhorn`) promises: attention weights over real
keys only, no N x N intermediate, finite in bf16 autocast and in half precision, deterministic evaluation with
dropout only in training, clear errors for bad options, and (the hashed ones) whole-graph compilation.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from attention_impls import build_attention
from tests.approximate_backends import NAMES, SMALL, H, build, rand_qkv
from tests.reference import TEST_SEED, rel_err, right_padded_mask


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(TEST_SEED)  # output gradients, parameters and training-time hashes draw from the global RNG


# ---------------------------------------------------------------------------------------------- every backend here
@pytest.mark.parametrize("name", NAMES)
def test_weights_are_a_distribution_over_real_keys(name):
    """With v = identity the output rows are the attention weights: non-negative, summing to 1, none on padding."""
    n = 40
    attn = build(name, n, d=n, **SMALL[name]).double()
    q, k, _ = rand_qkv(3, n, n, grad=False)
    v = torch.eye(n, dtype=torch.float64).expand(3, H, n, n)
    lengths = [n, 23, 2]
    w = attn(q, k, v, right_padded_mask(lengths, n))
    assert (w >= -1e-12).all()
    for bi, length in enumerate(lengths):
        assert torch.allclose(w[bi, :, :length].sum(-1), torch.ones(H, length, dtype=torch.float64), atol=1e-9)
        assert (w[bi, :, :, length:] == 0).all(), "padded keys got weight"
        assert (w[bi, :, length:] == 0).all(), "padded query rows must be zero"
        if name == "reformer":
            assert w[bi, :, :length].diagonal(dim1=-2, dim2=-1).abs().max() == 0, "attended to itself"


class LargestTensor(TorchDispatchMode):
    """Records the element count of the largest tensor any op returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("name", NAMES + ("naive",))
def test_no_n_by_n_intermediate(name):
    """Forward and backward at N = 2048 never create a tensor of N^2 / 8 elements (naive does: the probe works)."""
    n = 2048
    # reformer: its default 2N / bucket_size hash buckets make the hash's N x n_buckets scores grow as N^2 / bucket
    # (as in the paper and HuggingFace's code), so the attention's O(N) is shown with the bucket count fixed
    options = {"local": {"window": 64, "mode": "sliding"}, "reformer": {"bucket_size": 32, "n_buckets": 32}}
    options = options.get(name, {})
    attn = build_attention(name, heads=1, head_dim=8, seq_len=n, options=options)
    q, k, v = (torch.randn(1, 1, n, 8, requires_grad=True) for _ in range(3))
    mask = right_padded_mask([n - 5], n)
    with LargestTensor() as probe:
        attn(q, k, v, mask).sum().backward()
    if name == "naive":
        assert probe.largest >= n * n
    else:
        assert probe.largest < n * n // 8, f"{name} built a tensor of {probe.largest} elements"


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_forward_backward_is_finite(name):
    """Finite under CPU bf16 autocast, and close to the same backend in fp32 (eval: the same hashes)."""
    n = 67
    attn = build(name, n, **SMALL[name]).eval()
    q, k, v = rand_qkv(2, n, 16, dtype=torch.float32)
    q, k = ((t.detach() * 0.5).requires_grad_() for t in (q, k))  # moderate scores: bf16 flips few hash buckets
    mask = right_padded_mask([n, 30], n)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q, k, v, mask)
    out.float().sum().backward()
    assert torch.isfinite(out.float()).all() and out[1, :, 30:].abs().max() == 0
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    with torch.no_grad():
        full = attn(q, k, v, mask)
    assert rel_err(out.float(), full) < 0.05


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_model_is_finite(name, dtype):
    """A model cast to fp16/bf16 (no autocast): finite outputs and gradients, internal and key padding included."""
    n = 45
    attn = build(name, n, **SMALL[name]).to(dtype)
    q, k, v = rand_qkv(2, n, 16, dtype=dtype)
    out = attn(q, k, v, right_padded_mask([n, 20], n))
    out.float().sum().backward()
    assert out.dtype == dtype and torch.isfinite(out).all()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_eval_is_deterministic_and_dropout_only_in_training(name):
    n = 50
    attn = build(name, n, dropout=0.3, **SMALL[name])
    q, k, v = rand_qkv(2, n, 16, dtype=torch.float32, grad=False)
    mask = right_padded_mask([n, 31], n)
    attn.eval()
    torch.manual_seed(0)
    first = attn(q, k, v, mask)
    torch.manual_seed(1)
    assert torch.equal(first, attn(q, k, v, mask))
    attn.train()
    torch.manual_seed(2)
    a = attn(q, k, v, mask)
    torch.manual_seed(2)
    assert torch.equal(a, attn(q, k, v, mask)), "training is not reproducible under torch.manual_seed"
    assert not torch.allclose(a, first), "dropout had no effect in training"


@pytest.mark.parametrize(
    "name,options,words",
    [
        ("local", {"mode": "diagonal"}, "mode"),
        ("local", {"window": 0}, "window"),
        ("reformer", {"n_buckets": 3}, "even"),
        ("reformer", {"qk": "key"}, "qk"),
        ("smyrf", {"r": 0}, "r"),
        ("smyrf", {"q_cluster_size": -2}, "q_cluster_size"),
        ("sinkhorn", {"temperature": 0.0}, "temperature"),
        ("sinkhorn", {"window": 4}, "valid options"),
    ],
)
def test_bad_options_are_clear_errors(name, options, words):
    with pytest.raises(ValueError, match=words):
        build(name, 16, **options)


def test_sinkhorn_refuses_longer_sequence_than_built_for():
    attn = build("sinkhorn", 64, block_size=16)
    q, k, v = rand_qkv(1, 80, 16, dtype=torch.float32, grad=False)
    with pytest.raises(ValueError, match="seq_len >= 80"):
        attn(q, k, v)


@pytest.mark.parametrize("name", ["reformer", "smyrf"])
def test_hashed_backends_compile_whole_in_training_and_eval(name):
    """torch.compile(fullgraph=True) traces a training and an evaluation call (the eval hashes are a buffer drawn at
    construction, not a seeded generator, which cannot be traced), and each equals the eager call with the same
    randomness: the fixed eval hashes, and in training the same global-RNG draws."""
    n = 80
    attn = build(name, n, **SMALL[name])
    q, k, v = rand_qkv(2, n, 16, dtype=torch.float32, grad=False)
    mask = right_padded_mask([n, 50], n)
    for training in (True, False):
        attn.train(training)
        compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
        torch.manual_seed(3)
        want = attn(q, k, v, mask)
        torch.manual_seed(3)
        got = compiled(q, k, v, mask)
        assert rel_err(got.double(), want.double()) < 1e-6, ("train" if training else "eval", rel_err(got, want))
        torch._dynamo.reset()
    eval_out = attn.eval()(q, k, v, mask)
    assert torch.equal(attn(q, k, v, mask), eval_out), "evaluation hashes must be fixed"
