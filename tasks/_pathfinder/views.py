"""Token and image views of Pathfinder images: pixel tokens built on access, and images drawn when indexed.

`PixelTokens` turns (N, H, W) uint8 images (a memory-mapped cache, a release import, or `LazyImages`) into (N, L)
tokens on access: pixel + 1 (0 stays the padding id, so a black pixel is not padding), optionally average-pooled by an
integer factor. `LazyImages` draws the images of a generated split on demand instead of reading a cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks._pathfinder.draw import draw_images


class PixelTokens:
    """A read-only (N, L) int64 token array over (N, H, W) uint8 images, converted on access.

    Supports len(), .shape, integer / slice / integer-array indexing (slices stay lazy) and np.asarray().
    """

    def __init__(self, images: Any, downsample: int = 1, offset: int = 1) -> None:
        if len(images.shape) != 3:
            raise ValueError(f"images must be (N, H, W), got shape {images.shape}")
        n, h, w = images.shape
        if downsample < 1 or h % downsample or w % downsample:
            raise ValueError(f"downsample must be a positive divisor of the image size {h}x{w}, got {downsample}")
        self.images = images
        self.downsample = int(downsample)
        self.offset = int(offset)  # 1: pixel + 1, black is not padding; 0: raw levels, black is padding
        self.side = (h // downsample, w // downsample)
        self.shape = (n, self.side[0] * self.side[1])
        self.dtype = np.dtype(np.int64)
        self.ndim = 2
        self.on_demand = bool(getattr(images, "on_demand", False))

    def __len__(self) -> int:
        return self.shape[0]

    def _tokens(self, imgs: np.ndarray) -> np.ndarray:
        f = self.downsample
        if f > 1:
            pooled = imgs.reshape(len(imgs), self.side[0], f, self.side[1], f).mean(axis=(2, 4))
            imgs = np.rint(pooled)
        return imgs.reshape(len(imgs), -1).astype(np.int64) + self.offset

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return PixelTokens(self.images[key], self.downsample, self.offset)
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

    on_demand = True  # reading every image draws it: the trainer does not copy such a split whole to the GPU

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
