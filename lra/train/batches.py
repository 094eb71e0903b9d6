"""Deterministic batches: the examples of step s are a pure function of (seed, s), so a resumed run sees the same data.

Each epoch is a seeded permutation of the training split (the last partial batch is dropped). With several
processes the global batch is cut into equal contiguous slices, one per rank. lra.train.feed turns the indices into
device batches.
"""

from __future__ import annotations

import functools

import numpy as np

from lra.core.errors import ConfigError


def batch_indices(
    step: int, num_examples: int, batch_size: int, seed: int, rank: int = 0, world: int = 1
) -> np.ndarray:
    """Indices of the examples this rank trains on at `step` (0-based)."""
    epoch, pos = divmod(step, steps_per_epoch(num_examples, batch_size, world))
    batch = epoch_order(seed, epoch, num_examples)[pos * batch_size : (pos + 1) * batch_size]
    per_rank = batch_size // world
    return batch[rank * per_rank : (rank + 1) * per_rank]


def rank_batch(batch_size: int, world: int) -> int:
    """Examples per process of a global batch of `batch_size` over `world` processes; a clear error when it does not
    divide evenly."""
    if batch_size % world:
        raise ConfigError(
            f"the global batch size {batch_size} does not divide among {world} processes; set train.batch_size to a "
            f"multiple of {world} or change --nproc"
        )
    return batch_size // world


def steps_per_epoch(num_examples: int, batch_size: int, world: int = 1) -> int:
    """Full batches per epoch; a clear error when the batch does not divide among the processes or the split is
    smaller than one batch."""
    rank_batch(batch_size, world)
    per_epoch = num_examples // batch_size
    if per_epoch == 0:
        raise ConfigError(
            f"the training split has {num_examples} examples, fewer than one batch of {batch_size}; raise "
            f"data.num_train or lower train.batch_size"
        )
    return per_epoch


@functools.lru_cache(maxsize=2)
def epoch_order(seed: int, epoch: int, num_examples: int) -> np.ndarray:
    """The seeded permutation of epoch `epoch` (read-only; cached: drawing it for 160k examples takes milliseconds,
    more than a compiled step)."""
    order = np.random.default_rng([seed, epoch]).permutation(num_examples)
    order.flags.writeable = False
    return order


def epoch_batches(epoch: int, num_examples: int, batch_size: int, seed: int, rank: int = 0, world: int = 1):
    """This rank's batches of a whole epoch as rows of a (steps_per_epoch, batch_size // world) array, each row
    sorted: row p holds the examples of `batch_indices` at step epoch * steps_per_epoch + p, in the order a batch
    is read (sorted reads are faster on memory-mapped caches; the order within a batch is irrelevant)."""
    per_epoch = steps_per_epoch(num_examples, batch_size, world)
    per_rank = batch_size // world
    order = epoch_order(seed, epoch, num_examples)[: per_epoch * batch_size]
    return np.sort(order.reshape(per_epoch, world, per_rank)[:, rank], axis=-1)
