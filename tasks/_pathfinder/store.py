"""Pathfinder images on disk and on the fly: uint8 .npy caches built by parallel workers, read memory-mapped.

A generated split of N images is one file `<split>-<N>.npy` (N, H, W) uint8 beside `<split>-<N>.labels.npy`. Image i
of a split does not depend on N, so a cache of M >= N images serves the first N too. Files are written under a
temporary name (workers fill a memory-mapped temporary .npy) and renamed into place when complete: an interrupted
build leaves nothing that looks finished.

Tokens are built on access by `PixelTokens`: pixel + 1 (0 stays the padding id, so a black pixel is not padding),
optionally average-pooled by an integer factor. `LazyImages` draws images on demand instead of reading a cache.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import multiprocessing
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lra.core.atomic import atomic_path
from lra.core.progress import make_progress
from tasks._pathfinder.draw import draw_images, labels_for


class PixelTokens:
    """A read-only (N, L) int64 token array over (N, H, W) uint8 images, converted on access.

    Supports len(), .shape, integer / slice / integer-array indexing (slices stay lazy) and np.asarray().
    """

    def __init__(self, images: Any, downsample: int = 1) -> None:
        if len(images.shape) != 3:
            raise ValueError(f"images must be (N, H, W), got shape {images.shape}")
        n, h, w = images.shape
        if downsample < 1 or h % downsample or w % downsample:
            raise ValueError(f"downsample must be a positive divisor of the image size {h}x{w}, got {downsample}")
        self.images = images
        self.downsample = int(downsample)
        self.side = (h // downsample, w // downsample)
        self.shape = (n, self.side[0] * self.side[1])
        self.dtype = np.dtype(np.int64)
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def _tokens(self, imgs: np.ndarray) -> np.ndarray:
        f = self.downsample
        if f > 1:
            pooled = imgs.reshape(len(imgs), self.side[0], f, self.side[1], f).mean(axis=(2, 4))
            imgs = np.rint(pooled)
        return imgs.reshape(len(imgs), -1).astype(np.int64) + 1

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return PixelTokens(self.images[key], self.downsample)
        if isinstance(key, (int, np.integer)):
            return self._tokens(np.asarray(self.images[int(key)])[None])[0]
        if isinstance(key, tuple):
            raise TypeError("PixelTokens takes one index (rows); convert with np.asarray() for more")
        idx = np.asarray(key)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        return self._tokens(np.asarray(self.images[idx]))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._tokens(np.asarray(self.images[: len(self)]))
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"PixelTokens(shape={self.shape}, downsample={self.downsample})"


class LazyImages:
    """Images start..stop-1 of a generated split, drawn when indexed (nothing is stored)."""

    def __init__(self, resolution: int, difficulty: int, split: str, seed: int, start: int, stop: int) -> None:
        self.args = (resolution, difficulty, split, seed)
        self.start, self.stop = int(start), int(stop)
        self.shape = (self.stop - self.start, resolution, resolution)
        self.dtype = np.dtype(np.uint8)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        res, diff, split, seed = self.args
        if isinstance(key, slice):
            lo, hi, step = key.indices(len(self))
            if step != 1:
                return self[np.arange(lo, hi, step)]
            return LazyImages(res, diff, split, seed, self.start + lo, self.start + max(lo, hi))
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"image {key} out of range for {len(self)} images")
            return draw_images(res, diff, split, self.start + i, self.start + i + 1, seed)[0]
        idx = np.asarray(key, dtype=np.int64).ravel()
        idx = np.where(idx < 0, idx + len(self), idx)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"image index out of range for {len(self)} images")
        out = np.empty((idx.size, res, res), np.uint8)
        for n, i in enumerate(idx.tolist()):
            out[n] = draw_images(res, diff, split, self.start + i, self.start + i + 1, seed)[0]
        return out.reshape(np.shape(key) + (res, res))


def auto_workers(n_images: int, resolution: int) -> int:
    """Worker processes worth starting for n images (process start-up and table building cost ~1 s each)."""
    per_worker = {32: 2000, 64: 1000, 128: 500, 256: 500}.get(resolution, 500)
    return max(1, min(os.cpu_count() or 1, n_images // per_worker))


_NAME = re.compile(r"^(train|val|test)-(\d+)\.npy$")


def cached_sizes(folder: Path, split: str) -> list[int]:
    """Sizes of the complete caches of a split in folder, smallest first."""
    if not folder.is_dir():
        return []
    sizes = []
    for p in folder.iterdir():
        m = _NAME.match(p.name)
        if m and m.group(1) == split and (folder / f"{split}-{m.group(2)}.labels.npy").is_file():
            sizes.append(int(m.group(2)))
    return sorted(sizes)


def image_path(folder: Path, split: str, n: int) -> Path:
    return folder / f"{split}-{n}.npy"


def _fill(path: str, resolution: int, difficulty: int, split: str, seed: int, start: int, stop: int) -> int:
    """Worker: draw images start..stop-1 into the memory-mapped temporary file."""
    images = draw_images(resolution, difficulty, split, start, stop, seed)
    out = np.load(path, mmap_mode="r+")
    out[start:stop] = images
    out.flush()
    del out
    return stop - start


def generate_splits(
    folder: Path,
    resolution: int,
    difficulty: int,
    counts: dict[str, int],
    seed: int,
    workers: int = 1,
    description: str = "drawing",
) -> None:
    """Draw images 0..n-1 of each split in `counts` into `<folder>/<split>-<n>.npy` (with labels), in `workers`
    processes sharing one pool (each process builds its tables once)."""
    folder.mkdir(parents=True, exist_ok=True)
    total = sum(counts.values())
    chunk = max(1, min(256, math.ceil(total / max(1, workers * 16))))
    with contextlib.ExitStack() as stack:
        jobs, temps = [], {}
        for split, n in counts.items():
            labels = labels_for(resolution, difficulty, split, seed, 0, n)
            with atomic_path(folder / f"{split}-{n}.labels.npy", suffix=".npy") as tmp:
                np.save(tmp, labels)
            tmp = stack.enter_context(atomic_path(image_path(folder, split, n), suffix=".npy"))
            np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, resolution, resolution)).flush()
            temps[split] = tmp
            jobs += [(str(tmp), resolution, difficulty, split, seed, a, min(n, a + chunk)) for a in range(0, n, chunk)]
        progress = stack.enter_context(make_progress())
        bar = progress.add_task(description, total=total)
        if workers <= 1:
            for job in jobs:
                progress.advance(bar, _fill(*job))
        else:
            _run_pool(workers, _fill, jobs, lambda done: progress.advance(bar, done))


def _run_pool(workers: int, fn: Callable[..., int], jobs: list[tuple], on_done: Callable[[int], None]) -> None:
    """Run fn(*job) in a pool of spawned processes (safe beside threads and CUDA), reporting each job's count."""
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        try:
            for fut in cf.as_completed(futures):
                on_done(fut.result())
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def open_split(folder: Path, split: str, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The first n images and labels of a split from the smallest cache that holds them (memory-mapped), or None."""
    for size in cached_sizes(folder, split):
        if size >= n:
            images = np.load(image_path(folder, split, size), mmap_mode="r")
            labels = np.load(folder / f"{split}-{size}.labels.npy", mmap_mode="r")
            return images[:n], np.asarray(labels[:n], dtype=np.int64)
    return None
