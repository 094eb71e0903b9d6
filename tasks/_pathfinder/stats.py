"""Statistics of Pathfinder images that tell one generator's output from another's (issue 32's table).

Each statistic is a number per image (or per marker) averaged over a sample, reported with its sampling error. Some
need a `Sample`'s trace (which pixels belong to which snake, where the markers are, how many distractors were
placed); the image-only ones (`IMAGE_ONLY`) work from images alone, so LRA's release or any folder of PNGs can be
measured too. `reference_stats.json` beside this file holds them for the original generator (docs/pathfinder.md).

Pixel conventions: *drawn* pixels are >= 64 (the ink); a snake's pixels are the drawn pixels of its own
render (the faint > 0 fringe of the resampling filter would make every pair of neighbours touch); two pixel sets
*touch* when a pixel of one equals or is 8-adjacent to a pixel of the other, and *overlap* when they share one.
These definitions reproduce issue 32's table for both generators (docs/pathfinder.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

DRAWN = 64  # a pixel counts as drawn (ink) from this value on, the threshold the project's tests use
# The flood fill's bridge (px, centre to centre) by resolution: the widest gap between the dashes of one snake (the
# v1 generator's link distance; at 128 px a link of 8 joins every reference snake's dashes, 6 only a third of them).
FLOOD_LINK = {32: 3.0, 64: 4.0, 128: 8.0, 256: 8.0}


@dataclass(frozen=True)
class Sample:
    """One generated image with its trace: what the generators' `trace=True` returns.

    `snakes[k]` is snake k's own render at the image's resolution and scale (as if it were alone in the image,
    same brightness as in `image`): the two target snakes first, then the distractors placed, so
    `len(snakes) == 2 + n_distractors`. `markers` are the (y, x) pixel centres of the two circles, the one on a
    target's tail first. `image` is the pixelwise maximum of the snakes and the markers, as saved.
    """

    image: np.ndarray  # (H, W) uint8
    label: int  # 1: both markers on one target snake
    snakes: np.ndarray  # (S, H, W) uint8
    markers: tuple[tuple[int, int], tuple[int, int]]
    n_distractors: int


@dataclass(frozen=True)
class Estimate:
    """A statistic over a sample: its mean `value`, standard error `se`, spread `sd` and number of values `n`."""

    value: float
    se: float
    sd: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"value": self.value, "se": self.se, "sd": self.sd, "n": self.n}


# ---------------------------------------------------------------- pixel-set measures
def _dilate8(mask: np.ndarray) -> np.ndarray:
    """`mask` grown by one pixel in the 8 directions."""
    p = np.pad(mask, 1)
    h, w = mask.shape
    out = np.zeros_like(mask)
    for dy in range(3):
        for dx in range(3):
            out |= p[dy : dy + h, dx : dx + w]
    return out


def touch(a: np.ndarray, b: np.ndarray) -> bool:
    """Some pixel of `a` equals or is 8-adjacent to some pixel of `b` (boolean masks)."""
    return bool((_dilate8(a) & b).any())


def overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Some pixel is in both `a` and `b`."""
    return bool((a & b).any())


def gap(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest distance between the centres of a pixel of `a` and a pixel of `b` (0 when they share a pixel,
    1 or 1.41 when they touch; inf when either is empty)."""
    ya, xa = np.nonzero(a)
    yb, xb = np.nonzero(b)
    if ya.size == 0 or yb.size == 0:
        return math.inf
    d2 = (ya[:, None] - yb[None, :]) ** 2 + (xa[:, None] - xb[None, :]) ** 2
    return float(math.sqrt(d2.min()))


def _disk_offsets(link: float) -> list[tuple[int, int]]:
    """Half of the offsets (dy, dx) != 0 with dy^2 + dx^2 <= link^2 (one of each +- pair)."""
    r = int(math.floor(link))
    return [
        (dy, dx)
        for dy in range(0, r + 1)
        for dx in range(-r, r + 1)
        if (dy > 0 or dx > 0) and dy * dy + dx * dx <= link * link
    ]


def components(mask: np.ndarray, link: float = 1.5) -> np.ndarray:
    """Component label of every pixel (-1 off `mask`): pixels at most `link` apart (centre to centre) are joined,
    so link 1.5 is 8-connectivity. Labels are 0..k-1 in order of each component's first pixel (row-major)."""
    h, w = mask.shape
    idx = np.flatnonzero(mask)
    out = np.full(h * w, -1, np.int64)
    if idx.size == 0:
        return out.reshape(h, w)
    pos = np.full(h * w, -1, np.int64)
    pos[idx] = np.arange(idx.size)
    ys, xs = np.divmod(idx, w)
    src, dst = [], []
    for dy, dx in _disk_offsets(link):
        y2, x2 = ys + dy, xs + dx
        ok = np.flatnonzero((y2 >= 0) & (y2 < h) & (x2 >= 0) & (x2 < w))
        j = pos[y2[ok] * w + x2[ok]]
        src.append(ok[j >= 0])
        dst.append(j[j >= 0])
    s, d = np.concatenate(src), np.concatenate(dst)
    lab = np.arange(idx.size)
    while True:  # min-label propagation with pointer jumping: ends at each component's smallest index
        m = np.minimum(lab[s], lab[d])
        new = lab.copy()
        np.minimum.at(new, s, m)
        np.minimum.at(new, d, m)
        new = new[new]
        if np.array_equal(new, lab):
            break
        lab = new
    out[idx] = np.unique(lab, return_inverse=True)[1]
    return out.reshape(h, w)


def n_components(image: np.ndarray, threshold: int = 1) -> int:
    """8-connected components of the pixels >= `threshold`."""
    return int(components(image >= threshold).max() + 1)


def _near(shape: tuple[int, int], centre: tuple[int, int]) -> tuple[slice, slice]:
    """The 3 x 3 window around `centre`, cut at the borders."""
    y, x = centre
    return slice(max(y - 1, 0), y + 2), slice(max(x - 1, 0), x + 2)


def flood_connects(image: np.ndarray, markers: Sequence[tuple[int, int]], link: float) -> bool:
    """The flood-fill classifier: True when some group of drawn pixels (>= DRAWN), pixels at most `link` apart
    joined, has a pixel within 1 px (3 x 3) of both marker centres."""
    lab = components(image >= DRAWN, link)
    sets = [set(lab[_near(image.shape, m)].ravel().tolist()) - {-1} for m in markers]
    return bool(sets[0] & sets[1])


def marker_snake(sample: Sample, k: int) -> int:
    """The snake marker k sits on: the one brightest at the marker's centre pixel (-1 when none is drawn there)."""
    values = sample.snakes[:, sample.markers[k][0], sample.markers[k][1]]
    return int(values.argmax()) if values.max() > 0 else -1


# ---------------------------------------------------------------- the statistics
def _masks(sample: Sample) -> np.ndarray:
    """Each snake's drawn pixels."""
    return sample.snakes >= DRAWN


def _any_pair(sample: Sample, test: Callable[[np.ndarray, np.ndarray], bool]) -> list[float]:
    m = _masks(sample)
    return [float(any(test(m[i], m[j]) for i in range(len(m)) for j in range(i + 1, len(m))))]


def _markers_agree(sample: Sample) -> list[float]:
    same = marker_snake(sample, 0) == marker_snake(sample, 1) != -1
    return [float(same == bool(sample.label))]


def _flood(sample: Sample) -> list[float]:
    link = FLOOD_LINK.get(sample.image.shape[0], 3.0)
    return [float(flood_connects(sample.image, sample.markers, link) == bool(sample.label))]


def _distractor_share(k: int) -> Callable[[Sample], list[float]]:
    return lambda s: [float(s.n_distractors == k)]


@dataclass(frozen=True)
class Stat:
    """One statistic: `fn` gives its values for one image (a `Sample`, or a bare (H, W) uint8 image when
    `image_only`); the statistic is their mean over the sample. `proportion`: the values are 0/1."""

    key: str
    label: str
    fn: Callable
    proportion: bool = False
    image_only: bool = False


STATS: tuple[Stat, ...] = (
    Stat("touch_any", "two snakes touch", lambda s: _any_pair(s, touch), proportion=True),
    Stat(
        "touch_targets",
        "the two targets touch",
        lambda s: [float(touch(*_masks(s)[:2]))],
        proportion=True,
    ),
    Stat("overlap_any", "two snakes overlap", lambda s: _any_pair(s, overlap), proportion=True),
    Stat("target_gap", "gap between the targets (px)", lambda s: [gap(*_masks(s)[:2])]),
    Stat("distractors", "distractors placed", lambda s: [float(s.n_distractors)]),
    *(Stat(f"distractors_{k}", f"{k} distractors placed", _distractor_share(k), proportion=True) for k in range(4)),
    Stat(
        "marker_peak",
        "marker peak brightness",
        lambda s: [float(s.image[y, x]) for y, x in s.markers],
    ),
    Stat("target_peak", "target peak brightness", lambda s: [float(s.snakes[k].max()) for k in range(2)]),
    Stat("pixels_gt0", "pixels > 0", lambda im: [float((im > 0).mean())], image_only=True),
    Stat("pixels_drawn", "pixels >= 64", lambda im: [float((im >= DRAWN).mean())], image_only=True),
    Stat("pixels_255", "pixels = 255", lambda im: [float((im == 255).mean())], image_only=True),
    Stat("components", "components (pixels > 0)", lambda im: [float(n_components(im))], image_only=True),
    Stat(
        "markers_agree",
        "markers' snakes agree with label",
        _markers_agree,
        proportion=True,
    ),
    Stat("flood_fill", "flood fill as classifier", _flood, proportion=True),
)
IMAGE_ONLY = tuple(s.key for s in STATS if s.image_only)
BY_KEY = {s.key: s for s in STATS}


def estimate(values: Sequence[float], proportion: bool = False) -> Estimate:
    """Mean with its standard error: sqrt(p (1 - p) / n) for a proportion, sd / sqrt(n) for a mean."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(v.mean())
    sd = float(v.std(ddof=1)) if n > 1 else 0.0
    se = math.sqrt(mean * (1 - mean) / n) if proportion else sd / math.sqrt(n)
    return Estimate(mean, se, sd, n)


def values(samples: Sequence[Sample | np.ndarray], keys: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Each statistic's values over `samples` (`Sample`s, or bare images, which allow only the image-only
    statistics); `keys` default to all that the input allows."""
    traced = all(isinstance(s, Sample) for s in samples)
    keys = list(keys) if keys is not None else [s.key for s in STATS if traced or s.image_only]
    out = {}
    for key in keys:
        stat = BY_KEY[key]
        if not stat.image_only and not traced:
            raise ValueError(f"statistic {key!r} needs traced samples (Sample), not bare images")
        out[key] = [v for s in samples for v in stat.fn(_image(s) if stat.image_only else s)]
    return out


def summarise(vals: dict[str, list[float]]) -> dict[str, Estimate]:
    """Each statistic's estimate from its values (as `values` gives them)."""
    return {key: estimate(v, BY_KEY[key].proportion) for key, v in vals.items()}


def measure(samples: Sequence[Sample | np.ndarray], keys: Sequence[str] | None = None) -> dict[str, Estimate]:
    """The statistics `keys` over `samples` (see `values`)."""
    return summarise(values(samples, keys))


def _image(s: Sample | np.ndarray) -> np.ndarray:
    return s.image if isinstance(s, Sample) else s


# ---------------------------------------------------------------- can the two sources be told apart?
def _features(images: Sequence[np.ndarray], side: int) -> np.ndarray:
    """Images block-averaged to at most side x side pixels, flattened, in [0, 1]."""
    stack = np.stack([np.asarray(im, np.float64) for im in images]) / 255.0
    n, h, w = stack.shape
    f = max(1, h // side)
    return stack[:, : h // f * f, : w // f * f].reshape(n, h // f, f, w // f, f).mean((2, 4)).reshape(n, -1)


def distinguishability(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], seed: int = 0, side: int = 32, steps: int = 300
) -> Estimate:
    """How well a logistic regression on pixels tells images `a` from images `b`: its accuracy on a held-out half
    (equal numbers of each; trained on the other half by gradient descent on the L2-penalised log loss). 0.5 means
    the pixels give the sources away no better than chance."""
    m = min(len(a), len(b))
    if m < 4:
        raise ValueError(f"need at least 4 images of each source, got {len(a)} and {len(b)}")
    rng = np.random.default_rng(seed)
    ia, ib = rng.permutation(len(a))[:m], rng.permutation(len(b))[:m]
    x = _features([a[i] for i in ia] + [b[i] for i in ib], side)
    y = np.r_[np.zeros(m), np.ones(m)]
    half = np.r_[rng.permutation(m) < m // 2, rng.permutation(m) < m // 2]  # balanced train / test split
    mu, sd = x[half].mean(0), x[half].std(0) + 1e-6
    z = (x - mu) / sd
    w, bias, lr, lam = np.zeros(z.shape[1]), 0.0, 0.5, 1e-2
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z[half] @ w + bias)))
        g = p - y[half]
        w -= lr * (z[half].T @ g / half.sum() + lam * w)
        bias -= lr * g.mean()
    correct = ((z[~half] @ w + bias > 0) == (y[~half] == 1)).astype(float)
    return estimate(correct, proportion=True)
