"""Generated Pathfinder images on disk: one cache per split and size, drawn by parallel workers, read memory-mapped.

The images of one generator setting live under `<data_dir>/<task>/<res>px-d<difficulty>-seed<seed>-v<generator>/`,
one `TaskCache` (tasks/_cache.py) per split and size: `<split>-<n>/` holds `images.npy` (n, H, W) uint8 and
`labels.npy`. Image i of a split does not depend on n, so a cache of m >= n images serves the first n too. Workers
fill the memory-mapped images of a cache being written; it appears under its name only when complete.

Beside them, `targets-<split>-<n>/` may hold the split's target pairs drawn ahead (targets.py; `lra data prepare
--targets-only`, small enough to carry to another machine): images drawn where one covers them take its pairs and
skip the costly part, after a check that a few come out as drawn from scratch.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from pathlib import Path

import numpy as np

from lra.core import locks
from lra.core.numbers import ceil_div
from lra.core.pools import run_jobs
from lra.core.progress import console, make_progress
from tasks._cache import TaskCache
from tasks._pathfinder.draw import GENERATOR_VERSION, draw, draw_images, labels_for
from tasks._pathfinder.targets import draw_from_targets, draw_targets, fields, images_from_targets


def auto_workers(n_images: int, resolution: int) -> int:
    """Worker processes worth starting for n images (process start-up and table building cost ~1 s each)."""
    per_worker = {32: 2000, 64: 1000, 128: 500, 256: 500}.get(resolution, 500)
    return max(1, min(os.cpu_count() or 1, n_images // per_worker))


def _fill(
    path: str, resolution: int, difficulty: int, split: str, seed: int, start: int, stop: int, targets: str | None
) -> int:
    """Worker: draw images start..stop-1 (from the targets cache at `targets`, if given) into the memory-mapped
    images file of a cache being written."""
    if targets is None:
        images = draw_images(resolution, difficulty, split, start, stop, seed)
    else:
        images = images_from_targets(resolution, difficulty, split, start, stop, seed, open_targets(Path(targets)))
    out = np.load(path, mmap_mode="r+")
    out[start:stop] = images
    out.flush()
    del out
    return stop - start


def _fill_targets(folder: str, resolution: int, difficulty: int, split: str, seed: int, start: int, stop: int) -> int:
    """Worker: draw the target pairs of images start..stop-1 into the memory-mapped files of a targets cache."""
    for name, values in draw_targets(resolution, difficulty, split, start, stop, seed).items():
        out = np.load(Path(folder) / f"{name}.npy", mmap_mode="r+")
        out[start:stop] = values
        out.flush()
        del out
    return stop - start


def open_targets(folder: Path) -> dict[str, np.ndarray]:
    """The arrays of the targets cache in `folder`, memory-mapped, by name."""
    return {p.stem: np.load(p, mmap_mode="r") for p in folder.glob("*.npy")}


class GeneratedStore:
    """The caches of one generator setting: (task, resolution, difficulty, seed) at this generator version."""

    def __init__(
        self, data_dir: str | os.PathLike[str], task: str, resolution: int, difficulty: int, seed: int
    ) -> None:
        self.data_dir = Path(data_dir)
        self.resolution, self.difficulty, self.seed = int(resolution), int(difficulty), int(seed)
        self.folder = f"{task}/{self.resolution}px-d{self.difficulty}-seed{self.seed}-v{GENERATOR_VERSION}"

    @property
    def path(self) -> Path:
        return self.data_dir / self.folder

    def drawing(self) -> contextlib.AbstractContextManager[None]:
        """Hold this setting's draw lock for the block, waiting while another process on the machine holds it: two
        that need the same images (campaigns side by side, a draw and a campaign's prefetch) draw them once, and
        the second finds them done (a cache appears whole; a draw killed halfway leaves none, and its lock dies
        with it)."""

        def waiting(who: str) -> None:
            console.print(f"{self.folder}: waiting for {who}, drawing the same images; it goes on when that ends")

        lock = self.path.with_name(f"{self.path.name}.lock")  # beside the folder: nothing in it is not an image cache
        return locks.waiting(lock, "lra data prepare", on_wait=waiting)

    def cache(self, split: str, n: int) -> TaskCache:
        """The cache of images 0..n-1 of `split`."""
        settings = {
            "resolution": self.resolution,
            "difficulty": self.difficulty,
            "seed": self.seed,
            "generator_version": GENERATOR_VERSION,
            "split": split,
            "examples": int(n),
        }
        return TaskCache(self.data_dir, self.folder, settings, name=f"{split}-{int(n)}")

    def sizes(self, split: str, targets: bool = False) -> list[int]:
        """Sizes of the complete image caches (or targets caches) of `split`, smallest first."""
        if not self.path.is_dir():
            return []
        name = re.compile(rf"^{'targets-' if targets else ''}{split}-(\d+)$")
        found = [int(m.group(1)) for p in self.path.iterdir() if (m := name.match(p.name))]
        cache = self.targets if targets else self.cache
        return sorted(n for n in found if cache(split, n).exists())

    def covering(self, split: str, n: int, targets: bool = False) -> TaskCache | None:
        """The smallest complete cache holding at least the first n images of `split` (or, `targets`, their target
        pairs), or None."""
        size = next((m for m in self.sizes(split, targets=targets) if m >= n), None)
        cache = self.targets if targets else self.cache
        return None if size is None else cache(split, size)

    def targets(self, split: str, n: int) -> TaskCache:
        """The targets cache of images 0..n-1 of `split` (targets.py)."""
        settings = {**self.cache(split, n).settings, "targets": True}
        settings.pop("cache_format")
        return TaskCache(self.data_dir, self.folder, settings, name=f"targets-{split}-{int(n)}")

    def generate_targets(self, counts: dict[str, int], workers: int = 1, description: str = "drawing") -> None:
        """Draw the target pairs of images 0..n-1 of each split in `counts` into a targets cache (targets.py)."""
        total = sum(counts.values())
        chunk = self._chunk(total, workers)
        with contextlib.ExitStack() as stack:
            jobs = []
            for split, n in counts.items():
                writer = stack.enter_context(self.targets(split, n).writer(keep_existing=True))
                for name, (shape, dtype) in fields(self.difficulty).items():
                    writer.array(name, (n, *shape), dtype).flush()  # zero-filled; the workers fill them
                writer.meta["counts"][split] = n
                args = (str(writer.folder), self.resolution, self.difficulty, split, self.seed)
                jobs += [(*args, a, min(n, a + chunk)) for a in range(0, n, chunk)]
            self._run(_fill_targets, jobs, workers, total, description, stack)

    def usable_targets(self, split: str, n: int) -> TaskCache | None:
        """A targets cache covering the first n images of `split` whose first and last images come out as drawn
        from scratch, or None (a cache that does not is named in a warning and left unused)."""
        cache = self.covering(split, n, targets=True)
        if cache is None:
            return None
        arrays = open_targets(cache.path)
        for i in sorted({0, n - 1}):
            fast = draw_from_targets(self.resolution, self.difficulty, split, i, self.seed, arrays, i).image
            if not np.array_equal(fast, draw(self.resolution, self.difficulty, split, i, self.seed).image):
                warnings.warn(
                    f"{cache.path}: image {i} drawn from these target pairs differs from the one drawn from scratch; "
                    "drawing every image from scratch instead (delete the folder, or draw it again with lra data "
                    "prepare --targets-only)",
                    stacklevel=2,
                )
                return None
        return cache

    def open(self, split: str, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The first n images (memory-mapped) and labels of `split`, or None when no cache holds them."""
        if n == 0:
            return np.zeros((0, self.resolution, self.resolution), np.uint8), np.zeros(0, np.int64)
        cache = self.covering(split, n)
        if cache is None:
            return None
        return cache.array("images")[:n], np.asarray(cache.array("labels")[:n], dtype=np.int64)

    def generate(self, counts: dict[str, int], workers: int = 1, description: str = "drawing") -> None:
        """Draw images 0..n-1 of each split in `counts` into its cache, in `workers` processes sharing one pool
        (each process builds its tables once)."""
        res = self.resolution
        total = sum(counts.values())
        chunk = self._chunk(total, workers)
        with contextlib.ExitStack() as stack:
            jobs = []
            for split, n in counts.items():
                writer = stack.enter_context(self.cache(split, n).writer(keep_existing=True))
                writer.save("labels", labels_for(res, self.difficulty, split, self.seed, 0, n))
                writer.array("images", (n, res, res), np.uint8).flush()  # zero-filled; the workers fill it
                writer.meta["counts"][split] = n
                path = str(writer.folder / "images.npy")
                targets = self.usable_targets(split, n)
                where = None if targets is None else str(targets.path)
                if where:
                    writer.meta.setdefault("drawn_from_targets", {})[split] = where
                jobs += [
                    (path, res, self.difficulty, split, self.seed, a, min(n, a + chunk), where)
                    for a in range(0, n, chunk)
                ]
            self._run(_fill, jobs, workers, total, description, stack)

    @staticmethod
    def _chunk(total: int, workers: int) -> int:
        return max(1, min(256, ceil_div(total, max(1, workers * 16))))

    @staticmethod
    def _run(fn, jobs: list, workers: int, total: int, description: str, stack: contextlib.ExitStack) -> None:
        progress = stack.enter_context(make_progress())
        bar = progress.add_task(description, total=total)
        run_jobs(fn, jobs, workers, lambda _, done: progress.advance(bar, done))
