"""`image`: LRA's CIFAR-10 task: a 32x32 image as a sequence of 1024 grayscale pixels, 10 classes.

Conversion, as LRA's input pipeline does it: `tf.cast(tf.image.rgb_to_grayscale(image), tf.int32)` on the uint8 RGB
image, i.e. the float32 luma 0.2989 R + 0.5870 G + 0.1140 B of the pixels scaled to [0, 1], scaled back by 255.5
and truncated to an integer (`lra_grayscale`). Tokens are that value + 1, so a black pixel (0) is not padding: LRA fed
the raw 0..255 values with vocabulary 256, where black shares id 0 with padding (a known pitfall). Vocabulary: 257.
`black_padding: true` feeds the raw levels as LRA and Xiong et al.'s code did: black pixels become padding, left out
of attention and pooling (about 0.2% of the pixels of the shared CIFAR-10 copy); the cache is the same either way.

Splits: 45,000 / 5,000 / 10,000. LRA took TFDS's `train[:90%]` / `train[90%:]` / `test`, i.e. the last 5,000 examples of
TFDS's train order for validation; that order cannot be reproduced without TFDS, so here `num_val` (5,000) images are
carved out of train with a seeded permutation. Every split is stored in a seeded shuffled order (caps take a random
sample). Classes follow CIFAR-10's canonical order: airplane, automobile, bird, cat, deer, dog, frog, horse, ship,
truck, whatever order the folders come in.

Sources (`data.source` or `lra data prepare image --from ...`):
- CIFAR-10's python version: the folder `cifar-10-batches-py/` (or its parent) with `data_batch_1..5` and `test_batch`,
  or the `cifar-10-python.tar.gz` archive itself. These are pickles; they are read with an unpickler that only admits
  numpy arrays and plain containers, so a tampered file cannot run code.
- an image-folder tree `{train,test}/<class name>/*.{png,jpg,jpeg}`, or a .tar / .tar.gz of it
  (`cifar10_jpeg.tar.gz`). Images are decoded with Pillow (libjpeg-turbo for JPEG), in `workers` processes.
- `tfds`: TFDS's `cifar10` (needs tensorflow-datasets: `pip install 'lra[tfds]'`), in TFDS's order.
"""

from __future__ import annotations

import importlib.util
import io
import os
import pickle
import re
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from lra.core.errors import DataMissingError
from lra.core.numbers import ceil_div
from lra.core.pools import run_jobs
from lra.core.progress import make_progress
from tasks._cache import CacheWriter
from tasks._imagefile import decode_image
from tasks._realdata import CachedTask, carve_validation, check_count, corrupt, read_tar, shuffled
from tasks.base import Split
from tasks.registry import register_task

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html (cifar-10-python.tar.gz)"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SIDE = 32
PIXELS = SIDE * SIDE
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_IMAGE_MEMBER = re.compile(r"(?:^|/)(train|test)/([^/]+)/([^/]+)$")
_GREY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)  # tf.image.rgb_to_grayscale's
POOL_MIN_IMAGES = 2000  # fewer images decode faster here than worker processes start


def lra_grayscale(rgb: np.ndarray) -> np.ndarray:
    """uint8 (..., 3) RGB -> uint8 (...) grey exactly as tf.image.rgb_to_grayscale on uint8 does; (..., 1) passes."""
    if rgb.shape[-1] == 1:
        return rgb[..., 0].astype(np.uint8)
    x = rgb.astype(np.float32) * np.float32(1.0 / 255.0)  # convert_image_dtype(uint8 -> float32)
    grey = x[..., 0] * _GREY_WEIGHTS[0] + x[..., 1] * _GREY_WEIGHTS[1] + x[..., 2] * _GREY_WEIGHTS[2]
    return (grey * np.float32(255.5)).astype(np.uint8)  # convert_image_dtype(float32 -> uint8): scale, truncate


# ------------------------------------------------------------------------------------------ python pickle batches


_NUMPY_CORE = "numpy._core" if importlib.util.find_spec("numpy._core") is not None else "numpy.core"


class _SafeUnpickler(pickle.Unpickler):
    """Admits what CIFAR's batches hold (numpy arrays, builtin containers) and nothing that could run code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how Python 3 pickles bytes at protocol 2
    }

    def find_class(self, module: str, name: str):
        # The original batches name numpy.core (numpy 1.x); numpy 2 writes and provides numpy._core.
        canonical = module.replace("numpy._core", "numpy.core", 1)
        if (canonical, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} (not part of a CIFAR-10 batch)")
        return super().find_class(canonical.replace("numpy.core", _NUMPY_CORE, 1), name)


def read_cifar_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> grey pixels (N, 1024) uint8 and labels (N,) int64."""
    try:
        batch = _SafeUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as e:  # pickle raises many types on damaged input
        raise corrupt(where, f"not a readable CIFAR-10 python batch: {e}") from e
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise corrupt(where, "not a CIFAR-10 batch (expected a dict with b'data' and b'labels')")
    pixels = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"])
    if pixels.dtype != np.uint8 or pixels.ndim != 2 or pixels.shape[1] != 3 * PIXELS:
        raise corrupt(where, f"b'data' is {pixels.dtype} {pixels.shape}, expected uint8 (N, 3072)")
    if labels.shape != (len(pixels),):
        raise corrupt(where, f"{labels.shape[0] if labels.ndim else 0} labels for {len(pixels)} images")
    bad = np.flatnonzero((labels < 0) | (labels >= len(CLASSES))) if labels.size else []
    if len(bad):
        raise corrupt(where, f"label {labels[bad[0]]} of image {bad[0]} is not a CIFAR-10 class (0..9)")
    rgb = pixels.reshape(-1, 3, SIDE, SIDE).transpose(0, 2, 3, 1)  # stored as R plane, G plane, B plane
    return lra_grayscale(rgb).reshape(-1, PIXELS), labels.astype(np.int64)


def _find_pickle_folder(source: Path) -> Path | None:
    for folder in (source, source / "cifar-10-batches-py"):
        if (folder / TRAIN_BATCHES[0]).is_file():
            return folder
    return None


def read_cifar_pickles(source: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The python version as a folder (cifar-10-batches-py or its parent)."""
    folder = _find_pickle_folder(source)
    assert folder is not None
    blobs = {}
    for name in (*TRAIN_BATCHES, TEST_BATCH):
        path = folder / name
        if not path.is_file():
            raise DataMissingError(
                f"{folder}: {name} is missing (CIFAR-10's python version has {TRAIN_BATCHES[0]}..5 "
                f"and {TEST_BATCH}; it comes from {CIFAR_URL})"
            )
        blobs[name] = (str(path), path.read_bytes())
    return _decode_pickles(blobs)


def _decode_pickles(blobs: dict[str, tuple[str, bytes]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    train = [read_cifar_batch(blobs[n][1], blobs[n][0]) for n in TRAIN_BATCHES]
    test = read_cifar_batch(blobs[TEST_BATCH][1], blobs[TEST_BATCH][0])
    return {"train": (np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train])), "test": test}


# ------------------------------------------------------------------------------------------------- image folders


def _natural_key(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _classify(name: str, where: str) -> tuple[str, int] | None:
    """(split, label) of an image path inside a tree, None for files that are not images of the tree."""
    m = _IMAGE_MEMBER.search(name)
    if not m or not m.group(3).lower().endswith(IMAGE_SUFFIXES):
        return None
    cls = m.group(2)
    if cls not in CLASSES:
        raise corrupt(where, f"class folder {cls!r} is not a CIFAR-10 class ({', '.join(CLASSES)})")
    return m.group(1), CLASSES.index(cls)


Entry = tuple[int, str, Any]  # (label, name, bytes or path)


def list_image_tree(source: Path) -> dict[str, list[Entry]]:
    """Images of an extracted tree, in canonical order (class, then file name); bytes are read later."""
    out: dict[str, list[Entry]] = {"train": [], "test": []}
    for split in ("train", "test"):
        if not (source / split).is_dir():
            raise DataMissingError(f"{source}: expected {split}/<class name>/*.png|jpg (an image-folder tree)")
        for path in (source / split).rglob("*"):
            rel = path.relative_to(source).as_posix()
            got = _classify(rel, str(path)) if path.is_file() else None
            if got:
                out[split].append((got[1], rel, path))
    return _by_class(out)


def _by_class(entries: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
    """Entries in canonical order (class, then file name), whatever order the tree or archive listed them in."""
    return {split: sorted(items, key=lambda e: (e[0], _natural_key(e[1]))) for split, items in entries.items()}


def read_image_tar(path: str) -> dict[str, list[Entry]]:
    """Images of a .tar/.tar.gz image tree, streamed in one pass (bytes kept: CIFAR-10 as JPEG is ~55 MB)."""
    out: dict[str, list[Entry]] = {"train": [], "test": []}
    for name, data in read_tar(path, _IMAGE_MEMBER.search, "reading image archive"):
        got = _classify(name, f"{path}: member {name}")
        if got:
            out[got[0]].append((got[1], name, data))
    return _by_class(out)


def _decode_chunk(items: list[tuple[str, Any]]) -> np.ndarray:
    """Decode (name, bytes or path) images to grey rows (worker side); a bad image raises DataCorruptError."""
    rows = np.zeros((len(items), PIXELS), dtype=np.uint8)
    for i, (name, blob) in enumerate(items):
        img = decode_image(blob, name)
        if img.shape[:2] != (SIDE, SIDE):
            raise corrupt(name, f"image is {img.shape[1]}x{img.shape[0]}, expected {SIDE}x{SIDE}")
        rows[i] = lra_grayscale(img).reshape(-1)
    return rows


def decode_entries(entries: list[Entry], where: str, workers: int, label: str) -> np.ndarray:
    """Grey rows (N, 1024) of image entries, decoded in `workers` processes with a progress bar."""
    out = np.zeros((len(entries), PIXELS), dtype=np.uint8)
    workers = min(workers, max(1, len(entries) // max(1, POOL_MIN_IMAGES)))
    chunk = max(1, min(256, ceil_div(len(entries), 4 * workers)))  # several chunks per worker, at most 256 images
    starts = list(range(0, len(entries), chunk))
    jobs = [([(f"{where}: {e[1]}", e[2]) for e in entries[s : s + chunk]],) for s in starts]
    with make_progress() as progress:
        bar = progress.add_task(label, total=len(entries))

        def take(i: int, rows: np.ndarray) -> None:
            out[starts[i] : starts[i] + len(rows)] = rows
            progress.advance(bar, len(rows))

        run_jobs(_decode_chunk, jobs, workers, take)
    return out


# --------------------------------------------------------------------------------------------------------- TFDS


def read_cifar_tfds() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise DataMissingError(
            "source 'tfds' needs tensorflow-datasets, which is not installed: pip install 'lra[tfds]' "
            f"(or pass CIFAR-10's python version from {CIFAR_URL} instead)"
        ) from e
    out = {}
    with make_progress() as progress:
        for split, n in (("train", 50000), ("test", 10000)):
            bar = progress.add_task(f"reading TFDS cifar10/{split}", total=n)
            grey, labels = [], []
            for ex in tfds.as_numpy(tfds.load("cifar10", split=split)):
                grey.append(lra_grayscale(ex["image"]).reshape(-1))
                labels.append(int(ex["label"]))
                progress.advance(bar)
            out[split] = (np.stack(grey), np.array(labels, dtype=np.int64))
    return out


# --------------------------------------------------------------------------------------------------------- task


@register_task("image")
class ImageTask(CachedTask):
    """CIFAR-10 as 1024 grayscale pixel tokens (LRA "Image")."""

    num_classes = 10
    description = "CIFAR-10 as 1024 grayscale pixels, 10 classes (LRA Image)"
    dataset = "CIFAR-10"
    url = CIFAR_URL
    source_example = "/path/to/cifar-10-python.tar.gz"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int = PIXELS,
        num_val: int = 5000,
        seed: int = 0,
        black_padding: bool = False,
        **options: Any,
    ) -> None:
        if max_length != PIXELS:
            raise ValueError(f"data setting max_length must be {PIXELS} for image (32x32 pixels), got {max_length!r}")
        if not isinstance(black_padding, bool):
            raise ValueError(f"data setting black_padding must be true or false, got {black_padding!r}")
        super().__init__(data_dir, PIXELS, **options)
        self.num_val = check_count("num_val", num_val, 1, allow_none=False)
        self.seed = check_count("seed", seed, 0, allow_none=False)
        self.black_padding = black_padding

    def cache_settings(self) -> dict[str, Any]:
        return {"num_val": self.num_val, "seed": self.seed}

    def cache_options(self) -> dict[str, Any]:
        return self.cache_settings()

    @classmethod
    def pads_inside(cls, data: dict[str, Any]) -> bool:
        return bool(data.get("black_padding"))

    def load(self, split: str) -> Split:
        """A split as stored (grey + 1), or with `black_padding` the raw grey levels, black (0) as padding."""
        data = super().load(split)
        if not self.black_padding:
            return data
        return Split(np.asarray(data.tokens) - 1, data.labels)

    def import_into(self, source: str, writer: CacheWriter, workers: int) -> None:
        arrays, entries, kind = self._open(source)
        sizes = {s: len(entries[s]) if entries is not None else len(arrays[s][1]) for s in ("train", "test")}
        for split, n in sizes.items():
            if n == 0:
                raise corrupt(source, f"no {split} images found")
        train_idx, val_idx = carve_validation(sizes["train"], self.num_val, self.seed)
        parts = {
            "train": ("train", train_idx),
            "val": ("train", val_idx),
            "test": ("test", shuffled(sizes["test"], self.seed)),
        }
        if entries is not None:
            arrays = {
                s: (
                    decode_entries(entries[s], source, workers, f"decoding {s} images"),
                    np.array([e[0] for e in entries[s]]),
                )
                for s in ("train", "test")
            }
        splits = {
            split: (arrays[origin][0][idx], arrays[origin][1][idx].astype(np.int64))
            for split, (origin, idx) in parts.items()
        }
        self._write(writer, splits, kind)

    def _open(self, source: str):
        """(arrays, None, kind) for sources already decoded, (None, image entries, kind) for image trees."""
        if source == "tfds":
            return read_cifar_tfds(), None, "tfds cifar10"
        path = Path(source)
        if path.is_dir():
            if _find_pickle_folder(path) is not None:
                return read_cifar_pickles(path), None, "python batches"
            return None, list_image_tree(path), "image folder"
        if not tarfile.is_tarfile(source):
            raise corrupt(source, "neither a CIFAR-10 folder nor a tar archive of one")
        pickles = self._pickles_in_tar(source)
        if pickles is not None:
            return _decode_pickles(pickles), None, "python batches (archive)"
        return None, read_image_tar(source), "image archive"

    @staticmethod
    def _pickles_in_tar(path: str) -> dict[str, tuple[str, bytes]] | None:
        """The batches of a cifar-10-python.tar.gz, or None when the archive is not that."""
        wanted = {*TRAIN_BATCHES, TEST_BATCH}
        found: dict[str, tuple[str, bytes]] = {}

        def pick(name: str) -> bool:
            return name.rsplit("/", 1)[-1] in wanted or bool(_IMAGE_MEMBER.search(name))

        for name, data in read_tar(path, pick, "reading CIFAR-10 archive"):
            if _IMAGE_MEMBER.search(name):
                return None  # an image tree
            found[name.rsplit("/", 1)[-1]] = (f"{path}: member {name}", data)
        if not found:
            return None
        missing = sorted(wanted - set(found))
        if missing:
            raise corrupt(path, f"CIFAR-10 archive without {', '.join(missing)}")
        return found

    def _write(self, writer: CacheWriter, splits: dict[str, tuple[np.ndarray, np.ndarray]], kind: str) -> None:
        for split, (grey, labels) in splits.items():
            tokens = grey.astype(np.uint16) + 1  # pixel + 1: black is not padding
            writer.split(split, Split(tokens, labels))
        writer.meta.update(
            source_kind=kind,
            format="grey pixel + 1 (tf.image.rgb_to_grayscale), row-major 32x32; classes " + ",".join(CLASSES),
        )
