"""Plumbing shared by the real-data tasks (text, retrieval, image): import once into a cache, then memory-map.

A real-data task imports its source (an archive, a folder, TFDS) into a `TaskCache` keyed by the settings that decide
the stored arrays. Caps on the number of examples (`num_train`, `num_test`) and a `max_length` below the stored length
are applied when loading, by slicing the memory-mapped arrays, so a tiny preset reads the same cache as the full run.

The cache records the source it was built from (`tasks._cache.source_fingerprint`: path, size and modification time).
A run with `data.source` set checks that source first: one that cannot be read is an error even when a cache exists,
and one that differs from the cache's is imported again (saying why), so a truncated or wrong archive never trains on
an old cache; a failed import leaves the old cache intact. A run without `data.source` uses the cache as prepared.
`prepare` (`lra data prepare`) always imports.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

from lra.core.errors import DataCorruptError, DataMissingError
from lra.core.progress import console, make_progress
from tasks._cache import CacheWriter, TaskCache, describe_source, source_fingerprint
from tasks.base import SPLITS, Split, Task

# Errors a damaged or truncated archive raises while it is read (gzip/bz2/xz streams, tar headers).
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, ValueError)


def corrupt(where: str, what: str) -> DataCorruptError:
    """A DataCorruptError whose message starts with the file (and member or row) at fault."""
    return DataCorruptError(f"{where}: {what}")


def read_tar(path: str, select: Callable[[str], object], label: str) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) of the regular files of a tar archive (any compression) that `select(name)` picks,
    streamed in one pass with a progress bar over the archive's bytes.

    A damaged or truncated archive, or a member shorter than its header says, is a DataCorruptError naming the
    archive and the last member read.
    """
    size = os.path.getsize(path)
    last = "(start of archive)"
    with open(path, "rb") as raw, make_progress() as progress:
        bar = progress.add_task(label, total=size)
        try:
            with tarfile.open(fileobj=raw, mode="r:*") as tf:
                for count, member in enumerate(tf):
                    last = member.name
                    if not (member.isfile() and select(member.name)):
                        continue
                    f = tf.extractfile(member)
                    data = f.read() if f is not None else b""
                    if len(data) != member.size:
                        raise corrupt(f"{path}: member {member.name}", "truncated member")
                    if count % 256 == 0:
                        progress.update(bar, completed=raw.tell())
                    yield member.name, data
            progress.update(bar, completed=size)
        except DataCorruptError:
            raise
        except ARCHIVE_ERRORS as e:
            raise corrupt(path, f"truncated or corrupt archive (after member {last}): {e}") from e


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
    """Base of the real-data tasks. Subclasses define the cache key, the import and what the data is."""

    vocab: ClassVar[int] = 257  # bytes or pixels shifted by one, plus padding
    dataset: ClassVar[str] = ""  # what the data is, for messages
    url: ClassVar[str] = ""  # where it comes from
    source_example: ClassVar[str] = ""  # a typical --from argument

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int = 1024,
        source: str | None = None,
        num_train: int | None = None,
        num_test: int | None = None,
    ) -> None:
        super().__init__(data_dir, check_count("max_length", max_length, 1, allow_none=False))
        self.source = None if source is None else str(source)
        self.num_train = check_count("num_train", num_train, 1)
        self.num_test = check_count("num_test", num_test, 1)
        self._checked = False  # whether this task's cache has been matched against data.source

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

    def import_into(self, source: str, writer: CacheWriter, workers: int) -> None:
        """Read `source` and write every split with `writer`."""
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
        data = self._usable_cache().load(split)
        n = self.caps().get(split)
        tokens = data.tokens[:n]
        if tokens.shape[-1] > self.max_length:
            tokens = tokens[..., : self.max_length]
        return Split(tokens, data.labels[:n], source=data.source)

    def _usable_cache(self) -> TaskCache:
        """The cache, imported first from data.source when it has none or one built from a different source."""
        cache = self.cache()
        if self._checked:
            return cache
        if self.source is None:
            if not cache.exists():
                raise DataMissingError(self.missing_message(cache))
        else:
            source = self._readable(self.source)
            fingerprint = self.fingerprint(source)
            why = cache.stale_reason(fingerprint) if cache.exists() else None
            if why is not None:
                console.print(
                    f"{self.name}: data.source {source}: {why}; importing it again", highlight=False, soft_wrap=True
                )
            if why is not None or not cache.exists():
                self._import(source, fingerprint, workers=os.cpu_count() or 1)
        self._checked = True
        return cache

    def _readable(self, source: str | os.PathLike[str]) -> str:
        """`source` with ~ expanded, or a DataMissingError saying where the data comes from."""
        source = str(source)
        if source == "tfds":
            return source
        source = os.path.expanduser(source)
        if not os.path.exists(source):
            raise DataMissingError(
                f"{self.dataset}: {source} does not exist. It comes from {self.url}\n"
                f"Download it, then run:\n    lra data prepare {self.name} --from {self.source_example}"
            )
        return source

    def fingerprint(self, source: str) -> dict[str, Any]:
        """The fingerprint of what an import of `source` reads (a task narrows a folder to the files it uses)."""
        return source_fingerprint(source)

    def prepare(self, source: str | os.PathLike[str] | None = None, workers: int = 1) -> None:
        """Import `source` (or data.source) into the cache, replacing what is there only once the import succeeded."""
        source = source if source is not None else self.source
        if source is None:
            raise DataMissingError(self.missing_message(self.cache()))
        source = self._readable(source)
        self._import(source, self.fingerprint(source), max(1, int(workers)))

    def _import(self, source: str, fingerprint: dict[str, Any], workers: int) -> None:
        with self.cache().writer() as w:
            self.import_into(source, w, workers)
            w.meta["source"] = fingerprint
        self._checked = False  # a later load checks data.source against what was just imported

    def info(self) -> dict[str, Any]:
        cache = self.cache()
        meta = cache.meta() if cache.exists() else {}
        built = meta.get("source")
        details: dict[str, Any] = {
            "dataset": self.dataset,
            "built_from": describe_source(built) if built else None,
            "stored": meta.get("counts", {}),
            "caps": {k: v for k, v in self.caps().items() if v is not None},
            "max_length": self.max_length,
            **{k: v for k, v in meta.items() if k not in ("settings", "counts", "files", "source")},
        }
        ready = bool(meta)
        if ready and self.source is not None:
            try:
                details["stale"] = cache.stale_reason(self.fingerprint(self._readable(self.source)))
            except DataMissingError as e:
                details["stale"] = str(e).split("\n")[0]
            ready = details["stale"] is None
        caps = self.caps()
        splits = {s: min(n, caps.get(s) or n) for s, n in details["stored"].items()}
        return self.info_fields(
            source=self.source or (built or {}).get("path") or self.url,
            where=cache.path,
            splits=splits,
            size=cache.size(),
            ready=ready,
            details=details,
            prepare_from=self.source or self.source_example,
        )
