"""Pathfinder, Path-64, Path-X and Path-256: are the two circles connected by a dashed snake? (2 classes)

Images are drawn by this project's fast rewrite of Linsley et al.'s generator with LRA's settings per resolution
(tasks/_pathfinder/), deterministic in (resolution, difficulty, split, index, seed), or read from LRA's release
(`source`). Tokens are pixel + 1 (0 is padding, so a black pixel is not), one per pixel in row-major order, vocab 257.

Data settings (the config's `data:` keys):
- difficulty: contour length in paddles, 14 (LRA's "hard", the benchmark), 9 or 6.
- num_train / num_val / num_test: LRA has 200k images per difficulty, split 80/10/10 = 160k / 20k / 20k (its input
  pipeline takes [:80%], [80%:90%], [90%:] of the release). With `source` they cap the release's splits.
- seed: generator seed.
- cache: true stores each split once as a uint8 .npy file (memory-mapped at training time); false draws images on the
  fly when a batch asks for them (no disk; for Path-256, 160k images are 10 GiB).
- source: a folder in LRA's release layout to read instead of generating.
- downsample: average-pool the image by this factor before tokenising (1 = off). Only for CPU smoke runs of the long
  tasks: Path-X at downsample 4 is 32x32 tokens of Path-X's snakes. Not a benchmark setting.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lra.core.atomic import atomic_path, write_json
from lra.core.errors import DataCorruptError
from lra.core.progress import make_progress
from tasks._pathfinder import release, store
from tasks._pathfinder.draw import GENERATOR_VERSION, check_settings, labels_for
from tasks._pathfinder.geometry import SPECS
from tasks.registry import SPLITS, Split, Task, register_task

VOCAB_SIZE = 257  # 256 grey levels + padding


class PathfinderTask(Task):
    """Shared implementation; subclasses fix the resolution."""

    resolution: ClassVar[int] = 32
    num_classes = 2
    generated = True

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int | None = None,
        difficulty: int = 14,
        num_train: int = 160_000,
        num_val: int = 20_000,
        num_test: int = 20_000,
        seed: int = 0,
        cache: bool = True,
        source: str | os.PathLike[str] | None = None,
        downsample: int = 1,
    ) -> None:
        res = self.resolution
        check_settings(res, int(difficulty))
        self.difficulty = int(difficulty)
        self.downsample = int(downsample)
        if self.downsample < 1 or res % self.downsample:
            raise ValueError(f"{self.name}: downsample must divide {res}, got {downsample}")
        side = res // self.downsample
        if max_length is not None and int(max_length) != side * side:
            raise ValueError(
                f"{self.name}: images are {side}x{side} = {side * side} tokens, so max_length must be {side * side} "
                f"(or left out), got {max_length}"
            )
        super().__init__(data_dir, side * side)
        self.counts = {"train": int(num_train), "val": int(num_val), "test": int(num_test)}
        for split, n in self.counts.items():
            if n < 0:
                raise ValueError(f"{self.name}: num_{split} must be >= 0, got {n}")
        self.seed = int(seed)
        self.cache = bool(cache)
        self.source = Path(source).expanduser() if source else None

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    @property
    def side(self) -> int:
        """Image side after downsampling (the model's 2-D grid is side x side)."""
        return self.resolution // self.downsample

    @property
    def cache_dir(self) -> Path:
        """Where generated images of these settings live (any split size; prefixes are shared)."""
        name = f"{self.resolution}px-d{self.difficulty}-seed{self.seed}-v{GENERATOR_VERSION}"
        return self.data_dir / self.name / name

    @property
    def release_dir(self) -> Path:
        """Where images imported from `source` live."""
        key = hashlib.sha256(str(self.source.resolve()).encode()).hexdigest()[:10] if self.source else "none"
        return self.data_dir / self.name / f"release-{self.resolution}px-d{self.difficulty}-{key}"

    # ---- loading
    def load(self, split: str) -> Split:
        """Images of `split` as tokens: from the release import, the cache (drawn first when missing) or on the fly."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; {self.name} has {', '.join(SPLITS)}")
        if self.source is not None:
            images, labels = self._release_split(split)
        elif not self.cache:
            n = self.counts[split]
            images = store.LazyImages(self.resolution, self.difficulty, split, self.seed, 0, n)
            labels = labels_for(self.resolution, self.difficulty, split, self.seed, 0, n)
        else:
            n = self.counts[split]
            found = store.open_split(self.cache_dir, split, n)
            if found is None:
                self._generate({split: n}, store.auto_workers(n, self.resolution))
                found = store.open_split(self.cache_dir, split, n)
            if found is None:
                raise DataCorruptError(f"{self.cache_dir}: {split} images were generated but cannot be read back")
            images, labels = found
        return Split(store.PixelTokens(images, self.downsample), labels)

    def _generate(self, counts: dict[str, int], workers: int) -> None:
        what = " + ".join(f"{n} {split}" for split, n in counts.items())
        store.generate_splits(
            self.cache_dir,
            self.resolution,
            self.difficulty,
            counts,
            self.seed,
            workers=workers,
            description=f"drawing {self.name} ({what})",
        )

    # ---- preparing
    def prepare(self, source: str | os.PathLike[str] | None = None, workers: int = 1) -> None:
        """Draw every split into the cache (missing ones only), or import LRA's release from `source`."""
        if source is not None:
            self.source = Path(source).expanduser()
        if self.source is not None:
            self._import_release(workers)
            return
        missing = {s: n for s, n in self.counts.items() if n > 0 and store.open_split(self.cache_dir, s, n) is None}
        if missing:
            self._generate(missing, workers)

    def _release_split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        folder = self.release_dir
        if not (folder / "meta.json").is_file():
            self._import_release(store.auto_workers(1000, self.resolution))
        try:
            images = np.load(folder / "images.npy", mmap_mode="r")
            labels = np.load(folder / "labels.npy")
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise DataCorruptError(f"{folder}: unreadable import ({err}); delete the folder to import again") from None
        lo, hi = meta["splits"][split]
        hi = min(hi, lo + self.counts[split])
        return images[lo:hi], np.asarray(labels[lo:hi], dtype=np.int64)

    def _import_release(self, workers: int) -> None:
        """Decode the release's PNGs into one uint8 file (metadata order) with its labels and split bounds."""
        folder = self.release_dir
        if (folder / "meta.json").is_file():
            return
        src = release.find_release(self.source, self.resolution, self.difficulty)
        items, empty = release.list_images(src)
        n = len(items)
        folder.mkdir(parents=True, exist_ok=True)
        labels = np.array([label for _, label, _ in items], np.int64)
        with atomic_path(folder / "labels.npy", suffix=".npy") as tmp:
            np.save(tmp, labels)
        with atomic_path(folder / "images.npy", suffix=".npy") as tmp, make_progress() as progress:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, self.resolution, self.resolution))
            bar = progress.add_task(f"importing {self.name} release", total=n)
            release.decode_into(
                out, [(str(p), w) for p, _, w in items], self.resolution, workers, lambda k: progress.advance(bar, k)
            )
            out.flush()
            del out
        bounds = release.split_bounds(n)
        write_json(folder / "meta.json", {"source": str(src), "images": n, "empty_skipped": empty, "splits": bounds})

    # ---- reporting
    def settings(self) -> dict[str, Any]:
        spec = SPECS[self.resolution]
        return {
            "resolution": self.resolution,
            "difficulty": self.difficulty,
            "num_train": self.counts["train"],
            "num_val": self.counts["val"],
            "num_test": self.counts["test"],
            "seed": self.seed,
            "cache": self.cache,
            "source": str(self.source) if self.source else None,
            "downsample": self.downsample,
            "generator_version": GENERATOR_VERSION,
            "generator": {
                "margins": list(spec.margins),
                "padding": spec.padding,
                "seed_distance": spec.seed_distance,
                "marker_radius": spec.marker_radius,
                "paddle_length": spec.paddle_length,
                "thickness": spec.thickness,
                "continuity": spec.continuity,
                "distractor_length": spec.distractor_length(self.difficulty),
                "distractors": spec.num_distractors(self.difficulty),
            },
        }

    def info(self) -> dict[str, Any]:
        """Settings, where the data is, and per split whether it is cached and how big it is."""
        out: dict[str, Any] = {**super().info(), "settings": self.settings(), "vocab_size": self.vocab_size}
        out["seq_len"] = self.seq_len
        if self.source is not None:
            out["source"] = str(self.source)
            out["cache_dir"] = str(self.release_dir)
            meta_path = self.release_dir / "meta.json"
            out["cached"] = meta_path.is_file()
            if out["cached"]:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                size = sum(p.stat().st_size for p in self.release_dir.glob("*.npy"))
                out["splits"] = {s: {"examples": b - a} for s, (a, b) in meta["splits"].items()}
                out["bytes"] = size
                out["empty_skipped"] = meta["empty_skipped"]
            return out
        out["cache_dir"] = str(self.cache_dir)
        out["cached"] = {}
        total = 0
        splits = {}
        for split in SPLITS:
            sizes = store.cached_sizes(self.cache_dir, split)
            usable = [s for s in sizes if s >= self.counts[split]]
            files = [store.image_path(self.cache_dir, split, s) for s in sizes]
            size = sum(f.stat().st_size for f in files)
            total += size
            splits[split] = {"examples": self.counts[split], "cached_sizes": sizes, "bytes": size}
            out["cached"][split] = bool(usable) or self.counts[split] == 0
        out["splits"] = splits
        out["bytes"] = total
        if not self.cache:
            out["note"] = "cache: false, images are drawn on the fly"
        return out


@register_task("pathfinder")
class Pathfinder(PathfinderTask):
    """LRA Pathfinder: 32x32 images, 1,024 tokens."""

    resolution = 32
    description = "32x32 Pathfinder images (1,024 pixel tokens): are the two circles on one dashed snake?"


@register_task("path-64")
class Path64(PathfinderTask):
    """64x64 Pathfinder (4,096 tokens): the pre-training task of the FlashAttention paper's Path-X recipe."""

    resolution = 64
    description = "64x64 Pathfinder images (4,096 pixel tokens); pre-training for the Path-X recipe"


@register_task("path-x")
class PathX(PathfinderTask):
    """LRA Path-X: 128x128 images, 16,384 tokens."""

    resolution = 128
    description = "128x128 Pathfinder images (16,384 pixel tokens)"


@register_task("path-256")
class Path256(PathfinderTask):
    """Path-256 (FlashAttention paper): 256x256 images, 65,536 tokens."""

    resolution = 256
    description = "256x256 Pathfinder images (65,536 pixel tokens)"
