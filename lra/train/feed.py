"""Batches on the device: a split stays in GPU memory when it fits, else it is read on the host, pinned and prefetched.

`place_split` decides per split (train.data_placement): `device` converts the tokens once (memory-mapped caches and
Pathfinder's pixel views alike, in chunks, into the narrowest integer type that holds the vocabulary) and gathers
each batch on the device; `host` reads each batch from the split on the host (pinned memory on CUDA). `auto` keeps a
split on a CUDA device when it takes at most DEVICE_SHARE of the free memory (and is not drawn on demand), and on
the host on the CPU.

Either way a batch holds exactly the same examples, in the same (sorted) order, as reading the split at the indices
of `batches.batch_indices` gives (the order every run has trained in), plus `padded`: per document, whether any of
its sequences has padding, known on the host (a per-example table for resident splits), so the model never waits
for the device to find out.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from lra.core.errors import DataCorruptError, RunSetupError
from lra.model import padding_flags
from lra.train.batches import epoch_batches, steps_per_epoch
from tasks.base import Split

DEVICE_SHARE = 0.5  # `auto`: a split goes to the GPU when it takes at most this share of the free memory
CHUNK_ELEMENTS = 1 << 24  # tokens converted per chunk on the way to the device (bounds the host memory used)
PLACEMENTS = ("auto", "device", "host")


@dataclass
class Batch:
    """Token ids (int64), labels (int64) on the device, and per document whether any sequence has padding."""

    tokens: torch.Tensor
    labels: torch.Tensor
    padded: tuple[bool, ...]


class HostSplit:
    """A split read on the host per batch (a memory-mapped cache is never loaded whole)."""

    resident = False

    def __init__(self, split: Split, device: torch.device, *, pair: bool, vocab_size: int | None = None) -> None:
        self.split, self.device, self.pair = split, device, pair
        self.vocab_size = vocab_size  # token ids are checked against it per batch (None: not checked)
        self.pin = device.type == "cuda"

    def __len__(self) -> int:
        return len(self.split)

    def read(self, idx: np.ndarray, pad_to: int = 0) -> tuple[torch.Tensor, torch.Tensor, tuple[bool, ...]]:
        """The examples `idx` (sorted; the last one repeated up to `pad_to` rows) as host tensors, pinned on CUDA."""
        order = _pad_rows(np.sort(idx), pad_to)  # sorted reads are faster on memory-mapped caches
        tokens = np.ascontiguousarray(self.split.tokens[order]).astype(np.int64)
        if self.vocab_size is not None:
            check_token_ids(tokens, order, self.vocab_size, self.split.source)
        labels = np.asarray(self.split.labels[order]).astype(np.int64)
        out = torch.from_numpy(tokens), torch.from_numpy(labels)
        if self.pin:
            out = tuple(t.pin_memory() for t in out)
        return *out, padding_flags(tokens, pair=self.pair)

    def to_device(self, host: tuple[torch.Tensor, torch.Tensor, tuple[bool, ...]]) -> Batch:
        tokens, labels, padded = host
        return Batch(tokens.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True), padded)

    def batch(self, idx: np.ndarray, pad_to: int = 0) -> Batch:
        return self.to_device(self.read(idx, pad_to))


class DeviceSplit:
    """A split converted once into device memory; batches are gathered there."""

    resident = True

    def __init__(self, split: Split, device: torch.device, *, pair: bool, vocab_size: int) -> None:
        self.device = device
        self.tokens, self.padding = _tokens_to_device(split, device, vocab_size)
        self.labels = torch.from_numpy(np.asarray(split.labels).astype(np.int64)).to(device)

    def __len__(self) -> int:
        return len(self.labels)

    def flags(self, idx: np.ndarray) -> tuple[bool, ...]:
        """Per document, whether any example of `idx` has padding (from the host table: no device sync)."""
        return tuple(bool(f) for f in self.padding[idx].any(axis=0))

    def gather(self, rows: torch.Tensor, padded: tuple[bool, ...]) -> Batch:
        """The batch of the examples `rows` (an int64 index tensor on the device)."""
        return Batch(self.tokens.index_select(0, rows).long(), self.labels.index_select(0, rows), padded)

    def batch(self, idx: np.ndarray, pad_to: int = 0) -> Batch:
        order = _pad_rows(np.sort(idx), pad_to)
        return self.gather(_upload(order, self.device), self.flags(order))


Feed = HostSplit | DeviceSplit


def _pad_rows(order: np.ndarray, pad_to: int) -> np.ndarray:
    """`order` with its last index repeated up to `pad_to` entries (a batch padded to its compiled shape)."""
    if len(order) >= pad_to:
        return order
    return np.concatenate([order, np.full(pad_to - len(order), order[-1], dtype=order.dtype)])


def _upload(idx: np.ndarray, device: torch.device) -> torch.Tensor:
    """Indices as an int64 tensor on `device` (through pinned memory on CUDA: an asynchronous copy)."""
    t = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t


def compact_dtype(vocab_size: int) -> tuple[np.dtype, torch.dtype]:
    """The narrowest integer type holding token ids 0 .. vocab_size - 1 (numpy and torch)."""
    for np_type, torch_type in ((np.uint8, torch.uint8), (np.int16, torch.int16), (np.int32, torch.int32)):
        if vocab_size - 1 <= np.iinfo(np_type).max:
            return np.dtype(np_type), torch_type
    return np.dtype(np.int64), torch.int64


def check_token_ids(tokens: np.ndarray, rows: np.ndarray, vocab_size: int, source: str | None) -> None:
    """Refuse token ids outside 0 .. vocab_size - 1 (a corrupt cache) with a DataCorruptError naming the file and the
    first example that has one (`rows`: the example index of each row of `tokens`)."""
    if not tokens.size or (tokens.min() >= 0 and tokens.max() < vocab_size):
        return
    bad = ((tokens < 0) | (tokens >= vocab_size)).reshape(len(tokens), -1).any(axis=1)
    row = int(np.argmax(bad))
    values = tokens[row][(tokens[row] < 0) | (tokens[row] >= vocab_size)]
    where = source or "the split in memory"
    raise DataCorruptError(
        f"{where}: example {int(rows[row])} has token id {int(values[0])}, outside this task's vocabulary 0.."
        f"{vocab_size - 1}; the cache is corrupt: delete its folder and prepare it again (lra data prepare)"
    )


def _tokens_to_device(split: Split, device: torch.device, vocab_size: int) -> tuple[torch.Tensor, np.ndarray]:
    """The split's tokens ((N, L) or (N, 2, L), any array-like that slices) as a compact device tensor, converted in
    chunks, and the (N, documents) host table of which examples have padding."""
    tokens = split.tokens
    n, shape = len(tokens), tuple(tokens.shape[1:])
    np_type, torch_type = compact_dtype(vocab_size)
    out = torch.empty((n, *shape), dtype=torch_type, device=device)
    padding = np.empty((n, shape[0] if len(shape) == 2 else 1), dtype=bool)
    rows = max(1, CHUNK_ELEMENTS // max(1, int(np.prod(shape))))
    for start in range(0, n, rows):
        chunk = np.asarray(tokens[start : start + rows])
        check_token_ids(chunk, np.arange(start, start + len(chunk)), vocab_size, split.source)
        padding[start : start + len(chunk)] = (chunk == 0).any(axis=-1).reshape(len(chunk), -1)
        out[start : start + len(chunk)].copy_(torch.from_numpy(chunk.astype(np_type)))
    return out, padding


PACK_MULTIPLE = 64  # pack lengths are rounded up to this: one compiled shape for data of about the same size


def longest_real(split: Split) -> int:
    """The most real (non-zero) tokens any example of `split` has in one document, read in chunks (a memory-mapped
    cache is never loaded whole)."""
    tokens = split.tokens
    rows = max(1, CHUNK_ELEMENTS // max(1, int(np.prod(tokens.shape[1:]))))
    longest = 0
    for start in range(0, len(tokens), rows):
        chunk = np.asarray(tokens[start : start + rows])
        longest = max(longest, int((chunk != 0).sum(-1).max(initial=0)))
    return longest


def pack_length_for(splits: Iterable[Split], seq_len: int) -> int:
    """model.pack_tokens' packed width for a run over `splits`: their longest real count rounded up to PACK_MULTIPLE
    (at most `seq_len`), so that no example loses a token (lra.model.pack_real)."""
    longest = max((longest_real(s) for s in splits), default=0)
    return min(seq_len, max(PACK_MULTIPLE, -(-longest // PACK_MULTIPLE) * PACK_MULTIPLE))


def split_bytes(split: Split, vocab_size: int) -> int:
    """The device memory a resident split takes: tokens in the compact type plus int64 labels."""
    per_token = compact_dtype(vocab_size)[0].itemsize
    return int(np.prod(split.tokens.shape)) * per_token + len(split) * 8


def place_split(split: Split, device: torch.device, *, placement: str, pair: bool, vocab_size: int) -> Feed:
    """The feed of one split: resident on the device or read on the host, as `placement` says (see the module)."""
    if placement not in PLACEMENTS:
        raise RunSetupError(f"train.data_placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if placement == "auto":
        on_demand = getattr(split.tokens, "on_demand", False)  # drawn when read (Pathfinder with cache: false)
        placement = "device" if device.type == "cuda" and not on_demand and _fits(split, device, vocab_size) else "host"
    if placement == "device":
        return DeviceSplit(split, device, pair=pair, vocab_size=vocab_size)
    return HostSplit(split, device, pair=pair, vocab_size=vocab_size)


def _fits(split: Split, device: torch.device, vocab_size: int) -> bool:
    free, _ = torch.cuda.mem_get_info(device)
    return split_bytes(split, vocab_size) <= DEVICE_SHARE * free


class TrainBatches:
    """This rank's training batch of each step: `batches(step)`, the examples of `batch_indices(step, ...)`.

    A resident split gathers each batch on the device from one upload of the epoch's (sorted) batch table. A host
    split reads the next step's batch in a background thread while the current step runs (`prefetch`, on CUDA).
    """

    def __init__(
        self, feed: Feed, *, batch_size: int, seed: int, rank: int = 0, world: int = 1, prefetch: bool | None = None
    ) -> None:
        self.feed = feed
        self.layout = dict(num_examples=len(feed), batch_size=batch_size, seed=seed, rank=rank, world=world)
        self.per_epoch = steps_per_epoch(len(feed), batch_size, world)
        self.epoch: int | None = None
        self.table: np.ndarray | None = None  # this epoch's batches (host)
        self.rows: torch.Tensor | None = None  # the same on the device (resident splits)
        use_thread = (feed.device.type == "cuda" if prefetch is None else prefetch) and not feed.resident
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="lra-prefetch") if use_thread else None
        self.pending: tuple[int, Future] | None = None

    def _indices(self, step: int) -> tuple[np.ndarray, int]:
        epoch, pos = divmod(step, self.per_epoch)
        if epoch != self.epoch:
            self.epoch, self.table = epoch, epoch_batches(epoch, **self.layout)
            if self.feed.resident:
                self.rows = _upload(self.table, self.feed.device)
        return self.table[pos], pos

    def __call__(self, step: int) -> Batch:
        if self.feed.resident:
            idx, pos = self._indices(step)
            return self.feed.gather(self.rows[pos], self.feed.flags(idx))
        host = self._take(step)
        if self.pool is not None:
            self.pending = (step + 1, self.pool.submit(self._read, step + 1))
        return self.feed.to_device(host)

    def _read(self, step: int):
        return self.feed.read(self._indices(step)[0])

    def _take(self, step: int):
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == step:
            return pending[1].result()
        if pending is not None:
            pending[1].result()  # let the thread finish before this thread touches the epoch table
        return self._read(step)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
