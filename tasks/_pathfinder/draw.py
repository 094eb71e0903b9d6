"""The Pathfinder image generator: Linsley et al.'s snake drawing (github.com/drewlinsley/pathfinder, `snakes2.py`),
rewritten around precomputed stamps so that it runs 15-180x faster than the original (docs/pathfinder.md).

An image holds two target snakes of `contour_length` paddles whose tails sit `seed_distance` apart, short distractor
snakes, and two circle markers. Label 1: the markers sit on both ends of one target snake; label 0: on the tail of one
and the head of the other. Each snake grows paddle by paddle: the next head is drawn among the pixels on a circle
around the pivot, weighted by a continuity prior (`cos(min(continuity * turn, 90 deg))^2`) and by whether the pixel
is free; up to three draws are tried against collisions, and a snake that dead-ends fails. Like the original, a
failed pair of target snakes is thrown away and started again (rejection sampling: at 128 px about 300 pairs per
image, where the original spends 98% of its time). Here K pairs are grown at once as numpy arrays, one row per
attempt; a new paddle is checked only against the earlier paddles of its own attempt that are near it, in their
precomputed keep-out bitmaps (nothing is written per attempt), and the first successful attempt in order is kept, so
the result is the same as trying them one after another. Distractors are grown against a shared occupancy map.

Differences from the original, all deliberate: paddles keep a clearance of more than the link distance D (about two
margins, see geometry.py) from every paddle that is not their neighbour on the same snake and from the markers (the
original allowed slightly closer approaches), so that "connected" is a property of the drawn pixels; a transition
whose dash gap would exceed D gets probability 0 (1-6% of the continuity mass); markers may not touch the other
target snake; candidates whose paddle would cross the padding band get weight 0 instead of failing a draw; the tries
of all distractor snakes are grown at once and accepted in order when they clear the distractors before them. Every
image is deterministic in (resolution, difficulty, split, index, seed): image i of a split is drawn alone from its
own random stream, the same every time, whatever the number of worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks._pathfinder.geometry import (
    DIFFICULTIES,
    DISTRACTOR,
    N_SEED,
    SPECS,
    TARGET,
    Geometry,
    Spec,
    geometry,
    to_u8,
)
from tasks._pathfinder.stats import Sample

GENERATOR_VERSION = 1  # part of every random stream and cache name: bump it when the drawing changes
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
TRIALS = 3  # draws per paddle before a snake fails (the original's max_paddle_retrial = 2, plus the first)
DISTRACTOR_ATTEMPTS = 5  # tries per distractor snake (max_distractor_contour_retrial = 4, plus the first)
SEED_PROBES = 32  # random tail positions tried at once for a distractor's seed paddle
# attempts per batch for the target pair, by (resolution, margin): about the inverse of one attempt's success rate
# (0.26%, 0.14%, 2.6%, 0.36%, 14%), so that numpy's per-call cost is spread over many attempts. The batches consume
# the random stream, so these numbers are part of what an image is: changing them needs a new GENERATOR_VERSION.
BATCH = {(32, 1): 1024, (64, 1): 1024, (128, 2): 64, (128, 3): 256, (256, 3): 16}
MAX_TARGET_ATTEMPTS = 200_000


@dataclass
class Drawing:
    """One generated image and what the tests need to check it."""

    image: np.ndarray  # (H, W) uint8
    label: int
    margin: int
    link: float  # dashes of one snake are at most this far apart; distinct objects are farther
    markers: tuple[tuple[int, int], tuple[int, int]]  # (y, x) of the two marker centres
    attempts: int  # target-pair attempts drawn, whole batches counted (for speed studies)


def check_settings(resolution: int, difficulty: int) -> Spec:
    """The spec for `resolution`, or a clear error for an unknown resolution or difficulty."""
    if resolution not in SPECS:
        raise ValueError(f"no Pathfinder settings for {resolution} px; choose one of {sorted(SPECS)}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty (contour length) must be one of {DIFFICULTIES}, got {difficulty!r}")
    return SPECS[resolution]


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
    """Labels of images start..stop-1: exactly one of each pair (2p, 2p+1) is positive, which one by a hashed coin.

    Balanced in every prefix of even length, a function of the index alone (no need to know the split's size), and
    not predictable from the index's parity.
    """
    if split not in SPLIT_CODES:
        raise ValueError(f"split must be one of {list(SPLIT_CODES)}, got {split!r}")
    key = np.uint64(0)
    for part in (GENERATOR_VERSION, seed, resolution, difficulty, SPLIT_CODES[split]):
        key = _splitmix64(np.array([key ^ np.uint64(part)], np.uint64))[0]
    with np.errstate(over="ignore"):
        idx = np.arange(start, stop, dtype=np.uint64)
        coin = _splitmix64((idx >> np.uint64(1)) ^ key) >> np.uint64(63)
    return (coin ^ (idx & np.uint64(1))).astype(np.int64)


def draw(
    resolution: int, difficulty: int, split: str, index: int, seed: int = 0, trace: bool = False
) -> Drawing | Sample:
    """Draw image `index` of a split (deterministic); with `trace`, as a `stats.Sample` (each snake's own render)."""
    spec = check_settings(resolution, difficulty)
    label = int(labels_for(resolution, difficulty, split, seed, index, index + 1)[0])
    rng = image_rng(resolution, difficulty, split, index, seed)
    return draw_with(spec, difficulty, rng, label, trace=trace)


def draw_images(resolution: int, difficulty: int, split: str, start: int, stop: int, seed: int = 0) -> np.ndarray:
    """Images start..stop-1 of a split as one (n, H, W) uint8 array (worker processes call this)."""
    out = np.empty((stop - start, resolution, resolution), np.uint8)
    for i in range(start, stop):
        out[i - start] = draw(resolution, difficulty, split, i, seed).image
    return out


def draw_with(
    spec: Spec, contour_length: int, rng: np.random.Generator, label: int, trace: bool = False
) -> Drawing | Sample:
    """Draw one image from `rng` with the given label (with `trace`, as a `stats.Sample`)."""
    margin = spec.margins[int(rng.integers(len(spec.margins)))]
    g = geometry(spec.resolution, margin)
    origin = int(rng.integers(2))  # which target snake carries the marker at its tail
    paddles, markers, attempts = _target_pair(g, contour_length, rng, label, origin)

    canvas = np.zeros(g.width * g.width, bool)
    for stamp, anchor in paddles:
        canvas[anchor + g.keep[TARGET][stamp]] = True
    for anchor in markers:
        canvas[anchor + g.marker_keep] = True
    distractors = _distractors(
        g, canvas, spec.num_distractors(contour_length), spec.distractor_length(contour_length), rng
    )

    image = _render(g, paddles, distractors, markers)
    centres = tuple(divmod(int(a), g.width) for a in markers)
    centres = tuple((y - g.pad, x - g.pad) for y, x in centres)
    if trace:
        return _traced(g, paddles, distractors, spec.distractor_length(contour_length), image, label, centres)
    return Drawing(image, label, margin, g.link, centres, attempts)  # type: ignore[arg-type]


def _traced(g: Geometry, paddles, distractors, per: int, image: np.ndarray, label: int, centres) -> Sample:
    """The image as a `Sample`: each snake rendered alone (targets: the first two runs of `contour` paddles)."""
    half = len(paddles) // 2
    snakes = [_render(g, paddles[:half], [], []), _render(g, paddles[half:], [], [])]
    snakes += [_render(g, [], distractors[k : k + per], []) for k in range(0, len(distractors), per)]
    return Sample(image, label, np.stack(snakes), centres, len(distractors) // per)


def _render(g: Geometry, targets, distractors, markers) -> np.ndarray:
    spec = g.spec
    canvas = np.zeros((g.width, g.width), np.float32)

    def stamp(anchor: int, y0: int, x0: int, ink: np.ndarray, contrast: float) -> None:
        ay, ax = divmod(int(anchor), g.width)
        window = canvas[ay + y0 : ay + y0 + ink.shape[0], ax + x0 : ax + x0 + ink.shape[1]]
        np.maximum(window, ink * np.float32(contrast), out=window)

    for s, a in targets:
        stamp(a, *g.ink[s], spec.target_contrast)
    for s, a in distractors:
        stamp(a, *g.ink[s], spec.distractor_contrast)
    for a in markers:
        stamp(a, *g.marker_ink, 1.0)
    return to_u8(canvas[g.pad : g.pad + g.size, g.pad : g.pad + g.size])


def _flat(g: Geometry, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (y + g.pad) * g.width + (x + g.pad)


def _inside(g: Geometry, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (y >= 0) & (y < g.size) & (x >= 0) & (x < g.size)


def _in_frame(g: Geometry, cls: int, stamp: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Whether the core of `stamp` anchored at (y, x) stays inside the image, clear of the padding band."""
    r = g.frame_range[cls][stamp]
    return (y >= r[..., 0]) & (y <= r[..., 1]) & (x >= r[..., 2]) & (x <= r[..., 3])


def _local_base(g: Geometry, stamp: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """Index into the local keep-out bitmaps of the point (dy, dx) from the anchor of paddle `stamp`; add
    `cand_local` or `core_local` offsets to it (they stay in the padded bitmap when |dy|, |dx| <= g.near)."""
    return (stamp * g.local_w + dy + g.local_r) * g.local_w + dx + g.local_r


def _target_pair(g: Geometry, contour: int, rng: np.random.Generator, label: int, origin: int):
    """Grow pairs of target snakes K at a time until one succeeds and its markers are clear of the other snake."""
    attempts = 0
    k = BATCH[g.size, g.margin]
    while attempts < MAX_TARGET_ATTEMPTS:
        attempts += k
        alive, tails, heads = _target_seeds(g, k, rng)
        alive, stamps, anchors, ends = _grow(g, None, alive, heads, contour, TARGET, rng)
        for a in np.flatnonzero(alive):
            snakes = [list(zip(stamps[a, s].tolist(), anchors[a, s].tolist())) for s in range(2)]
            terminal = origin if label == 1 else 1 - origin
            marks = [(origin, int(tails[a, origin])), (terminal, int(ends[a, terminal]))]
            if _markers_clear(g, snakes, marks):
                return snakes[0] + snakes[1], [m[1] for m in marks], attempts
    raise RuntimeError(f"no pair of target snakes found in {attempts} attempts ({g.size} px, margin {g.margin})")


def _markers_clear(g: Geometry, snakes, marks) -> bool:
    """Each marker stays more than the link distance from the other target snake (and from the other marker when
    the markers sit on different snakes), so label-0 images never connect the markers."""
    for s, anchor in marks:
        other = np.zeros(g.width * g.width, bool)
        for stamp, a in snakes[1 - s]:
            other[a + g.keep[TARGET][stamp]] = True
        if other[anchor + g.marker_core].any():
            return False
    (s0, a0), (s1, a1) = marks
    if s0 != s1:
        mine = np.zeros(g.width * g.width, bool)
        mine[a0 + g.marker_keep] = True
        if mine[a1 + g.marker_core].any():
            return False
    return True


@dataclass
class _Heads:
    """Where each snake of each attempt stands: its newest paddle and the pivot its next paddle turns around."""

    stamp: np.ndarray  # (K, S) stamp id of the newest paddle
    ay: np.ndarray  # (K, S) its anchor
    ax: np.ndarray
    py: np.ndarray  # (K, S) pivot of the next paddle
    px: np.ndarray


def _target_seeds(g: Geometry, k: int, rng: np.random.Generator):
    """Seed paddles of k candidate pairs: the first tail inside a box 2 * seed_distance from the border, the second
    seed_distance away from it in a random direction (three tries to keep its head and pivot in the image).

    Returns alive (k,), the flat tails (k, 2) and the snakes' heads.
    """
    spec, size = g.spec, g.size
    band = 2 * spec.seed_distance
    id1 = rng.integers(0, N_SEED, k)
    box = g.seed_box[id1]
    ylo, yhi = band - box[:, 0], size - 1 - band - box[:, 1]
    xlo, xhi = band - box[:, 2], size - 1 - band - box[:, 3]
    alive = (ylo <= yhi) & (xlo <= xhi)
    u = rng.random((k, 2))
    y1 = ylo + np.floor(u[:, 0] * np.maximum(yhi - ylo + 1, 1)).astype(np.int64)
    x1 = xlo + np.floor(u[:, 1] * np.maximum(xhi - xlo + 1, 1)).astype(np.int64)

    id2 = rng.integers(0, N_SEED, (k, TRIALS))
    phi = rng.integers(0, 360, (k, TRIALS)) * (np.pi / 180)
    y2 = np.rint(y1[:, None] + spec.seed_distance * np.sin(phi)).astype(np.int64)
    x2 = np.rint(x1[:, None] + spec.seed_distance * np.cos(phi)).astype(np.int64)
    ok = _inside(g, y2 + g.seed_head[id2, 0], x2 + g.seed_head[id2, 1])
    ok &= _inside(g, y2 + g.seed_pivot[id2, 0], x2 + g.seed_pivot[id2, 1])
    pick = ok.argmax(1)
    rows = np.arange(k)
    alive &= ok.any(1)
    id2, y2, x2 = id2[rows, pick], y2[rows, pick], x2[rows, pick]
    alive &= _in_frame(g, TARGET, id1, y1, x1) & _in_frame(g, TARGET, id2, y2, x2)
    # the second seed must clear the first (the original did not check; the clearance rule needs it)
    near = (np.abs(y2 - y1) <= g.near) & (np.abs(x2 - x1) <= g.near)
    base = _local_base(g, id1, np.where(near, y2 - y1, 0), np.where(near, x2 - x1, 0))
    alive &= ~(g.local_keep[TARGET][base[:, None] + g.core_local[TARGET][id2]].any(1) & near)
    ids = np.stack([id1, id2], 1)
    ys, xs = np.stack([y1, y2], 1), np.stack([x1, x2], 1)
    heads = _Heads(ids, ys.copy(), xs.copy(), ys + g.seed_next[ids, 0], xs + g.seed_next[ids, 1])
    return alive, _flat(g, ys, xs), heads


def _grow(g: Geometry, canvas, alive: np.ndarray, heads: _Heads, n_paddles: int, cls: int, rng: np.random.Generator):
    """Extend S snakes in each of K attempts to n_paddles paddles, in turn as the original does.

    A new paddle may not touch the keep-out of `canvas` (a flat map of what is already drawn, shared by the attempts;
    None when empty) nor that of any earlier paddle of its attempt except its own predecessor. The latter are found
    by distance and looked up in their local keep-out bitmaps, so nothing is written per attempt. Returns alive,
    stamps and flat anchors (K, S, n) and the flat position of each snake's head end (K, S).
    """
    k, s_count = heads.stamp.shape
    n_total = s_count * n_paddles
    hist_st = np.zeros((k, n_total), np.int64)  # paddles in the order they were placed
    hist_y = np.zeros((k, n_total), np.int64)
    hist_x = np.zeros((k, n_total), np.int64)
    hist_st[:, :s_count], hist_y[:, :s_count], hist_x[:, :s_count] = heads.stamp, heads.ay, heads.ax
    hist_cy = hist_y + g.centre[hist_st, 0]  # paddle centres (valid where placed)
    hist_cx = hist_x + g.centre[hist_st, 1]
    end_y, end_x = heads.ay.copy(), heads.ax.copy()
    step_idx, step_w, pivot_ok, core, core_local, local_keep = (
        g.step_idx[cls],
        g.step_w[cls],
        g.pivot_ok[cls],
        g.core[cls],
        g.core_local[cls],
        g.local_keep[cls],
    )
    cand_dy, cand_dx = g.cand_off[:, 0], g.cand_off[:, 1]
    cand_flat = cand_dy * g.width + cand_dx
    for step in range(1, n_paddles):
        for s in range(s_count):
            a = np.flatnonzero(alive)
            if a.size == 0:
                break
            n_hist = step * s_count + s
            py, px = heads.py[a, s], heads.px[a, s]
            prev = heads.stamp[a, s]
            pyc, pxc = py[:, None], px[:, None]
            anchor = _flat(g, py, px)
            cand = step_idx[prev]  # (A, W): the candidates this turn can reach
            ok = pivot_ok[anchor[:, None], cand]
            if canvas is not None:
                ok &= ~canvas[anchor[:, None] + cand_flat[cand]]
            # earlier paddles of the attempt near enough to matter (never the snake's own newest one)
            cy = pyc - hist_cy[a, :n_hist]
            cx = pxc - hist_cx[a, :n_hist]
            near = cy * cy + cx * cx <= g.near2
            near[:, n_hist - s_count] = False
            rows, cols = np.nonzero(near)
            local = starts = hit_rows = None
            if rows.size:
                olds = a[rows]
                dy = py[rows] - hist_y[olds, cols]
                dx = px[rows] - hist_x[olds, cols]
                local = _local_base(g, hist_st[olds, cols], dy, dx)[:, None]
                starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
                hit_rows = rows[starts]
                blocked = local_keep[local + g.cand_local[cand[rows]]]
                ok[hit_rows] &= ~np.logical_or.reduceat(blocked, starts, axis=0)
            live, i = _sample(step_w[prev] * ok, rng)
            j = np.take_along_axis(cand, i, 1)
            new = N_SEED + j
            hit = _collisions(canvas, anchor, core, local_keep, core_local, new, rows, local, starts, hit_rows)
            placed = live & ~hit.all(1)
            alive[a[~placed]] = False
            a, py, px = a[placed], py[placed], px[placed]
            j = j[placed][np.arange(a.size), (~hit[placed]).argmax(1)]
            new = N_SEED + j
            hist_st[a, n_hist], hist_y[a, n_hist], hist_x[a, n_hist] = new, py, px
            hist_cy[a, n_hist], hist_cx[a, n_hist] = py + g.centre[new, 0], px + g.centre[new, 1]
            heads.stamp[a, s] = new
            end_y[a, s] = py + cand_dy[j]
            end_x[a, s] = px + cand_dx[j]
            heads.py[a, s] = py + g.cand_next[j, 0]
            heads.px[a, s] = px + g.cand_next[j, 1]
    order = np.arange(n_total).reshape(n_paddles, s_count).T  # history column of paddle i of snake s
    stamps = hist_st[:, order]
    anchors = _flat(g, hist_y[:, order], hist_x[:, order])
    return alive, stamps, anchors, _flat(g, end_y, end_x)


def _sample(weights: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """TRIALS draws per row of `weights` (A, W), each column with probability proportional to its weight.

    Returns which rows are live (total weight >= 1e-4, the original's dead-end test) and the drawn columns (A, TRIALS).
    """
    n, width = weights.shape
    row_shift = np.arange(n)[:, None]  # turns per-row sorted cmfs into one sorted array for searchsorted
    cmf = np.cumsum(weights, 1, dtype=np.float64)
    total = cmf[:, -1]
    live = total >= 1e-4
    cmf /= np.where(live, total, 1.0)[:, None]
    cmf += row_shift
    u = rng.random((n, TRIALS)) + row_shift
    i = np.searchsorted(cmf.ravel(), u.ravel(), side="right").reshape(n, TRIALS)
    return live, np.minimum(i - row_shift * width, width - 1)


def _collisions(canvas, anchor, core, local_keep, core_local, new, rows, local, starts, hit_rows) -> np.ndarray:
    """(A, TRIALS): whether each trial's paddle touches the canvas or an earlier paddle of its attempt."""
    hit = np.zeros(new.shape, bool) if canvas is None else canvas[anchor[:, None, None] + core[new]].any(-1)
    if rows.size:
        touch = local_keep[local[:, :, None] + core_local[new[rows]]].any(-1)
        hit[hit_rows] |= np.logical_or.reduceat(touch, starts, axis=0)
    return hit


def _distractor_seeds(g: Geometry, canvas: np.ndarray, k: int, rng: np.random.Generator):
    """Seed paddles for k distractor attempts: up to TRIALS orientations, each with SEED_PROBES random tails; the
    first tail whose paddle fits (inside the frame, clear of the canvas) is taken, as a uniform draw among the free
    positions would."""
    ids = rng.integers(0, N_SEED, (k, TRIALS))
    ys = rng.integers(0, g.size, (k, TRIALS, SEED_PROBES))
    xs = rng.integers(0, g.size, (k, TRIALS, SEED_PROBES))
    idb = ids[:, :, None]
    ok = _inside(g, ys + g.seed_head[idb, 0], xs + g.seed_head[idb, 1])
    ok &= _inside(g, ys + g.seed_pivot[idb, 0], xs + g.seed_pivot[idb, 1])
    ok &= _in_frame(g, DISTRACTOR, idb, ys, xs)
    tails = _flat(g, ys, xs)
    ok &= ~canvas[tails[..., None] + g.core[DISTRACTOR][ids][:, :, None, :]].any(-1)
    flat_ok = ok.reshape(k, -1)
    pick = flat_ok.argmax(1)
    rows = np.arange(k)
    id1 = np.repeat(ids, SEED_PROBES, 1)[rows, pick]
    y1, x1 = ys.reshape(k, -1)[rows, pick], xs.reshape(k, -1)[rows, pick]
    heads = _Heads(
        id1[:, None].copy(),
        y1[:, None].copy(),
        x1[:, None].copy(),
        (y1 + g.seed_next[id1, 0])[:, None],
        (x1 + g.seed_next[id1, 1])[:, None],
    )
    return flat_ok.any(1), heads


def _distractors(g: Geometry, canvas: np.ndarray, count: int, n_paddles: int, rng: np.random.Generator):
    """`count` distractor snakes, each given DISTRACTOR_ATTEMPTS tries like the original (a snake none of whose tries
    succeeds is left out). All tries are grown at once against the canvas (targets and markers); then, snake by
    snake, the first successful try that also clears the distractors accepted before it is kept. When every
    successful try hits an earlier distractor, the snake is grown again against the full canvas. Accepted snakes
    are added to `canvas`. Returns their (stamp, anchor) paddles."""
    if count == 0:
        return []
    per = DISTRACTOR_ATTEMPTS
    alive, heads = _distractor_seeds(g, canvas, count * per, rng)
    alive, stamps, anchors, _ = _grow(g, canvas, alive, heads, n_paddles, DISTRACTOR, rng)
    core, keep = g.core[DISTRACTOR], g.keep[DISTRACTOR]
    out: list[tuple[int, int]] = []
    for d in range(count):
        tries = [a for a in range(d * per, (d + 1) * per) if alive[a]]
        if not tries:
            continue
        for a in tries:
            st, an = stamps[a, 0], anchors[a, 0]
            if not canvas[an[:, None] + core[st]].any():
                break
        else:
            again, heads = _distractor_seeds(g, canvas, per, rng)
            again, st_all, an_all, _ = _grow(g, canvas, again, heads, n_paddles, DISTRACTOR, rng)
            if not again.any():
                continue
            a = int(np.flatnonzero(again)[0])
            st, an = st_all[a, 0], an_all[a, 0]
        canvas[an[:, None] + keep[st]] = True
        out += list(zip(st.tolist(), an.tolist()))
    return out
