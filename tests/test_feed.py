"""Data on the device: a resident split gives exactly the batches of the host path (and of reading the split at the
sorted `batch_indices`, the order every run has trained in), for in-memory, memory-mapped, Pathfinder pixel-view and
pair splits, across epochs and ranks; the host path's prefetching changes nothing; evaluation batches pad to their
shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lra.core.errors import DataCorruptError
from lra.model import padding_flags
from lra.train import feed as feed_module
from lra.train.batches import batch_indices
from lra.train.feed import DeviceSplit, HostSplit, TrainBatches, compact_dtype, place_split, split_bytes
from tasks._pathfinder.views import PixelTokens
from tasks.base import Split
from tests.reference import TEST_SEED

CPU = torch.device("cpu")


def _padded_tokens(rng, shape, vocab: int) -> np.ndarray:
    tokens = rng.integers(1, vocab, size=shape).astype(np.int16)
    lengths = rng.integers(1, shape[-1] + 1, size=shape[:-1])
    tokens[np.arange(shape[-1]) >= lengths[..., None]] = 0
    return tokens


def _splits(tmp_path):
    """(name, split, vocab size, pair) for each kind of token array a task hands over."""
    rng = np.random.default_rng(TEST_SEED)
    labels = rng.integers(0, 10, size=90)
    plain = _padded_tokens(rng, (90, 24), 300)
    np.save(tmp_path / "tokens.npy", plain)
    mapped = np.load(tmp_path / "tokens.npy", mmap_mode="r")
    images = rng.integers(0, 256, size=(90, 8, 8), dtype=np.uint8)  # pixel + 1: no padding, vocab 257
    pairs = _padded_tokens(rng, (90, 2, 16), 20)
    return [
        ("in memory", Split(plain, labels), 300, False),
        ("memory-mapped", Split(mapped, labels), 300, False),
        ("pixel view", Split(PixelTokens(images), labels), 257, False),
        ("pixel view, pooled", Split(PixelTokens(images, downsample=2), labels), 257, False),
        ("pairs", Split(pairs, labels), 20, True),
    ]


def _same(a, b) -> None:
    assert a.tokens.dtype == b.tokens.dtype == torch.int64 and a.labels.dtype == b.labels.dtype == torch.int64
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.labels, b.labels) and a.padded == b.padded


@pytest.mark.parametrize("rank,world", [(0, 1), (1, 2)])
def test_device_batches_are_the_host_batches(tmp_path, monkeypatch, rank, world):
    monkeypatch.setattr(feed_module, "CHUNK_ELEMENTS", 500)  # several conversion chunks, one ending part-way
    steps = [0, 1, 2, 3, 4, 9, 5]  # 4 steps per epoch at batch 20: three epochs, and back to an earlier one
    for name, split, vocab, pair in _splits(tmp_path):
        device = DeviceSplit(split, CPU, pair=pair, vocab_size=vocab)
        host = HostSplit(split, CPU, pair=pair)
        assert device.tokens.dtype == compact_dtype(vocab)[1], name
        layout = dict(batch_size=20, seed=3, rank=rank, world=world)
        on_device, on_host = TrainBatches(device, **layout), TrainBatches(host, **layout, prefetch=True)
        for step in steps:
            got, want = on_device(step), on_host(step)
            _same(got, want)
            idx = np.sort(batch_indices(step, len(split), 20, 3, rank=rank, world=world))
            tokens = torch.from_numpy(np.asarray(split.tokens[idx]).astype(np.int64))
            labels = torch.from_numpy(np.asarray(split.labels[idx]).astype(np.int64))
            assert torch.equal(got.tokens, tokens) and torch.equal(got.labels, labels), (name, step)
            assert got.padded == padding_flags(tokens, pair=pair), (name, step)
        on_host.close()


def test_padding_flags_are_per_document():
    tokens = torch.tensor([[[1, 2], [3, 0]], [[4, 5], [6, 7]]])  # pair: the second document of row 0 is padded
    assert padding_flags(tokens, pair=True) == (False, True)
    assert padding_flags(tokens[:, 1], pair=False) == (True,) and padding_flags(tokens[1], pair=False) == (False,)
    images = Split(PixelTokens(np.zeros((4, 2, 2), np.uint8)), np.zeros(4))  # black pixels are token 1, not padding
    assert DeviceSplit(images, CPU, pair=False, vocab_size=257).flags(np.arange(4)) == (False,)


def test_evaluation_batches_pad_with_the_last_example(tmp_path):
    _, split, vocab, pair = _splits(tmp_path)[1]
    for feed in (DeviceSplit(split, CPU, pair=pair, vocab_size=vocab), HostSplit(split, CPU, pair=pair)):
        b = feed.batch(np.arange(85, 90), pad_to=8)
        want = torch.from_numpy(np.asarray(split.tokens[[85, 86, 87, 88, 89, 89, 89, 89]]).astype(np.int64))
        assert (
            torch.equal(b.tokens, want) and b.labels.tolist() == split.labels[[85, 86, 87, 88, 89, 89, 89, 89]].tolist()
        )
        assert feed.batch(np.arange(0, 8), pad_to=4).tokens.shape[0] == 8  # never cut


def test_placement_and_sizes():
    split = Split(np.ones((10, 6), np.int16), np.zeros(10))
    assert isinstance(place_split(split, CPU, placement="auto", pair=False, vocab_size=257), HostSplit)  # CPU: host
    assert isinstance(place_split(split, CPU, placement="device", pair=False, vocab_size=257), DeviceSplit)
    assert split_bytes(split, 257) == 10 * 6 * 2 + 10 * 8 and split_bytes(split, 256) == 10 * 6 + 10 * 8
    assert [compact_dtype(v)[1] for v in (2, 256, 257, 32768, 32769)] == [torch.uint8] * 2 + [torch.int16] * 2 + [
        torch.int32
    ]
    bad = Split(np.full((3, 4), 300, np.int16), np.zeros(3))
    with pytest.raises(ValueError, match=r"example 0 has token id 300, outside this task's vocabulary 0..256"):
        DeviceSplit(bad, CPU, pair=False, vocab_size=257)


def test_out_of_range_token_ids_are_named_with_their_file_on_either_placement(tmp_path):
    """Issue 38: a cache with random token ids stops with the file and the example, not an IndexError."""
    tokens = np.random.default_rng(0).integers(1, 10, (8, 5)).astype(np.int16)
    tokens[5, 2], tokens[6, 0] = 12, -1  # examples 5 and 6 are corrupt; 5 comes first
    path = tmp_path / "train_tokens.npy"
    np.save(path, tokens)
    split = Split(np.load(path, mmap_mode="r"), np.zeros(8), source=str(path))
    message = rf"{path}: example 5 has token id 12, outside this task's vocabulary 0..9; the cache is corrupt"
    with pytest.raises(DataCorruptError, match=message):
        place_split(split, CPU, placement="device", pair=False, vocab_size=10)
    host = place_split(split, CPU, placement="host", pair=False, vocab_size=10)
    assert host.batch(np.array([0, 1, 2])).tokens.tolist() == tokens[:3].tolist()  # good rows read as they are
    with pytest.raises(DataCorruptError, match=message):
        host.batch(np.array([7, 5, 1]))
