"""The two target snakes (`snakes2.two_snakes`, `initialize_two_seeds`) and the distractors (`snakes.make_many_snakes`,
`make_snake`, `seed_snake`), as the original places them, batched.

Target pair: the original grows a pair and starts again from scratch whenever any paddle fails (at 128 px a few
hundred pairs per image, where it spends ~98% of its time). Here `batch` pairs are grown at once, one row each, with
their own random numbers, and the first row in order that succeeds is kept: the same distribution as trying them one
after another. Distractor d: its five tries all start from the same mask (a failed try changes nothing), so they are
grown at once too, and the first that succeeds is kept. A distractor seed is drawn uniformly among the free tails by
rejection (random pixels until one is free, the whole free set counted when 16 miss): the same distribution as the
original's uniform draw from the list of all free pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks._pathfinder.grow import Canvases, Heads, extend
from tasks._pathfinder.settings import DISTRACTOR_TRIES, SEED_TRIES
from tasks._pathfinder.tables import Tables

PROBES = 16  # random tails tested at once for a distractor seed before the free set is counted
MIN_FREE = 0.01  # make_many_snakes(stop_with_availability=0.01): no seed once < 1% of the pixels are free
MAX_PAIRS = 2_000_000  # target pairs tried before giving up (the original tries forever)


@dataclass
class Snake:
    """A placed snake: its paddles (stamp ids and flat canvas starts) in order from the tail."""

    stamps: np.ndarray
    starts: np.ndarray


@dataclass
class Pair:
    """The two target snakes, their tails (y, x) and their last heads (y, x), and the pairs tried."""

    snakes: tuple[Snake, Snake]
    tails: np.ndarray  # (2, 2)
    heads: np.ndarray  # (2, 2)
    tried: int


def _first_stop(stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether some trial stopped the retry loop, and which trial first did."""
    return stop.any(1), stop.argmax(1)


def _seed_ends(t: Tables, o: np.ndarray, y: np.ndarray, x: np.ndarray):
    """Head and pivot of seed paddles of orientation o at tails (y, x), and whether either leaves the image."""
    hy, hx = np.ceil(y + t.head_dy[o]).astype(np.int64), np.ceil(x + t.head_dx[o]).astype(np.int64)
    py, px = np.ceil(hy + t.piv_dy[o]).astype(np.int64), np.ceil(hx + t.piv_dx[o]).astype(np.int64)
    n = t.size
    out = (hy < 0) | (hy >= n) | (hx < 0) | (hx >= n) | (py < 0) | (py >= n) | (px < 0) | (px >= n)
    return py, px, out


def _pick(rows: np.ndarray, which: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    return [a[rows, which] for a in arrays]


def _target_seeds(t: Tables, k: int, rng: np.random.Generator):
    """initialize_two_seeds for k pairs: tail 1 uniform among the tails whose paddle (its dilation struct) stays
    2 * seed_distance inside the border, tail 2 seed_distance from it in a whole-degree direction, never checked
    against anything but its head and pivot lying in the image. Returns alive (k,), the two heads and tails."""
    spec, n = t.spec, t.size
    band = 2 * spec.seed_distance
    rows = np.arange(k)
    o1 = rng.integers(-180, 180, (k, SEED_TRIES)) + 180
    box = t.foot_box[o1]
    ylo, yhi = band - box[..., 0], n - 1 - band - box[..., 1]
    xlo, xhi = band - box[..., 2], n - 1 - band - box[..., 3]
    ny, nx = np.maximum(yhi - ylo + 1, 0), np.maximum(xhi - xlo + 1, 0)
    u = rng.random((k, SEED_TRIES, 2))
    y1 = ylo + (u[..., 0] * ny).astype(np.int64)
    x1 = xlo + (u[..., 1] * nx).astype(np.int64)
    py1, px1, out1 = _seed_ends(t, o1, y1, x1)
    empty = (ny * nx == 0) | t.seed_dead[o1]  # no free tail: the try fails at once
    stopped, first = _first_stop(empty | ~out1)
    alive = stopped & ~empty[rows, first]
    o1, y1, x1, py1, px1 = _pick(rows, first, o1, y1, x1, py1, px1)

    o2 = rng.integers(-180, 180, (k, SEED_TRIES)) + 180
    phi = rng.integers(0, 360, (k, SEED_TRIES))
    y2 = np.round(y1[:, None] + t.seed_dy[phi]).astype(np.int64)
    x2 = np.round(x1[:, None] + t.seed_dx[phi]).astype(np.int64)
    py2, px2, out2 = _seed_ends(t, o2, y2, x2)
    stopped, first = _first_stop(~out2)
    alive &= stopped
    o2, y2, x2, py2, px2 = _pick(rows, first, o2, y2, x2, py2, px2)
    heads = tuple(
        Heads(o.copy(), t.flat(y, x), py, px) for o, y, x, py, px in ((o1, y1, x1, py1, px1), (o2, y2, x2, py2, px2))
    )
    return alive, heads, (y1, x1, y2, x2)


def target_pair(t: Tables, contour: int, rng: np.random.Generator, batch: int) -> Pair:
    """two_snakes, retried until a pair succeeds: `batch` pairs at a time, the first success in order kept."""
    tried = 0
    while tried < MAX_PAIRS:
        tried += batch
        alive, heads, tails = _target_seeds(t, batch, rng)
        rows = np.flatnonzero(alive)
        if rows.size == 0:
            continue
        cv = Canvases(t, batch, "targets")
        cv.init(rows, t.base_mask)
        # every row's heads, step by step: a dead row's entries go stale, but only a row alive to the end is read
        stamps = np.empty((contour, 2, batch), np.int64)
        starts = np.empty((contour, 2, batch), np.int64)
        for s in (0, 1):
            stamps[0, s], starts[0, s] = heads[s].stamp, heads[s].start
        for step in range(1, contour):
            for s in (0, 1):
                if rows.size == 0:
                    break
                rows = rows[extend(t, cv, heads[s], rows, rng)]
                stamps[step, s], starts[step, s] = heads[s].stamp, heads[s].start
        if rows.size:
            a = rows[0]
            ends = np.array([np.divmod(heads[s].start[a], t.width) for s in (0, 1)]) - t.pad
            snakes = tuple(Snake(stamps[:, s, a].copy(), starts[:, s, a].copy()) for s in (0, 1))
            y1, x1, y2, x2 = (c[a] for c in tails)
            return Pair(snakes, np.array([[y1, x1], [y2, x2]]), ends, tried - batch + int(a) + 1)
    raise RuntimeError(f"no pair of target snakes in {tried} tries ({t.size} px, margin {t.margin})")


def _distractor_seeds(t: Tables, lined: np.ndarray, k: int, rng: np.random.Generator):
    """seed_snake for k tries: per trial an orientation, a tail uniform among the free ones (the paddle's dilation
    struct clear of mask > 0.3 and of the image's outermost pixels); no free tail ends the try, a head or pivot
    outside the image draws again (3 trials)."""
    n = t.size
    o = rng.integers(-180, 180, (k, SEED_TRIES)) + 180
    q = rng.integers(0, n * n, (k, SEED_TRIES, PROBES))
    free = (lined[t.pixel[q][..., None] + t.foot[o][:, :, None, :]] <= t.free_level).all(-1)
    hit, live = free.any(-1), ~t.seed_dead[o]
    found = hit & live
    tail = q[np.arange(k)[:, None], np.arange(SEED_TRIES), free.argmax(-1)]
    missed = ~hit & live
    if missed.any():  # every probe taken: count the free set
        for i, j in zip(*np.nonzero(missed)):
            ok = np.flatnonzero((lined[t.pixel[:, None] + t.foot[o[i, j]]] <= t.free_level).all(1))
            if ok.size:
                found[i, j], tail[i, j] = True, ok[rng.integers(ok.size)]
    y, x = np.divmod(tail, n)
    py, px, out = _seed_ends(t, o, y, x)
    stopped, first = _first_stop(~found | ~out)
    rows = np.arange(k)
    alive = stopped & found[rows, first]
    o, y, x, py, px = _pick(rows, first, o, y, x, py, px)
    return alive, Heads(o.copy(), t.flat(y, x), py, px)


def distractors(t: Tables, image: Canvases, count: int, length: int, rng: np.random.Generator) -> list[Snake]:
    """make_many_snakes: `count` distractors of `length` paddles, each given five tries, grown against the mask
    in `image` (row 0), which takes in every snake placed. Returns the snakes placed."""
    n, pad, w = t.size, t.pad, t.width
    ring = np.zeros((w, w), np.uint8)
    ring[pad : pad + n, pad : pad + n] = 255
    ring[pad + 1 : pad + n - 1, pad + 1 : pad + n - 1] = 0
    ring = ring.reshape(-1)
    placed: list[Snake] = []
    for _ in range(count):
        mask = image.mask[0]
        free = np.count_nonzero(mask.reshape(w, w)[pad : pad + n, pad : pad + n] <= t.free_level)
        if free / (n * n) < MIN_FREE:
            continue
        alive, heads = _distractor_seeds(t, np.maximum(mask, ring), DISTRACTOR_TRIES, rng)
        rows = np.flatnonzero(alive)
        if rows.size == 0:
            continue
        cv = Canvases(t, DISTRACTOR_TRIES, "tries")
        cv.init(rows, mask)
        stamps = np.empty((length, DISTRACTOR_TRIES), np.int64)  # as in target_pair: only a whole snake is read
        starts = np.empty((length, DISTRACTOR_TRIES), np.int64)
        stamps[0], starts[0] = heads.stamp, heads.start
        for step in range(1, length):
            if rows.size == 0:
                break
            rows = rows[extend(t, cv, heads, rows, rng)]
            stamps[step], starts[step] = heads.stamp, heads.start
        if rows.size:
            a = rows[:1]
            image.init(np.array([0]), cv.mask[a[0]])
            image.paste(t, np.array([0]), heads.stamp[a], heads.start[a])
            placed.append(Snake(stamps[:, a[0]].copy(), starts[:, a[0]].copy()))
    return placed
