"""`reformer`: LSH attention with shared query/key vectors (Kitaev, Kaiser & Levskaya 2020, "Reformer").

What it computes, per head and per round of hashing (n_hashes rounds):
1. Shared QK. Reformer ties the query and key projections; a token's key is its normalised query. The model gives
   this backend separate q and k, so the shared vector is x = (q + k) / 2 (option qk='mean'): that is one linear
   projection of the input, W_QK = (W_Q + W_K) / 2, so the layer is exactly a shared-QK layer and both projections
   learn. qk='query' uses q alone and ignores k (as the reference codes do, below).
2. Hash: random rotation R (d x n_buckets/2, Gaussian), bucket = argmax([x R ; -x R]) of the normalised x (angular
   LSH). n_buckets, unless set: 2 x the number of chunks rounded down to a power of two (as below).
3. Sort tokens by (bucket, position), cut the sorted order into chunks of bucket_size, and let each chunk attend to
   itself and to the previous chunk (circularly), scores x_i . (x_j / |x_j|) * scale, scale 1 unless set (the
   reference's 1/sqrt(d) is spent on the key's norm, below). A token does not attend to itself unless it has no
   other key (then it attends only to itself). Option causal adds j <= i.
4. Undo the sort; the n_hashes rounds are merged by their softmax normalisers (logsumexp weights), which equals a
   softmax over the union of keys seen in any round (pairs seen in several rounds count once per round; the paper's
   duplicate correction is not applied, as in the LRA and trax defaults).
What it approximates: shared-QK softmax attention, keeping only pairs that hash close. With one bucket and one chunk
covering the sequence it is exactly softmax attention over the shared-QK scores with the self-exclusion rule.
Cost: O(n_hashes * N * bucket_size) time and memory, plus an O(n_hashes * N log N) sort.
Padding: padded tokens (key padding and the internal pad up to a multiple of bucket_size) are put in a bucket of
their own, sorted last, and masked as keys, so they get no weight (exactly). Padded query rows are zero.
Randomness: rotations are drawn from torch's global RNG on every training call, and are fixed in eval (drawn at
construction for the model's length; deterministic predictions, saved with the model; see HashRounds).

Defaults are the FlashAttention recipe's reference code (github.com/mlpen/Nystromformer, LRA/code/
attention_reformer.py: HuggingFace transformers 3.3.1 LSHSelfAttention under ReformerConfig() defaults but for
num_hashes): n_hashes 2 (lra_config.py's "reformer-2" entry, num_hash 2); bucket_size 64 (lsh_attn_chunk_length=64);
own chunk and the previous one (lsh_num_chunks_before=1, lsh_num_chunks_after=0); n_buckets
2 ** ((2 * N // 64).bit_length() - 1) (LSHSelfAttention._set_num_buckets; its factorisation above
2 * max(sqrt(max_len / 64), 64) = 128 buckets never happens at LRA lengths); shared QK from the query projection
(line 18 ties query_key's weight to W_q's, W_k unused: qk='query'; the default 'mean' is the same function class, one
linear map, and keeps every projection in use, which DistributedDataParallel requires); no attention dropout
(lsh_attention_probs_dropout_prob=0.0), so `drop_attention` is False and a run asking for attention dropout trains
without it and says so (the record's attention_dropout_applied: false). The LRA repo's reformer_attention.py
applies none either (ReformerSelfAttention takes dropout_rate and never uses it). Score scale 1: HF's
LSHSelfAttention divides the key by its RMS and by sqrt(head_dim) (_len_and_dim_norm: a unit key) and scales the
query . key dots no further. Before 2026-12-04 this backend also multiplied by 1/sqrt(d), so its scores started
sqrt(d) times flatter than the reference's (5.7x at head dim 32) and fa-paper ListOps stayed at chance (18.2%,
docs/baselines.md); `scale` is an option, so that run is `--set attention.reformer.scale=0.1767766952966369`.
Deviation kept: that reference computes the whole layer in fp32 (attention.py lines 72-74); here the hashing runs in
fp32 and the scores in the autocast dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention_impls._bucketed import HashRounds, check_positive_int, fp32_region, gather_sorted, pad_seq, real_tokens
from attention_impls.base import Capabilities
from attention_impls.masking import score_dtype, zero_padded_inputs
from attention_impls.registry import register_backend
from lra.core.numbers import ceil_div

QK_SOURCES = ("mean", "query")


@register_backend("reformer")
class ReformerAttention(HashRounds):
    """LSH attention (shared QK). Options: n_hashes (2), bucket_size (64), n_buckets (None: 2 N / bucket_size to a
    power of two), causal (False), qk ('mean' or 'query'), drop_attention (False), scale (1.0: HF's unit keys)."""

    capabilities = Capabilities(
        exact=False,
        dropout_reference="HF LSHSelfAttention, lsh_attention_probs_dropout_prob 0.0; drop_attention=true applies it",
        notes="LSH buckets, shared QK; O(n_hashes * N * bucket_size); attention dropout off by default",
    )

    def __init__(
        self,
        *args,
        bucket_size: int = 64,
        n_buckets: int | None = None,
        causal: bool = False,
        qk: str = "mean",
        drop_attention: bool = False,
        scale: float | None = 1.0,
        **kwargs,
    ):
        super().__init__(*args, scale=scale, **kwargs)
        self.drop_attention = bool(drop_attention)
        if not self.drop_attention:
            self.dropout = 0.0  # as the reference code (see the module docstring)
        self.bucket_size = check_positive_int("bucket_size", bucket_size, "reformer")
        if n_buckets is not None:
            check_positive_int("n_buckets", n_buckets, "reformer")
            if n_buckets > 1 and n_buckets % 2:
                raise ValueError(f"reformer: n_buckets must be 1 or even (angular LSH uses +-R), got {n_buckets}")
        self.n_buckets = n_buckets
        self.causal = bool(causal)
        if qk not in QK_SOURCES:
            raise ValueError(f"reformer: qk must be one of {', '.join(QK_SOURCES)}, got {qk!r}")
        self.qk = qk
        c = min(self.bucket_size, self.seq_len)
        self.init_eval_noise(
            self.heads * self.n_hashes * self.head_dim * (self.buckets_for(ceil_div(self.seq_len, c)) // 2)
        )

    def buckets_for(self, n_chunks: int) -> int:
        """Number of hash buckets for a sequence of `n_chunks` chunks: 2 per chunk rounded down to a power of two
        (HuggingFace's _set_num_buckets), one for a single chunk (which attends to all of itself anyway)."""
        if self.n_buckets is not None:
            return self.n_buckets
        return 1 if n_chunks == 1 else 2 ** ((2 * n_chunks).bit_length() - 1)

    def hash(self, x: torch.Tensor, n_buckets: int) -> torch.Tensor:
        """Angular LSH buckets (batch, heads, n_hashes, N) of the vectors x (batch, heads, N, d)."""
        b, h, n, d = x.shape
        if n_buckets == 1:
            return torch.zeros(b, h, self.n_hashes, n, dtype=torch.long, device=x.device)
        with torch.no_grad(), fp32_region(x.device):
            rot = self.normal((h, self.n_hashes, d, n_buckets // 2), x.device)
            xn = F.normalize(x.detach().to(score_dtype(x.dtype)), dim=-1)
            rotated = torch.einsum("bhnd,hrdk->bhrnk", xn, rot.to(xn.dtype))
            return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)

    def density(self, seq_len: int | None = None) -> float:
        """Keys scored per query (own and previous chunk, every round) over the sequence length, at most 1."""
        n = self.seq_len if seq_len is None else seq_len
        c = min(self.bucket_size, n)
        keys = c if ceil_div(n, c) == 1 else 2 * c
        return min(1.0, self.n_hashes * keys / n)

    def forward(self, q, k, v, key_padding_mask=None):
        if q.shape != k.shape or q.shape[:3] != v.shape[:3]:
            raise ValueError(
                f"reformer shares queries and keys (self-attention), so q and k must have the same shape and v the "
                f"same sequence length; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
            )
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        b, h, n, d = q.shape
        x = q if self.qk == "query" else (q + k) * 0.5
        c = min(self.bucket_size, n)
        nc = ceil_div(n, c)
        npad = nc * c
        real = real_tokens(key_padding_mask, b, n, npad, q.device)
        x, vp = pad_seq(x, npad), pad_seq(v, npad)

        n_buckets = self.buckets_for(nc)
        buckets = self.hash(x, n_buckets)  # (b, h, r, npad)
        buckets = torch.where(real[:, None, None, :], buckets, n_buckets)  # padding: a bucket of its own, last
        pos = torch.arange(npad, device=q.device)
        order = (buckets * npad + pos).argsort(dim=-1)  # sort by bucket, then position: (b, h, r, npad)

        sq = gather_sorted(x, order, c)  # (b, h, r, nc, c, d)
        sk = F.normalize(sq.to(score_dtype(sq.dtype)), dim=-1).to(sq.dtype)  # fp32: eps underflows in fp16
        sv = gather_sorted(vp, order, c)
        q_pos = order.reshape(b, h, self.n_hashes, nc, c)
        k_real = real[:, None, None, :].expand_as(order).gather(3, order).reshape_as(q_pos)
        k_pos = q_pos
        if nc > 1:  # attend to the own chunk and the previous one (circularly)
            sk, sv, k_pos, k_real = (torch.cat([t, t.roll(1, dims=3)], dim=4) for t in (sk, sv, k_pos, k_real))

        scores = torch.matmul(sq, sk.transpose(-2, -1))
        scores = scores.to(score_dtype(scores.dtype)) * self.scale  # (b, h, r, nc, c, kc)
        allowed = k_real.unsqueeze(-2)
        if self.causal:
            allowed = allowed & (k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1))
        is_self = k_pos.unsqueeze(-2) == q_pos.unsqueeze(-1)
        others = allowed & ~is_self
        allowed = torch.where(others.any(dim=-1, keepdim=True), others, allowed)
        return self.attend_groups(scores, allowed, sv, order.argsort(dim=-1), n, key_padding_mask)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, n_hashes={self.n_hashes}, bucket_size={self.bucket_size}, "
            f"n_buckets={self.n_buckets}, causal={self.causal}, qk={self.qk}, drop_attention={self.drop_attention}"
        )
