"""Property tests of the approximate baselines `local`, `reformer`, `smyrf` and `sinkhorn`.

Each one is checked against an independent fp64 reference written here or in tests/reference.py, in the settings
where the method is exact (a band/block mask, one bucket, one cluster, one block, a hard block permutation), plus
what each method promises: balanced clusters, doubly stochastic Sinkhorn matrices. What all four promise (padded keys
get no weight, no N x N intermediate, finite bf16 autocast, deterministic evaluation) is
tests/test_local_reformer_smyrf_sinkhorn_properties.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attention_impls.sinkhorn import sinkhorn
from attention_impls.smyrf import xbox_plus
from tests.approximate_backends import H, build, rand_qkv
from tests.reference import TEST_SEED, reference_attention, rel_err, right_padded_mask


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(TEST_SEED)  # output gradients, parameters and training-time hashes draw from the global RNG


def check_against(out, ref, inputs, tol=1e-10):
    """Output and the gradients to q, k, v of `out` equal those of the fp64 reference `ref`."""
    assert rel_err(out, ref) < tol, rel_err(out, ref)
    g = torch.randn_like(ref)
    got = torch.autograd.grad(out, inputs, g.to(out.dtype), retain_graph=True)
    want = torch.autograd.grad(ref, inputs, g)
    for a, w, which in zip(got, want, "qkv"):
        assert rel_err(a, w) < tol * 10, f"d{which}: {rel_err(a, w)}"


def counted_softmax_attention(scores, count, v, mask):
    """sum_j c_ij exp(s_ij) v_j / sum_j c_ij exp(s_ij), c_ij = how many rounds query i met key j (fp64); rows that
    met no key and padded query rows are zero."""
    has = (count > 0).any(-1, keepdim=True)
    probs = torch.softmax((scores + torch.log(count)).masked_fill(~has, 0.0), dim=-1)
    out = torch.where(has, probs, 0.0) @ v
    return torch.where(mask[:, None, :, None], out, 0.0)


# ---------------------------------------------------------------------------------------------------------- local
@pytest.mark.parametrize("mode", ["blocked", "sliding"])
@pytest.mark.parametrize("n,window", [(37, 8), (37, 5), (64, 16), (20, 1), (20, 64)])
def test_local_equals_band_or_block_masked_softmax(mode, n, window):
    attn = build("local", n, window=window, mode=mode)
    q, k, v = rand_qkv(3, n, 16)
    mask = right_padded_mask([n, 11, 0], n)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    band = (i // window == j // window) if mode == "blocked" else ((i - j).abs() <= window // 2)
    assert torch.equal(attn.token_mask(n, n), band[None]), "token_mask is the window"
    assert attn.density(n) == pytest.approx(band.double().mean().item(), abs=1e-12)
    ref = reference_attention(q, k, v, mask, token_mask=band[None])
    check_against(attn(q, k, v, mask), ref, (q, k, v))


@pytest.mark.parametrize(
    "name,options,n,keys_per_query",
    [
        ("reformer", {"bucket_size": 4, "n_hashes": 3}, 64, 3 * 2 * 4),  # own and previous chunk, 3 rounds
        ("reformer", {"bucket_size": 64}, 40, 40),  # one chunk: every key, however many rounds
        ("smyrf", {"cluster_size": 8, "n_hashes": 2}, 64, 2 * 8),  # one key cluster per round
        ("sinkhorn", {"block_size": 8}, 64, 2 * 8),  # own block and one sorted block
    ],
)
def test_density_is_the_share_of_keys_each_query_scores(name, options, n, keys_per_query):
    assert build(name, n, **options).density() == pytest.approx(min(1.0, keys_per_query / n))


# ------------------------------------------------------------------------------------------------------- reformer
def shared_qk_reference(q, k, v, mask, scale, causal=False, qk="mean"):
    """Softmax over the shared-QK scores x_i . x_j/|x_j| with Reformer's rule: no attention to oneself unless the
    query has no other key. Written from the paper, one (batch, head) at a time, in fp64."""
    b, h, n, _ = q.shape
    out = torch.zeros(b, h, n, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            x = q[bi, hi] if qk == "query" else (q[bi, hi] + k[bi, hi]) / 2
            keys = x / x.norm(dim=-1, keepdim=True)
            s = x @ keys.T * scale
            for i in range(n):
                if not mask[bi, i]:
                    continue
                keys_ok = [j for j in range(n) if mask[bi, j] and (not causal or j <= i)]
                others = [j for j in keys_ok if j != i]
                use = others if others else [i]
                w = torch.softmax(s[i, use], dim=0)
                out[bi, hi, i] = w @ v[bi, hi, use]
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_hashes,qk", [(1, "mean"), (3, "mean"), (2, "query")])
def test_reformer_one_bucket_equals_shared_qk_softmax(causal, n_hashes, qk):
    n = 21
    attn = build("reformer", n, bucket_size=64, n_hashes=n_hashes, causal=causal, qk=qk)
    q, k, v = rand_qkv(3, n, 8)
    mask = right_padded_mask([n, 9, 1], n)
    ref = shared_qk_reference(q, k, v, mask, attn.scale, causal, qk)
    out = attn(q, k, v, mask)
    if qk == "query":  # k is not used at all: compare q and v gradients only
        assert rel_err(out, ref) < 1e-10
        g = torch.randn_like(ref)
        for a, w in zip(torch.autograd.grad(out, (q, v), g), torch.autograd.grad(ref, (q, v), g)):
            assert rel_err(a, w) < 1e-9
    else:
        check_against(out, ref, (q, k, v))


def test_reformer_scores_are_query_dot_unit_key_unscaled():
    # HF LSHSelfAttention (the FlashAttention recipe's reference): key / |key|, no further 1/sqrt(d) on the dots
    n = 13
    attn = build("reformer", n, bucket_size=64, n_hashes=1)
    q, k, v = rand_qkv(2, n, 32)
    mask = right_padded_mask([n, 7], n)
    assert attn.scale == 1.0
    check_against(attn(q, k, v, mask), shared_qk_reference(q, k, v, mask, 1.0), (q, k, v))
    flatter = build("reformer", n, bucket_size=64, n_hashes=1, scale=32**-0.5)
    assert rel_err(flatter(q, k, v, mask), shared_qk_reference(q, k, v, mask, 1.0)) > 1e-2


def test_reformer_equals_softmax_over_its_chunks():
    """Several buckets and rounds, from the paper's recipe given the hash buckets (eval mode: the same hashes):
    sort real tokens by (bucket, position), cut into chunks of bucket_size, attend to the own and previous chunk
    (circularly; padding sorted last), not to oneself unless alone; rounds add up as c_ij exp(s_ij)."""
    n, c, rounds = 37, 4, 2
    attn = build("reformer", n, bucket_size=c, n_hashes=rounds).eval()
    q, k, v = rand_qkv(2, n, 16)
    mask = right_padded_mask([n, 15], n)
    x = (q + k) / 2
    n_chunks = math.ceil(n / c)
    buckets = attn.hash(x, attn.buckets_for(n_chunks))
    count = torch.zeros(2, H, n, n, dtype=torch.float64)
    for bi in range(2):
        real = [i for i in range(n) if mask[bi, i]]
        for hi in range(H):
            for r in range(rounds):
                order = sorted(real, key=lambda i: (buckets[bi, hi, r, i].item(), i))
                order += [None] * (n_chunks * c - len(order))  # padding, sorted last
                chunks = [order[j * c : (j + 1) * c] for j in range(n_chunks)]
                for j, chunk in enumerate(chunks):
                    keys = [t for t in chunk + chunks[j - 1] if t is not None]
                    for i in chunk:
                        if i is None:
                            continue
                        use = [t for t in keys if t != i] or [i]
                        count[bi, hi, i, use] += 1
    assert (count == 0).any(), "the buckets should cut the attention matrix"
    xk = x / x.norm(dim=-1, keepdim=True)
    ref = counted_softmax_attention((x @ xk.transpose(-2, -1)) * attn.scale, count, v, mask)
    check_against(attn(q, k, v, mask), ref, (q, k, v))


def test_reformer_self_attention_only_when_alone():
    """Hand-evaluated: with two real tokens each attends only to the other; a lone token attends to itself."""
    attn = build("reformer", 4, bucket_size=8)
    q, k, v = rand_qkv(2, 4, 8, grad=False)
    out = attn(q, k, v, right_padded_mask([2, 1], 4))
    assert torch.allclose(out[0, :, 0], v[0, :, 1]) and torch.allclose(out[0, :, 1], v[0, :, 0])
    assert torch.allclose(out[1, :, 0], v[1, :, 0])
    assert out[0, :, 2:].abs().max() == 0 and out[1, :, 1:].abs().max() == 0


def test_reformer_hashes_change_with_seed_in_training_only():
    n = 64
    attn = build("reformer", n, bucket_size=4, n_hashes=1)
    q, k, v = rand_qkv(1, n, 16, grad=False)
    outs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        outs.append(attn(q, k, v))
    assert torch.equal(outs[0], outs[1]), "training is not reproducible under torch.manual_seed"
    assert not torch.allclose(outs[0], outs[2]), "the random rotations do not depend on the RNG"
    attn.eval()
    torch.manual_seed(5)
    first = attn(q, k, v)
    torch.manual_seed(6)
    assert torch.equal(first, attn(q, k, v)), "evaluation must not depend on the global RNG"


def test_reformer_default_buckets_follow_the_reference_rule():
    """HuggingFace's LSHSelfAttention._set_num_buckets, evaluated by hand: 2 x chunks rounded down to a power of
    two (2 x 16 chunks -> 32; 2 x 31 = 62 -> 32; 2 x 32 -> 64); one chunk attends to itself whole: one bucket."""
    attn = build("reformer", 2048)
    assert attn.bucket_size == 64 and attn.n_hashes == 2
    assert [attn.buckets_for(c) for c in (1, 2, 3, 16, 31, 32, 63)] == [1, 4, 4, 32, 32, 64, 64]
    assert attn.eval_normal.numel() == H * 2 * 16 * (64 // 2)  # the eval rotations at the model's 32 chunks


# ---------------------------------------------------------------------------------------------------------- smyrf
@pytest.mark.parametrize("nq,nk", [(29, 29), (20, 31)])
def test_smyrf_single_cluster_equals_softmax(nq, nk):
    attn = build("smyrf", max(nq, nk), cluster_size=64, n_hashes=3)
    q, k, v = rand_qkv(3, nq, 16, nk=nk)
    mask = right_padded_mask([nk, 7, 0], nk)
    check_against(attn(q, k, v, mask), reference_attention(q, k, v, mask), (q, k, v))


@pytest.mark.parametrize("nq,nk,qcs,kcs", [(50, 50, 8, 8), (27, 55, 4, 8)])
def test_smyrf_clusters_are_balanced_and_sorted_by_hash(nq, nk, qcs, kcs):
    attn = build("smyrf", nk, n_hashes=3, q_cluster_size=qcs, k_cluster_size=kcs, r=0.5)
    q, k, _ = rand_qkv(2, nq, 16, nk=nk, grad=False)
    lengths = [nk, 19]
    mask = right_padded_mask(lengths, nk)
    q_order, k_order, q_hash, k_hash = attn.clusters(q, k, mask)
    n_clusters = math.ceil(max(nq / qcs, nk / kcs))
    assert q_order.shape == (2, H, 3, n_clusters, qcs) and k_order.shape == (2, H, 3, n_clusters, kcs)
    for order, hashes, size in ((q_order, q_hash, qcs), (k_order, k_hash, kcs)):
        flat = order.flatten(-2)
        total = n_clusters * size
        # every token in exactly one cluster per round, every cluster the same size
        assert torch.equal(flat.sort(dim=-1).values, torch.arange(total).expand_as(flat))
        # clusters are consecutive runs of the sorted hash
        sorted_hash = hashes.gather(-1, flat)
        assert (sorted_hash[..., 1:] >= sorted_hash[..., :-1]).all()
    # padded keys (and the internal pad) fill the last key slots
    for bi, length in enumerate(lengths):
        last = k_order.flatten(-2)[bi, :, :, length:]
        assert (last >= length).all()


def test_smyrf_equals_softmax_over_its_clusters():
    """Several clusters and rounds: query i attends to key j with weight c_ij exp(s_ij) / sum_j c_ij exp(s_ij),
    c_ij = the number of rounds in which i and j share a cluster (from `clusters`, eval mode: the same hashes)."""
    n, rounds = 45, 2
    attn = build("smyrf", n, cluster_size=8, n_hashes=rounds).eval()
    q, k, v = rand_qkv(2, n, 16)
    mask = right_padded_mask([n, 20], n)
    q_order, k_order, _, _ = attn.clusters(q, k, mask)
    b, h, _, n_clusters, size = q_order.shape
    count = torch.zeros(b, h, n, n, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for r in range(rounds):
                for c in range(n_clusters):
                    qs = [i for i in q_order[bi, hi, r, c].tolist() if i < n]
                    ks = [j for j in k_order[bi, hi, r, c].tolist() if j < n and mask[bi, j]]
                    for i in qs:
                        count[bi, hi, i, ks] += 1
    assert count.sum() > 0 and (count == 0).any(), "the clusters should cut the attention matrix"
    ref = counted_softmax_attention((q @ k.transpose(-2, -1)) * attn.scale, count, v, mask)
    check_against(attn(q, k, v, mask), ref, (q, k, v))


def test_xbox_plus_turns_inner_products_into_distances():
    q, k, _ = rand_qkv(2, 12, 6, grad=False)
    mask = right_padded_mask([12, 5], 12)
    k = k.clone()
    k[1, :, 5:] *= 100  # padded keys must not set M
    fq, gk = xbox_plus(q, k, torch.ones_like(mask), mask)
    for bi in range(2):
        for hi in range(H):
            m2 = q[bi, hi].pow(2).sum(-1).max() + k[bi, hi][mask[bi]].pow(2).sum(-1).max()
            dist2 = torch.cdist(fq[bi, hi], gk[bi, hi]).pow(2)
            want = 2 * m2 - 2 * q[bi, hi] @ k[bi, hi].T
            real = mask[bi]
            assert torch.allclose(dist2[:, real], want[:, real], atol=1e-9, rtol=1e-9)


# ------------------------------------------------------------------------------------------------------- sinkhorn
def test_sinkhorn_normalisation_is_doubly_stochastic():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 6, 6, generator=g, dtype=torch.float64) * 2
    raw = sinkhorn(logits, iters=0, temperature=0.75)
    assert (raw.sum(-1) - 1).abs().max() > 0.1, "random logits should not already be doubly stochastic"
    p = sinkhorn(logits, iters=200, temperature=0.75)
    assert (p >= 0).all()
    assert (p.sum(-1) - 1).abs().max() < 1e-6 and (p.sum(-2) - 1).abs().max() < 1e-6
    few = sinkhorn(logits, iters=2, temperature=0.75)
    assert (few.sum(-2) - 1).abs().max() < 1e-9, "the last step normalises the columns exactly"
    # log space: huge logits in fp32 stay finite
    big = sinkhorn(logits.float() * 1e4, iters=8, temperature=0.75)
    assert torch.isfinite(big).all() and (big.sum(-2) - 1).abs().max() < 1e-5


def test_sinkhorn_sort_matrix_is_doubly_stochastic():
    n = 45
    attn = build("sinkhorn", n, block_size=8, sinkhorn_iters=300)
    _, k, _ = rand_qkv(2, n, 16, dtype=torch.float32, grad=False)
    p = attn.sort_matrix(k, right_padded_mask([n, 20], n))
    assert p.shape == (2, H, 6, 6)
    # convergence is slow when the sort logits are far apart (near a hard permutation): fp32 and a loose row bound
    assert (p.sum(-1) - 1).abs().max() < 2e-3 and (p.sum(-2) - 1).abs().max() < 1e-4


def test_sinkhorn_one_block_equals_softmax():
    n = 30
    attn = build("sinkhorn", n, block_size=32).double()
    q, k, v = rand_qkv(3, n, 16)
    mask = right_padded_mask([n, 13, 0], n)
    check_against(attn(q, k, v, mask), reference_attention(q, k, v, mask), (q, k, v))


class FixedLogits(nn.Module):
    """A stand-in sorting network that always proposes the same block permutation."""

    def __init__(self, perm: list[int], strength: float):
        super().__init__()
        self.register_buffer("logits", torch.eye(len(perm), dtype=torch.float64)[perm] * strength)

    def forward(self, block_emb):
        return self.logits.expand(*block_emb.shape[:-2], -1, -1)


def test_sinkhorn_hard_permutation_equals_own_plus_sorted_block_softmax():
    n, bs = 37, 8  # 5 blocks, the last one internally padded
    perm = [3, 0, 2, 4, 1]  # block i is sorted next to block perm[i] (block 2 onto itself)
    attn = build("sinkhorn", n, block_size=bs).double()
    attn.sort_net = FixedLogits(perm, strength=60.0)
    q, k, v = rand_qkv(2, n, 16)
    mask = right_padded_mask([n, 13], n)
    blk = torch.arange(n) // bs
    partner = torch.tensor(perm)[blk]
    allowed = (blk[None, :] == blk[:, None]) | (blk[None, :] == partner[:, None])
    ref = reference_attention(q, k, v, mask, token_mask=allowed[None])
    check_against(attn(q, k, v, mask), ref, (q, k, v), tol=1e-9)
