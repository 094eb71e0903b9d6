"""`text`: LRA's byte-level IMDB sentiment task (Maas et al. 2011), 2 classes, 4096 tokens by default.

Each review is its raw UTF-8 bytes, id = byte + 1 (0 is padding: TFDS's ByteTextEncoder, which LRA used, numbers bytes
the same way), truncated to `max_length` and right-padded. Labels: 0 = negative, 1 = positive.

Splits: IMDB has 25,000 train and 25,000 test reviews and no validation split. LRA validated on the test split (its
input pipeline passes `test` as both eval and test data); here `num_val` reviews (default 2,500) are carved out of train
with a seeded permutation, leaving 22,500 for training, so that model selection never sees the test set. Every split is
stored in a seeded shuffled order, so a cap (`num_train`, `num_test`) takes a random sample.

Sources (`data.source` or `lra data prepare text --from ...`):
- the `aclImdb_v1.tar.gz` tarball, read as a stream (no extraction), or a tar of `aclImdb/{train,test}/{pos,neg}`;
- the extracted folder `aclImdb/` (or its parent);
- `tfds`: TFDS's `imdb_reviews` (needs tensorflow-datasets: `pip install 'lra[tfds]'`), in TFDS's example order.
Files are `<id>_<rating>.txt`; a rating that contradicts its folder (neg <= 4, pos >= 7) is reported as corrupt input.

The cache stores reviews at max(max_length, 4096) bytes; a shorter max_length (LRA's repo config used 1000) slices it.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from lra.core.errors import DataMissingError
from lra.core.progress import make_progress
from tasks._cache import CacheWriter
from tasks._realdata import CachedTask, bytes_to_tokens, carve_validation, check_count, corrupt, read_tar, shuffled
from tasks.base import Split
from tasks.registry import register_task

IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
STORE_LENGTH = 4096
LABELS = {"neg": 0, "pos": 1}
_MEMBER = re.compile(r"(?:^|/)(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")

Review = tuple[int, int, bytes]  # (label, id, text bytes)


def _check_rating(where: str, folder: str, rating: int) -> None:
    ok = rating <= 4 if folder == "neg" else rating >= 7
    if not ok:
        raise corrupt(where, f"rating {rating} in a {folder!r} folder (IMDB: neg reviews are rated <= 4, pos >= 7)")


def read_imdb_tar(path: str) -> dict[str, list[Review]]:
    """All reviews of an aclImdb tarball (any compression tarfile reads), streamed in one pass."""
    out: dict[str, list[Review]] = {"train": [], "test": []}
    for name, text in read_tar(path, _MEMBER.search, "reading IMDB"):
        m = _MEMBER.search(name)
        split, folder, rid, rating = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        _check_rating(f"{path}: member {name}", folder, rating)
        out[split].append((LABELS[folder], rid, text))
    return out


def find_imdb_root(folder: Path) -> Path | None:
    """The folder holding train/ and test/: `folder` itself or `folder/aclImdb`."""
    for root in (folder, folder / "aclImdb"):
        if all((root / s / lab).is_dir() for s in ("train", "test") for lab in LABELS):
            return root
    return None


def read_imdb_folder(folder: Path) -> dict[str, list[Review]]:
    """All reviews of an extracted aclImdb folder."""
    root = find_imdb_root(folder)
    if root is None:
        raise DataMissingError(
            f"{folder}: expected an extracted IMDB folder, aclImdb/{{train,test}}/{{pos,neg}}/<id>_<rating>.txt. "
            f"It comes from {IMDB_URL}"
        )
    files = []
    for split in ("train", "test"):
        for folder_name in LABELS:
            for p in (root / split / folder_name).iterdir():
                m = _MEMBER.search(p.as_posix())
                if m:
                    files.append((split, folder_name, int(m.group(3)), int(m.group(4)), p))
    out: dict[str, list[Review]] = {"train": [], "test": []}
    with make_progress() as progress:
        bar = progress.add_task("reading IMDB", total=len(files))
        for split, folder_name, rid, rating, p in files:
            _check_rating(str(p), folder_name, rating)
            try:
                text = p.read_bytes()
            except OSError as e:
                raise corrupt(str(p), f"unreadable review file: {e}") from e
            out[split].append((LABELS[folder_name], rid, text))
            progress.advance(bar)
    return out


def read_imdb_tfds() -> dict[str, list[Review]]:
    """TFDS's imdb_reviews (downloaded by TFDS into its own data dir); ids are TFDS's example order."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise DataMissingError(
            "source 'tfds' needs tensorflow-datasets, which is not installed: pip install 'lra[tfds]' "
            f"(or pass the aclImdb_v1.tar.gz tarball from {IMDB_URL} instead)"
        ) from e
    out: dict[str, list[Review]] = {}
    with make_progress() as progress:
        for split in ("train", "test"):
            ds = tfds.load("imdb_reviews", split=split)
            bar = progress.add_task(f"reading TFDS imdb_reviews/{split}", total=25000)
            rows = []
            for i, ex in enumerate(tfds.as_numpy(ds)):
                rows.append((int(ex["label"]), i, bytes(ex["text"])))
                progress.advance(bar)
            out[split] = rows
    return out


@register_task("text")
class TextTask(CachedTask):
    """Byte-level IMDB sentiment classification (LRA "Text")."""

    num_classes = 2
    description = "IMDB reviews as bytes, positive/negative (LRA Text)"
    dataset = "IMDB reviews (Large Movie Review Dataset v1.0)"
    url = IMDB_URL
    source_example = "/path/to/aclImdb_v1.tar.gz"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int = 4096,
        num_val: int = 2500,
        seed: int = 0,
        **options: Any,
    ) -> None:
        super().__init__(data_dir, max_length, **options)
        self.num_val = check_count("num_val", num_val, 1, allow_none=False)
        self.seed = check_count("seed", seed, 0, allow_none=False)

    def cache_settings(self) -> dict[str, Any]:
        return {"store_length": max(self.max_length, STORE_LENGTH), "num_val": self.num_val, "seed": self.seed}

    def cache_options(self) -> dict[str, Any]:
        longer = {"max_length": self.max_length} if self.max_length > STORE_LENGTH else {}
        return {**longer, "num_val": self.num_val, "seed": self.seed}

    def fingerprint(self, source: str) -> dict[str, Any]:
        root = find_imdb_root(Path(source)) if os.path.isdir(source) else None
        return super().fingerprint(str(root) if root is not None else source)

    def read_source(self, source: str) -> dict[str, list[Review]]:
        if source == "tfds":
            return read_imdb_tfds()
        path = Path(source)
        if path.is_dir():
            return read_imdb_folder(path)
        if not tarfile.is_tarfile(path):
            raise corrupt(source, "not a tar archive (expected aclImdb_v1.tar.gz or the extracted aclImdb folder)")
        return read_imdb_tar(source)

    def import_into(self, source: str, writer: CacheWriter, workers: int) -> None:
        reviews = self.read_source(source)
        for split in ("train", "test"):
            labels = {r[0] for r in reviews[split]}
            if labels != {0, 1}:
                raise corrupt(source, f"no {split} reviews found" if not labels else f"the {split} split has one class")
            reviews[split].sort(key=lambda r: (r[0], r[1]))  # canonical order, whatever the archive's
        length = self.cache_settings()["store_length"]
        train_idx, val_idx = carve_validation(len(reviews["train"]), self.num_val, self.seed)
        test_idx = shuffled(len(reviews["test"]), self.seed)
        parts = {"train": ("train", train_idx), "val": ("train", val_idx), "test": ("test", test_idx)}
        for split, (origin, idx) in parts.items():
            rows = [reviews[origin][i] for i in idx]
            tokens = bytes_to_tokens([r[2] for r in rows], length)
            writer.split(split, Split(tokens, np.array([r[0] for r in rows], dtype=np.int64)))
            writer.save(f"{split}_ids", np.array([r[1] for r in rows], dtype=np.int64))  # <id> of <id>_<rating>.txt
        writer.meta["format"] = "byte ids (byte + 1), 0 = padding; labels 0 = neg, 1 = pos"
