"""What the tests of the approximate baselines `local`, `reformer`, `smyrf` and `sinkhorn` share: their names,
settings that exercise the approximation at small N, a builder and seeded fp64 inputs."""

from __future__ import annotations

import torch

from attention_impls import build_attention
from tests.reference import generator

H = 2
NAMES = ("local", "reformer", "smyrf", "sinkhorn")
# Settings with several windows / buckets / clusters / blocks at small N, so the approximation is really exercised.
SMALL = {
    "local": {"window": 6, "mode": "sliding"},
    "reformer": {"bucket_size": 4, "n_hashes": 3},
    "smyrf": {"cluster_size": 8, "n_hashes": 3},
    "sinkhorn": {"block_size": 8},
}


def build(name: str, n: int, d: int = 16, dropout: float = 0.0, **options):
    """The backend `name` with H heads of `d` dims, built for length `n`."""
    return build_attention(name, heads=H, head_dim=d, seq_len=n, dropout=dropout, options=options)


def rand_qkv(b: int, n: int, d: int, dtype=torch.float64, nk: int | None = None, grad: bool = True):
    """q (b, H, n, d), k and v (b, H, nk, d), drawn from a generator seeded by the shape."""
    g = generator(b * 1000 + n)  # different shapes draw different inputs
    nk = n if nk is None else nk
    shapes = [(b, H, n, d), (b, H, nk, d), (b, H, nk, d)]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_(grad) for s in shapes]
