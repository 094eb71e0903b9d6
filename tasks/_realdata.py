"""Plumbing shared by the real-data tasks (text, retrieval, image): import once into a cache, then memory-map.

A real-data task imports its source (an archive, a folder, TFDS) into a `TaskCache` keyed by the settings that decide
the stored arrays. Caps on the number of examples (`num_train`, `num_test`) and a `max_length` below the stored length
are applied when loading, by slicing the memory-mapped arrays, so a tiny preset reads the same cache as the full run.
`load` imports from `source` only when there is no cache yet; `prepare` (`lra data prepare`) always re-imports.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from typing import Any, ClassVar

import numpy as np

from lra.core.errors import DataCorruptError, DataMissingError
from tasks._cache import TaskCache
from tasks.registry import SPLITS, Split, Task

# Errors a damaged or truncated archive raises while it is read (gzip/bz2/xz streams, tar headers).
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, ValueError)


def check_count(name: str, value: Any, minimum: int = 0, allow_none: bool = True) -> int | None:
    """Validate an integer setting (None allowed for caps) with a message naming the setting."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        what = f"an integer >= {minimum}" + (" or null (all)" if allow_none else "")
        raise ValueError(f"data setting {name} must be {what}, got {value!r}")
    return int(value)


def carve_validation(num_examples: int, num_val: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split train indices into (train, val) with a seeded permutation; both come out in that shuffled order.

    Stored splits keep the shuffled order so that the first n examples of a split (a cap) are a random sample.
    """
    if num_val >= num_examples:
        raise ValueError(f"num_val={num_val} leaves no training examples (the training split has {num_examples})")
    perm = np.random.default_rng([seed, 0]).permutation(num_examples)
    return perm[num_val:], perm[:num_val]


def shuffled(num_examples: int, seed: int) -> np.ndarray:
    """A seeded order for the test split (stored shuffled for the same reason as train)."""
    return np.random.default_rng([seed, 1]).permutation(num_examples)


def bytes_to_tokens(docs: list[bytes], length: int, out: np.ndarray | None = None) -> np.ndarray:
    """Byte-level ids: byte + 1 (so 0 stays padding), truncated to `length`, right-padded with 0. Shape (N, length)."""
    if out is None:
        out = np.zeros((len(docs), length), dtype=np.uint16)
    for i, doc in enumerate(docs):
        ids = np.frombuffer(doc[:length], dtype=np.uint8)
        out[i, : len(ids)] = ids.astype(np.uint16) + 1
    return out


class CachedTask(Task):
    """Base of the real-data tasks. Subclasses define the cache key, the import and the missing-data message."""

    vocab: ClassVar[int] = 257  # bytes or pixels shifted by one, plus padding
    dataset: ClassVar[str] = ""  # what the data is, for messages
    url: ClassVar[str] = ""  # where it comes from
    source_example: ClassVar[str] = ""  # a typical --from argument

    source: str | None
    num_train: int | None
    num_test: int | None

    @property
    def vocab_size(self) -> int:
        return self.vocab

    def cache_settings(self) -> dict[str, Any]:
        """The settings that decide the stored arrays (and so the cache folder)."""
        raise NotImplementedError

    def caps(self) -> dict[str, int | None]:
        return {"train": self.num_train, "val": None, "test": self.num_test}

    def cache(self) -> TaskCache:
        return TaskCache(self.data_dir, self.name, self.cache_settings())

    def import_into(self, source: str, writer, workers: int) -> None:
        """Read `source` and write every split with `writer` (a tasks._cache.CacheWriter)."""
        raise NotImplementedError

    def missing_message(self, cache: TaskCache) -> str:
        return (
            f"{self.dataset} for task {self.name!r} is not prepared: there is no cache at {cache.path} "
            f"and no data.source is set.\n"
            f"It comes from {self.url}\n"
            f"Import it once with:\n    lra data prepare {self.name} --from {self.source_example}\n"
            f"or point a run at it with --set data.source={self.source_example}"
        )

    def load(self, split: str) -> Split:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        cache = self.cache()
        if not cache.exists():
            if self.source is None:
                raise DataMissingError(self.missing_message(cache))
            self.prepare(self.source, workers=os.cpu_count() or 1)
        data = cache.load(split)
        n = self.caps().get(split)
        tokens = data.tokens[:n]
        if tokens.shape[-1] > self.max_length:
            tokens = tokens[..., : self.max_length]
        return Split(tokens, data.labels[:n])

    def prepare(self, source: str | os.PathLike[str] | None = None, workers: int = 1) -> None:
        """Import `source` (or data.source) into the cache, replacing what is there only once the import succeeded."""
        source = source if source is not None else self.source
        cache = self.cache()
        if source is None:
            raise DataMissingError(self.missing_message(cache))
        source = str(source)
        if source != "tfds" and not os.path.exists(os.path.expanduser(source)):
            raise DataMissingError(
                f"{self.dataset}: {source} does not exist. It comes from {self.url}\n"
                f"Download it, then run:\n    lra data prepare {self.name} --from {self.source_example}"
            )
        if source != "tfds":
            source = os.path.expanduser(source)
        with cache.writer() as w:
            self.import_into(source, w, max(1, int(workers)))
            w.meta.setdefault("source", source)

    def info(self) -> dict[str, Any]:
        out = super().info()
        out.update(self.cache().info())
        out["data_source"] = self.source
        out["caps"] = {k: v for k, v in self.caps().items() if v is not None}
        out["max_length"] = self.max_length
        return out


def corrupt(where: str, what: str) -> DataCorruptError:
    """A DataCorruptError whose message starts with the file (and member or row) at fault."""
    return DataCorruptError(f"{where}: {what}")
