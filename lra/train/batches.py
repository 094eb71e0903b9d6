"""Deterministic batches: the examples of step s are a pure function of (seed, s), so a resumed run sees the same data.

Each epoch is a seeded permutation of the training split (the last partial batch is dropped). With several
processes the global batch is cut into equal contiguous slices, one per rank.
"""

from __future__ import annotations

import numpy as np
import torch

from tasks.registry import Split


def batch_indices(
    step: int, num_examples: int, batch_size: int, seed: int, rank: int = 0, world: int = 1
) -> np.ndarray:
    """Indices of the examples this rank trains on at `step` (0-based)."""
    if batch_size % world:
        raise ValueError(f"the global batch size {batch_size} does not divide among {world} processes")
    per_epoch = num_examples // batch_size
    if per_epoch == 0:
        raise ValueError(f"the training split has {num_examples} examples, fewer than one batch of {batch_size}")
    epoch, pos = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(num_examples)
    batch = order[pos * batch_size : (pos + 1) * batch_size]
    per_rank = batch_size // world
    return batch[rank * per_rank : (rank + 1) * per_rank]


def to_batch(split: Split, idx: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (int64) and labels for the examples `idx`, on `device`."""
    order = np.sort(idx)  # sorted reads are faster on memory-mapped caches; the order within a batch is irrelevant
    tokens = torch.from_numpy(np.ascontiguousarray(split.tokens[order]).astype(np.int64))
    labels = torch.from_numpy(np.asarray(split.labels[order]).astype(np.int64))
    return tokens.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def eval_batches(num_examples: int, batch_size: int, limit: int = 0, rank: int = 0, world: int = 1):
    """Contiguous evaluation batches over a split (first `limit` batches when limit > 0), rank-strided."""
    starts = list(range(0, num_examples, batch_size))
    if limit:
        starts = starts[:limit]
    for i in range(rank, len(starts), world):
        s = starts[i]
        yield np.arange(s, min(s + batch_size, num_examples))
