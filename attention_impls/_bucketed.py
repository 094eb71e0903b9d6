"""Helpers shared by the bucketed approximate backends (`local`, `reformer`, `smyrf`, `sinkhorn`).

They attend within small groups of keys (windows, hash buckets, clusters, blocks), so they need a softmax restricted
to a mask that may leave a row empty, the log-normaliser of each group (to merge rounds of hashing), reproducible
random draws for the hashes, and a way to run the fragile parts in fp32 under autocast.
"""

from __future__ import annotations

import torch

from attention_impls.masking import NO_KEY_LSE, masked_softmax_lse  # noqa: F401 (likewise)
from lra.core.numbers import ceil_div  # noqa: F401 (the bucketed backends import it from here)


def real_tokens(key_padding_mask: torch.Tensor | None, batch: int, n: int, padded_n: int, device) -> torch.Tensor:
    """Bool (batch, padded_n): True for real tokens; the backend's own padding beyond `n` is False."""
    if key_padding_mask is None:
        real = torch.ones(batch, n, dtype=torch.bool, device=device)
    else:
        if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (batch, n):
            raise ValueError(
                f"key_padding_mask must be a bool tensor of shape (batch, seq_k) = ({batch}, {n}), True for real "
                f"tokens; got {key_padding_mask.dtype} of shape {tuple(key_padding_mask.shape)}"
            )
        real = key_padding_mask
    if padded_n > n:
        real = torch.nn.functional.pad(real, (0, padded_n - n), value=False)
    return real


def pad_seq(x: torch.Tensor, padded_n: int) -> torch.Tensor:
    """Zero-pad (batch, heads, n, d) along the sequence to `padded_n`."""
    extra = padded_n - x.shape[2]
    return torch.nn.functional.pad(x, (0, 0, 0, extra)) if extra else x


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax precision: fp32, or fp64 for fp64 inputs (as `naive` does)."""
    return torch.promote_types(dtype, torch.float32)


def combine_rounds(out: torch.Tensor, lse: torch.Tensor, dim: int) -> torch.Tensor:
    """Merge per-round attention outputs (..., R, N, D) by their softmax normalisers (..., R, N) along `dim`.

    Round r covered a set of keys with normaliser Z_r = exp(lse_r); weighting its normalised output by
    Z_r / sum_r Z_r gives the softmax over the union of the rounds' keys (keys met in several rounds counted once per
    round, as in Reformer and SMYRF).
    """
    weights = torch.softmax(lse, dim=dim).unsqueeze(-1)
    return (out.to(weights.dtype) * weights).sum(dim=dim)


def hash_generator(seed: torch.Tensor, training: bool, device: torch.device) -> torch.Generator | None:
    """Where hash randomness comes from: torch's global RNG in training (None), a generator fixed by `seed` in eval.

    Training draws fresh hashes every forward call (reproducible under torch.manual_seed); evaluation draws the same
    hashes on every call, so a trained model's predictions are deterministic.
    """
    if training:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def new_seed() -> torch.Tensor:
    """An int64 seed drawn from torch's global RNG (so construction under torch.manual_seed is reproducible)."""
    return torch.randint(0, 2**62, (), dtype=torch.int64)


def fp32_region(device: torch.device):
    """A context with autocast off, for the parts that must run in full precision (hashing, Sinkhorn)."""
    return torch.autocast(device_type=device.type, enabled=False)


def check_positive_int(name: str, value: int, backend: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{backend}: option {name} must be a positive integer, got {value!r}")
    return value
