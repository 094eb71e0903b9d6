"""`smyrf`: attention within balanced asymmetric-LSH clusters (Daras, Kitaev, Odena & Dimakis 2020, "SMYRF").

What it computes, per head and per round of hashing (n_hashes rounds):
1. Asymmetric transform (the paper's XBOX+), turning maximum inner product search into nearest-neighbour search:
   F(q) = [q, 0, sqrt(M^2 - |q|^2)], G(k) = [k, sqrt(M^2 - |k|^2), 0] with M^2 = max|q|^2 + max|k|^2 over the
   real tokens, so |F(q) - G(k)|^2 = 2 M^2 - 2 q.k: the nearest keys are the ones with the largest scores.
2. E2LSH hash h(x) = floor((a . x + b) / r), a ~ N(0, I), b ~ U(0, r), applied to F(q) and G(k) alike.
3. Balanced clusters: queries sorted by hash (ties by position) and cut into clusters of q_cluster_size; keys sorted
   likewise and cut into as many clusters of k_cluster_size. Query cluster c attends to key cluster c (softmax).
4. Undo the sort; the rounds are merged by their softmax normalisers (logsumexp weights), i.e. a softmax over the
   union of keys met in any round (a key met in several rounds counts once per round, as in the SMYRF code).
What it approximates: softmax attention, keeping each query's pairs with keys that land in its cluster. With one
cluster covering the sequence it is exactly softmax attention.
Cost: O(n_hashes * N * cluster_size) time and memory, plus an O(n_hashes * N log N) sort.
Padding: padded keys (and the internal pad up to a whole number of clusters) hash to +inf, so they fill the last
clusters, and are masked there: they get no weight (exactly). In self-attention padded queries go last too, so every
cluster holding a real query holds a real key when q_cluster_size == k_cluster_size. A query whose cluster has no
real key in some round takes no weight from that round; in no round at all, its row is zero (only possible with
unequal cluster sizes or cross-attention).
Randomness: (a, b) are drawn from torch's global RNG on every training call (b = r * Phi(z) of a standard normal z,
uniform on [0, r)), and are fixed in eval (drawn at construction; deterministic predictions, saved with the model;
see HashRounds).

Sources. The FlashAttention paper's Smyrf row is not in its recipe's code (mlpen/Nystromformer LRA/code/ has no
SMYRF); its authors' LRA baselines code, HazyResearch/fly, has it: src/models/attention/smyrf_attention.py
(SmyrfAttention(n_hashes, q_cluster_size, k_cluster_size, r=1), attention dropout on the cluster probabilities) and
configs/experiment/lra/<task>/smyrf.yaml: n_hashes 2, q_cluster_size = k_cluster_size 32 for text, image and
pathfinder, 64 for listops, 128 for retrieval, attention dropout 0.1. Defaults here: n_hashes 2, cluster_size 32
(the three tasks' value; `--set attention.smyrf.cluster_size=64` for ListOps' and 128 for Retrieval's), r 1.0;
attention dropout applies, as there.
"""

from __future__ import annotations

import torch

from attention_impls._bucketed import HashRounds, check_positive_int, fp32_region, gather_sorted, pad_seq, real_tokens
from attention_impls.base import Capabilities
from attention_impls.masking import score_dtype, zero_padded_inputs
from attention_impls.registry import register_backend
from lra.core.numbers import ceil_div


def xbox_plus(
    q: torch.Tensor, k: torch.Tensor, q_real: torch.Tensor, k_real: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The XBOX+ asymmetric transforms F(q), G(k): (b, h, n, d) -> (b, h, n, d + 2); norms over real tokens only.

    q_real, k_real: bool (b, n) masks of real tokens (padding does not set M).
    """
    qn2 = q.pow(2).sum(-1, keepdim=True)
    kn2 = k.pow(2).sum(-1, keepdim=True)
    mq2 = torch.where(q_real[:, None, :, None], qn2, 0).amax(dim=2, keepdim=True)
    mk2 = torch.where(k_real[:, None, :, None], kn2, 0).amax(dim=2, keepdim=True)
    m2 = mq2 + mk2
    q_ext = (m2 - qn2).clamp_min(0).sqrt()
    k_ext = (m2 - kn2).clamp_min(0).sqrt()
    fq = torch.cat([q, torch.zeros_like(q_ext), q_ext], dim=-1)
    gk = torch.cat([k, k_ext, torch.zeros_like(k_ext)], dim=-1)
    return fq, gk


@register_backend("smyrf")
class SmyrfAttention(HashRounds):
    """Balanced asymmetric-LSH clustering. Options: n_hashes (2), cluster_size (32; or q_cluster_size and
    k_cluster_size separately), r (E2LSH bucket width, 1.0)."""

    capabilities = Capabilities(exact=False, notes="balanced LSH clusters; O(n_hashes * N * cluster_size)")

    def __init__(
        self,
        *args,
        cluster_size: int = 32,
        q_cluster_size: int | None = None,
        k_cluster_size: int | None = None,
        r: float = 1.0,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        check_positive_int("cluster_size", cluster_size, "smyrf")
        qcs = cluster_size if q_cluster_size is None else q_cluster_size
        kcs = cluster_size if k_cluster_size is None else k_cluster_size
        self.q_cluster_size = check_positive_int("q_cluster_size", qcs, "smyrf")
        self.k_cluster_size = check_positive_int("k_cluster_size", kcs, "smyrf")
        if not r > 0:
            raise ValueError(f"smyrf: option r (the E2LSH bucket width) must be positive, got {r!r}")
        self.r = float(r)
        self.init_eval_noise(self.heads * self.n_hashes * (self.head_dim + 3))

    def layout(self, nq: int, nk: int) -> tuple[int, int, int]:
        """(clusters, query cluster size, key cluster size) for nq queries and nk keys: equal cluster counts."""
        qcs, kcs = min(self.q_cluster_size, nq), min(self.k_cluster_size, nk)
        n_clusters = max(ceil_div(nq, qcs), ceil_div(nk, kcs))
        return n_clusters, qcs, kcs

    def clusters(
        self, q: torch.Tensor, k: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cluster membership: (q_order, k_order, q_hash, k_hash).

        q_order (b, h, n_hashes, clusters, q_cluster_size) holds query positions (in the internally padded sequence),
        k_order likewise for keys; q_hash / k_hash (b, h, n_hashes, padded length) are the hash values (+inf for
        padding). Cluster c of round r is q_order[..., r, c, :] with keys k_order[..., r, c, :].
        """
        b, h, nq, d = q.shape
        nk = k.shape[2]
        n_clusters, qcs, kcs = self.layout(nq, nk)
        nqp, nkp = n_clusters * qcs, n_clusters * kcs
        k_real = real_tokens(key_padding_mask, b, nk, nkp, q.device)
        if key_padding_mask is not None and nq == nk:
            q_real = real_tokens(key_padding_mask, b, nq, nqp, q.device)
        else:
            q_real = real_tokens(None, b, nq, nqp, q.device)
        with torch.no_grad(), fp32_region(q.device):
            dt = score_dtype(q.dtype)
            fq, gk = xbox_plus(pad_seq(q.detach().to(dt), nqp), pad_seq(k.detach().to(dt), nkp), q_real, k_real)
            z = self.normal((h, self.n_hashes, d + 3), q.device).to(dt)
            a = z[..., : d + 2]
            shift = torch.special.ndtr(z[..., d + 2]) * self.r  # uniform on [0, r)
            q_hash = torch.floor((torch.einsum("bhnd,hrd->bhrn", fq, a) + shift[..., None]) / self.r)
            k_hash = torch.floor((torch.einsum("bhnd,hrd->bhrn", gk, a) + shift[..., None]) / self.r)
            q_hash = q_hash.masked_fill(~q_real[:, None, None, :], float("inf"))
            k_hash = k_hash.masked_fill(~k_real[:, None, None, :], float("inf"))
            q_order = torch.sort(q_hash, dim=-1, stable=True).indices
            k_order = torch.sort(k_hash, dim=-1, stable=True).indices
        r = self.n_hashes
        return (
            q_order.reshape(b, h, r, n_clusters, qcs),
            k_order.reshape(b, h, r, n_clusters, kcs),
            q_hash,
            k_hash,
        )

    def density(self, seq_len: int | None = None) -> float:
        """Keys scored per query (one key cluster per round) over the sequence length, at most 1."""
        n = self.seq_len if seq_len is None else seq_len
        return min(1.0, self.n_hashes * min(self.k_cluster_size, n) / n)

    def forward(self, q, k, v, key_padding_mask=None):
        if k.shape[:3] != v.shape[:3] or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
            raise ValueError(
                f"smyrf: q (b, h, nq, d), k (b, h, nk, d) and v (b, h, nk, dv) must agree; "
                f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
            )
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        b, nq, nk = q.shape[0], q.shape[2], k.shape[2]
        n_clusters, qcs, kcs = self.layout(nq, nk)
        nqp, nkp = n_clusters * qcs, n_clusters * kcs
        q_order, k_order, _, _ = self.clusters(q, k, key_padding_mask)
        q_order, k_order = q_order.flatten(-2), k_order.flatten(-2)  # (b, h, r, padded length)
        k_real = real_tokens(key_padding_mask, b, nk, nkp, q.device)

        sq = gather_sorted(pad_seq(q, nqp), q_order, qcs)
        sk = gather_sorted(pad_seq(k, nkp), k_order, kcs)
        sv = gather_sorted(pad_seq(v, nkp), k_order, kcs)
        allowed = k_real[:, None, None, :].expand_as(k_order).gather(3, k_order)
        allowed = allowed.reshape(*k_order.shape[:3], n_clusters, 1, kcs)

        scores = torch.matmul(sq, sk.transpose(-2, -1))
        scores = scores.to(score_dtype(scores.dtype)) * self.scale  # (b, h, r, clusters, qcs, kcs)
        return self.attend_groups(scores, allowed, sv, q_order.argsort(dim=-1), nq, key_padding_mask)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, n_hashes={self.n_hashes}, q_cluster_size={self.q_cluster_size}, "
            f"k_cluster_size={self.k_cluster_size}, r={self.r}"
        )
