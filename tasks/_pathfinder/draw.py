"""The Pathfinder image generator, version 2: Linsley et al.'s `snakes2.py` as LRA ran it (github.com/drewlinsley/
pathfinder at ab9c130, `snakes2_wrapper.py` with LRA's settings per resolution), step by step, made fast.

One image, as `snakes2.from_wrapper` draws it: a label (a fair coin), a margin (one of the resolution's), two target
snakes of `contour_length` paddles (`snakes.py`: `two_snakes`, retried from scratch until both grow whole), the
distractor snakes (`make_many_snakes`: as many as their tries allow), two markers (`draw_circle`: on the tail of a
random target, and on the last head of the same snake for label 1, of the other for label 0; never checked against
anything), and the save: the float image bytescaled by its own min and max (SciPy <= 1.1 `imsave`). The image is
drawn at its final size (the window is the resolution); the only resizes are the original's own, of each paddle
(17 x 17 -> 9 x 9 at 32 px) and of the markers' image, in 8 bits, reproduced exactly (stamps.py).

Where this differs from running the original, for speed only (docs/pathfinder.md): the stamps are drawn once per
orientation and pasted (stamps.py); a mask is kept as 8-bit levels with the original's float comparisons tabulated;
target pairs are grown `BATCH` at a time and the first success in order is kept, and a distractor's five tries at
once (snakes.py); a distractor seed is drawn by rejection among free tails; the random numbers are numpy's Generator
(one stream per image). Each image is deterministic in (resolution, difficulty, split, index, seed), whatever the
number of worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks._pathfinder.grow import Canvases
from tasks._pathfinder.settings import SPECS, check_settings
from tasks._pathfinder.snakes import Pair, Snake, distractors, target_pair
from tasks._pathfinder.stamps import bytescale
from tasks._pathfinder.tables import Tables, tables

GENERATOR_VERSION = 2  # data.generator: part of every config hash, random stream and cache name
GENERATORS = (2,)  # the versions this code draws (1, before issue 32, was removed: docs/pathfinder.md)
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
# target pairs grown at once, by (resolution, margin): about the inverse of one pair's chance to grow whole, so that
# numpy's per-call cost is spread over many pairs. They decide which random numbers go where, so they are part of
# what an image is: changing one needs a new generator version.
BATCH = {(32, 1): 256, (64, 1): 1024, (128, 2): 128, (128, 3): 256, (256, 3): 32}


@dataclass
class Drawing:
    """One generated image and what the tests need to check it."""

    image: np.ndarray  # (H, W) uint8
    label: int
    margin: int
    markers: tuple[tuple[int, int], tuple[int, int]]  # (y, x) centres: the one on a target's tail first
    n_distractors: int
    tried: int  # target pairs drawn until one grew whole


def check_generator(version: int) -> int:
    """`version` if this code draws it, else a clear error."""
    if version not in GENERATORS:
        raise ValueError(
            f"data.generator = {version!r}: this checkout draws Pathfinder images with generator "
            f"{', '.join(map(str, GENERATORS))} only (generator 1, the pre-issue-32 rewrite, was removed; "
            f"docs/pathfinder.md says which commit still has it)"
        )
    return version


def image_rng(resolution: int, difficulty: int, split: str, index: int, seed: int) -> np.random.Generator:
    """The random stream of one image."""
    if split not in SPLIT_CODES:
        raise ValueError(f"split must be one of {list(SPLIT_CODES)}, got {split!r}")
    return np.random.default_rng([GENERATOR_VERSION, seed, resolution, difficulty, SPLIT_CODES[split], int(index)])


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
    return x ^ (x >> np.uint64(31))


def labels_for(resolution: int, difficulty: int, split: str, seed: int, start: int, stop: int) -> np.ndarray:
    """Labels of images start..stop-1: a fair coin per image, as the original's `np.random.randint(0, 2)`, hashed
    from the image's key so that a split's labels are known without drawing its images."""
    if split not in SPLIT_CODES:
        raise ValueError(f"split must be one of {list(SPLIT_CODES)}, got {split!r}")
    key = np.uint64(0)
    with np.errstate(over="ignore"):
        for part in (GENERATOR_VERSION, seed, resolution, difficulty, SPLIT_CODES[split]):
            key = _splitmix64(np.array([key ^ np.uint64(part)], np.uint64))[0]
        idx = np.arange(start, stop, dtype=np.uint64)
        return (_splitmix64(idx ^ key) >> np.uint64(63)).astype(np.int64)


def draw(resolution: int, difficulty: int, split: str, index: int, seed: int = 0, trace: bool = False) -> Drawing | Any:
    """Draw image `index` of a split (deterministic); with `trace`, as a `stats.Sample` (each snake rendered alone)."""
    check_settings(resolution, difficulty)
    label = int(labels_for(resolution, difficulty, split, seed, index, index + 1)[0])
    return draw_with(resolution, difficulty, image_rng(resolution, difficulty, split, index, seed), label, trace)


def draw_images(resolution: int, difficulty: int, split: str, start: int, stop: int, seed: int = 0) -> np.ndarray:
    """Images start..stop-1 of a split as one (n, H, W) uint8 array (worker processes call this)."""
    out = np.empty((stop - start, resolution, resolution), np.uint8)
    for i in range(start, stop):
        out[i - start] = draw(resolution, difficulty, split, i, seed).image
    return out


def draw_with(resolution: int, contour: int, rng: np.random.Generator, label: int, trace: bool = False) -> Any:
    """Draw one image from `rng` with the given label (snakes2.from_wrapper's loop body)."""
    margin, pair = grow_targets(resolution, contour, rng)
    return finish(resolution, contour, rng, label, margin, pair, trace)


def grow_targets(resolution: int, contour: int, rng: np.random.Generator) -> tuple[int, Pair]:
    """The first part of an image, its margin and target pair (about three quarters of a 128 px image's time; a
    targets cache keeps it, targets.py)."""
    spec = SPECS[resolution]
    margin = spec.margins[int(rng.integers(len(spec.margins)))]
    return margin, target_pair(tables(resolution, margin), contour, rng, BATCH[resolution, margin])


def finish(
    resolution: int, contour: int, rng: np.random.Generator, label: int, margin: int, pair: Pair, trace: bool = False
) -> Any:
    """The rest of an image from `rng` as grow_targets left it: the distractors, the markers and the render."""
    spec, t = SPECS[resolution], tables(resolution, margin)
    first, second = pair.snakes
    mask = Canvases(t, 1, "image")  # two_snakes' mask: the padding band, every target paddle but the first's last
    mask.init(np.zeros(1, np.int64), t.base_mask)
    stamps = np.concatenate([first.stamps[:-1], second.stamps])
    mask.paste_all(t, 0, stamps, np.concatenate([first.starts[:-1], second.starts]))
    extra = distractors(t, mask, spec.num_distractors(contour), spec.distractor_length(contour), rng)
    origin = int(rng.integers(2))
    terminal = origin if label == 1 else 1 - origin
    ends = (pair.tails[origin], pair.heads[terminal])
    markers = ((int(ends[0][0]), int(ends[0][1])), (int(ends[1][0]), int(ends[1][1])))
    marks = render_markers(t, markers)
    if not trace:
        full = np.maximum(np.maximum(render(t, pair.snakes, "target"), render(t, extra, "distractor")), marks)
        return Drawing(bytescale(full), label, margin, markers, len(extra), pair.tried)
    from tasks._pathfinder.stats import Sample  # noqa: PLC0415 (the statistics' trace type; only traces need it)

    layers = [render(t, [s], "target") for s in pair.snakes] + [render(t, [d], "distractor") for d in extra]
    full = np.maximum(np.max(layers, 0), marks)
    own = np.stack([bytescale(layer, full.min(), full.max()) for layer in layers])
    return Sample(bytescale(full), label, own, markers, len(extra))


def render(t: Tables, snakes: list[Snake] | tuple[Snake, ...], kind: str) -> np.ndarray:
    """The float image of `snakes` (kind "target" or "distractor": their contrast), as the original's float image
    holds them: each paddle's 8-bit ink / 255 times the contrast, in float32, the pixelwise maximum."""
    # the maximum in 8-bit ink levels, then their values: a level's value grows with the level, so it is the same
    canvas = np.zeros(t.width * t.width, np.uint8)
    if snakes:
        stamps = np.concatenate([s.stamps for s in snakes])
        starts = np.concatenate([s.starts for s in snakes])
        np.maximum.at(canvas, starts[:, None] + t.ink_off, t.ink[stamps].reshape(len(stamps), -1))
    n, pad = t.size, t.pad
    return t.value[kind][canvas.reshape(t.width, t.width)[pad : pad + n, pad : pad + n]]


def render_markers(t: Tables, markers: tuple[tuple[int, int], tuple[int, int]]) -> np.ndarray:
    """draw_circle at both marker centres, as the float image the original adds (8-bit level / 255)."""
    out = np.zeros((t.size, t.size), np.uint8)
    for y, x in markers:
        y0, x0, win = t.marker_at(y, x)
        view = out[y0 : y0 + win.shape[0], x0 : x0 + win.shape[1]]
        np.maximum(view, win, out=view)
    return t.value["marker"][out]
