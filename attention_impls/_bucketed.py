"""Helpers shared by the bucketed approximate backends (`local`, `reformer`, `smyrf`, `sinkhorn`).

They attend within small groups of keys (windows, hash buckets, clusters, blocks): they pad the sequence to whole
groups, run the fragile parts in fp32 under autocast, and the hashed ones (`HashRounds`: reformer, smyrf) sort
tokens into groups per round of hashing, attend within the groups, sort back and merge the rounds by their
log-normalisers, with hashes drawn reproducibly.
"""

from __future__ import annotations

import math

import torch

from attention_impls.base import AttentionBackend
from attention_impls.masking import masked_softmax_lse, zero_padded_outputs


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


def fp32_region(device: torch.device):
    """A context with autocast off, for the parts that must run in full precision (hashing, Sinkhorn)."""
    return torch.autocast(device_type=device.type, enabled=False)


def check_positive_int(name: str, value: int, backend: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{backend}: option {name} must be a positive integer, got {value!r}")
    return value


def combine_rounds(out: torch.Tensor, lse: torch.Tensor, dim: int) -> torch.Tensor:
    """Merge per-round attention outputs (..., R, N, D) by their softmax normalisers (..., R, N) along `dim`.

    Round r covered a set of keys with normaliser Z_r = exp(lse_r); weighting its normalised output by
    Z_r / sum_r Z_r gives the softmax over the union of the rounds' keys (keys met in several rounds counted once per
    round, as in Reformer and SMYRF).
    """
    weights = torch.softmax(lse, dim=dim).unsqueeze(-1)
    return (out.to(weights.dtype) * weights).sum(dim=dim)


def gather_sorted(t: torch.Tensor, order: torch.Tensor, size: int) -> torch.Tensor:
    """Tokens t (b, h, n, e) in each round's order (b, h, rounds, n), cut into groups of `size`:
    (b, h, rounds, n // size, size, e)."""
    b, h, r = order.shape[:3]
    idx = order.reshape(b, h, r, -1, 1).expand(-1, -1, -1, -1, t.shape[-1])
    picked = t.unsqueeze(2).expand(-1, -1, r, -1, -1).gather(3, idx)
    return picked.reshape(b, h, r, -1, size, t.shape[-1])


def unsort_rounds(out: torch.Tensor, lse: torch.Tensor, undo: torch.Tensor, n: int) -> torch.Tensor:
    """Per-round outputs (..., groups, size, dv) and log-normalisers (..., groups, size) computed in sorted order,
    put back in position order by `undo` (b, h, rounds, padded n) and merged over the rounds: (b, h, n, dv)."""
    dv = out.shape[-1]
    out = out.reshape(*undo.shape, dv).gather(3, undo.unsqueeze(-1).expand(-1, -1, -1, -1, dv))
    lse = lse.reshape(undo.shape).gather(3, undo)
    return combine_rounds(out, lse, dim=2)[:, :, :n].to(out.dtype)


class HashRounds(AttentionBackend):
    """Base of the backends that attend within hash groups over `n_hashes` rounds (reformer, smyrf).

    Randomness: the hashes come from torch's global RNG on every training call (reproducible under
    torch.manual_seed). In eval they are fixed, so a trained model's predictions are deterministic: the standard
    normals of the `eval_normal` buffer, drawn once at construction (a subclass sizes it for the model's length with
    `init_eval_noise`) and saved with the model. A buffer, not a seeded generator, because torch.compile cannot trace
    the creation of a generator: an evaluation reading the buffer compiles like the training step. An input longer
    than the model's, needing more numbers, draws them from a generator seeded by the `hash_seed` buffer (eagerly).
    """

    def __init__(self, *args, n_hashes: int = 2, **kwargs):
        super().__init__(*args, **kwargs)
        self.n_hashes = check_positive_int("n_hashes", n_hashes, self.name)
        # drawn from torch's global RNG, so construction under torch.manual_seed is reproducible
        self.register_buffer("hash_seed", torch.randint(0, 2**62, (), dtype=torch.int64))

    def init_eval_noise(self, count: int) -> None:
        """Draw the `count` standard normals an evaluation at the model's length reads (call at the end of __init__)."""
        self.register_buffer("eval_normal", torch.randn(count))

    def normal(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        """Standard normals of `shape` for this call's hashes: fresh from the global RNG in training; in eval the
        leading numbers of `eval_normal` (a generator seeded by `hash_seed` if the input needs more)."""
        if self.training:
            return torch.randn(shape, device=device)
        count = math.prod(shape)
        if count <= self.eval_normal.numel():
            return self.eval_normal[:count].reshape(shape).to(device)
        gen = torch.Generator(device=device)
        gen.manual_seed(int(self.hash_seed))
        return torch.randn(shape, generator=gen, device=device)

    def attend_groups(
        self,
        scores: torch.Tensor,
        allowed: torch.Tensor,
        sorted_v: torch.Tensor,
        undo: torch.Tensor,
        n: int,
        key_padding_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Softmax within each group over the allowed keys, attention dropout, times the group's values, back in
        position order (the first `n` queries), rounds merged, padded rows zeroed: (b, h, n, dv)."""
        probs, lse = masked_softmax_lse(scores, allowed)
        out = torch.matmul(self.drop(probs).to(sorted_v.dtype), sorted_v)
        return zero_padded_outputs(unsort_rounds(out, lse, undo, n), key_padding_mask)
