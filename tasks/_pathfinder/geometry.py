"""Precomputed geometry of the Pathfinder generator: LRA's settings per resolution, paddle and marker stamps.

Linsley et al.'s snakes are chains of paddles (dashes). A snake starts with a seed paddle at a tail pixel in one of
360 whole-degree orientations; every further paddle is chosen among the pixels on a circle of radius
`paddle_length + margin` around the current pivot, so a paddle's shape only depends on which candidate pixel was
picked. All those shapes are drawn once here (anti-aliased at `antialias` x and brought down with a Lanczos-3 filter,
as the original does with PIL), together with two pixel sets per paddle:

- core: the pixels the paddle alone makes at least `FOREGROUND` (64 of 255) in the final image (what counts as drawn;
  the image is the pixelwise maximum of its stamps, so its drawn pixels are exactly the union of the cores);
- keep-out: the core dilated by the link distance D. A new paddle whose core touches another paddle's keep-out is
  a collision, so two paddles that are not consecutive on one snake are more than D pixels apart, while consecutive
  paddles are at most D apart (transitions that would leave a wider gap get probability 0). That makes "the two
  markers are connected" a well-defined property of the drawn pixels, checked by the tests with a flood fill.

Everything is integer offsets into a padded canvas, so the generator only gathers and scatters.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

FOREGROUND = (
    64  # a pixel of value >= 64 (a quarter of full brightness) counts as drawn; the guarantees are stated on it
)
DIFFICULTIES = (6, 9, 14)  # LRA's "easy", "intermediate", "hard" (contour length in paddles)


@dataclass(frozen=True)
class Spec:
    """LRA's generator settings for one resolution (lra_benchmarks/data/pathfinder.py lists them)."""

    resolution: int
    padding: int  # border band where nothing is drawn
    margins: tuple[int, ...]  # paddle margin (half the gap between dashes), one picked per image
    seed_distance: int  # distance between the tails of the two target snakes
    marker_radius: float
    paddle_length: int
    thickness: float
    continuity: float  # turning-angle penalty: weight cos(min(continuity * turn, 90 deg))^2
    distractor_budget: int  # number of distractor snakes = distractor_budget // distractor_length
    target_contrast: float  # paddle brightness of the two target snakes (markers are 1.0)
    distractor_contrast: float
    antialias: int = 2  # supersampling factor of the stamps (the wrapper's default at every resolution)

    def distractor_length(self, contour_length: int) -> int:
        return contour_length // 3

    def num_distractors(self, contour_length: int) -> int:
        return self.distractor_budget // self.distractor_length(contour_length)


# The original wrapper ran under Python 2, so `contour_length / 3` and `35 / distractor_length` were integer divisions:
# the release's metadata rows confirm distractor length 4 for contour length 14.
# At 32 px the targets' paddles get snake contrast 2 x paddle contrast 0.75 = 1.5, distractors the snake contrast alone.
# fmt: off
SPECS: dict[int, Spec] = {
    32: Spec(resolution=32, padding=1, margins=(1,), seed_distance=7, marker_radius=1.5, paddle_length=2,
             thickness=0.5, continuity=1.0, distractor_budget=20, target_contrast=1.5, distractor_contrast=2.0),
    64: Spec(resolution=64, padding=1, margins=(1,), seed_distance=12, marker_radius=2.5, paddle_length=5,
             thickness=1.0, continuity=1.8, distractor_budget=22, target_contrast=0.8, distractor_contrast=0.8),
    128: Spec(resolution=128, padding=1, margins=(2, 3), seed_distance=20, marker_radius=3.0, paddle_length=5,
              thickness=1.5, continuity=1.8, distractor_budget=35, target_contrast=0.9, distractor_contrast=0.9),
    256: Spec(resolution=256, padding=22, margins=(3,), seed_distance=27, marker_radius=5.0, paddle_length=5,
              thickness=2.0, continuity=1.8, distractor_budget=30, target_contrast=1.0, distractor_contrast=1.0),
}
# fmt: on

LINK_MASS = {32: 0.94}  # share of the continuity mass the link distance must keep (default 0.99), see _link_distance
N_SEED = 360  # seed orientations: whole degrees -180..179, stamp id = degrees + 180
TARGET, DISTRACTOR = 0, 1  # paddle classes (their contrasts differ at 32 px)


def _lanczos3(x: np.ndarray) -> np.ndarray:
    out = np.sinc(x) * np.sinc(x / 3.0)
    out[np.abs(x) >= 3.0] = 0.0
    return out


@functools.lru_cache(maxsize=8)
def _downsample_matrix(n: int, aa: int) -> np.ndarray:
    """(n, n*aa) Lanczos-3 weights taking aa x supersampled rows to n pixels (PIL's resize convention)."""
    centres = (np.arange(n * aa) + 0.5) / aa
    w = _lanczos3(centres[None, :] - (np.arange(n) + 0.5)[:, None])
    return w / w.sum(1, keepdims=True)


def _render(shape_fn, y0: int, x0: int, n: int, aa: int) -> np.ndarray:
    """Supersample `shape_fn(y, x) -> bool` (continuous pixel coordinates) on an n x n window at (y0, x0)."""
    sub = y0 + (np.arange(n * aa) + 0.5) / aa
    subx = x0 + (np.arange(n * aa) + 0.5) / aa
    blown = shape_fn(sub[:, None], subx[None, :]).astype(np.float64)
    r = _downsample_matrix(n, aa)
    return r @ blown @ r.T


def _line_stamp(start: tuple[int, int], angle: float, length: float, thickness: float, aa: int):
    """Ink of a paddle drawn from pixel `start` along `angle` (radians, y down), as a window (y0, x0, array)."""
    half = round(thickness * aa) / (2.0 * aa)  # PIL draws width round(thickness * aa) at the supersampled scale
    sy, sx = start[0] + 0.5, start[1] + 0.5
    dy, dx = math.sin(angle), math.cos(angle)
    ey, ex = sy + length * dy, sx + length * dx
    pad = int(math.ceil(thickness)) + 4
    y0 = int(math.floor(min(sy, ey))) - pad
    x0 = int(math.floor(min(sx, ex))) - pad
    n = int(math.ceil(max(abs(ey - sy), abs(ex - sx)))) + 2 * pad + 1

    def inside(y: np.ndarray, x: np.ndarray) -> np.ndarray:
        along = (y - sy) * dy + (x - sx) * dx
        across = -(y - sy) * dx + (x - sx) * dy
        return (along >= 0) & (along <= length) & (np.abs(across) <= half)

    return y0, x0, _render(inside, y0, x0, n, aa)


def _disk_stamp(radius: float, aa: int):
    """Ink of a marker: a disk of `radius` centred on pixel (0, 0)."""
    pad = int(math.ceil(radius)) + 4
    n = 2 * pad + 1

    def inside(y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return (y - 0.5) ** 2 + (x - 0.5) ** 2 <= radius**2

    return -pad, -pad, _render(inside, -pad, -pad, n, aa)


def _ceil_translate(y: float, x: float, angle: float, dist: float) -> tuple[int, int]:
    """The original's translate_coord: move by dist along angle and round up."""
    return int(math.ceil(y + dist * math.sin(angle))), int(math.ceil(x + dist * math.cos(angle)))


def _flip(angle: float) -> float:
    return angle + math.pi if angle < 0 else angle - math.pi


def to_u8(value: np.ndarray) -> np.ndarray:
    """Brightness (1 = full) to the stored 8-bit pixel, rounded in float64 (contrast 0.9 gives 229, as in LRA's
    images); the renderer and the core tables both use this, so drawn pixels and cores agree exactly."""
    return np.rint(np.clip(np.asarray(value, np.float64), 0.0, 1.0) * 255.0).astype(np.uint8)


def _points(y0: int, x0: int, ink: np.ndarray, contrast: float) -> np.ndarray:
    """Pixels (y, x) that the stamp at this contrast draws at FOREGROUND or brighter."""
    ys, xs = np.nonzero(to_u8(ink * np.float32(contrast)) >= FOREGROUND)
    return np.stack([ys + y0, xs + x0], 1).astype(np.int64)


def _disk_offsets(radius: float) -> np.ndarray:
    r = int(math.floor(radius))
    ys, xs = np.mgrid[-r : r + 1, -r : r + 1]
    keep = ys**2 + xs**2 <= radius**2
    return np.stack([ys[keep], xs[keep]], 1)


def _dilate_points(points: np.ndarray, disk: np.ndarray) -> np.ndarray:
    """All pixels within the disk of some point (unique, as (y, x) rows)."""
    big = 1 << 20
    pts = (points[:, None, :] + disk[None, :, :]).reshape(-1, 2) + big // 2
    code = np.unique(pts[:, 0] * big + pts[:, 1])
    return np.stack([code // big, code % big], 1) - big // 2


def _pad_rows(rows: list[np.ndarray]) -> np.ndarray:
    """Stack ragged 1-D int arrays into one table, padding each row with its own first entry (harmless duplicates)."""
    width = max(len(r) for r in rows)
    out = np.empty((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        out[i, len(r) :] = r[0]
    return out


class Geometry:
    """Every table the generator needs for one resolution and one margin. Build with `geometry(resolution, margin)`.

    Stamp ids: 0..359 are seed paddles (anchored at their tail), 360 + j the extension paddle towards candidate j
    (anchored at the pivot). Offsets are flat indices into a canvas padded by `pad` pixels on every side.
    """

    def __init__(self, spec: Spec, margin: int) -> None:
        self.spec = spec
        self.margin = margin
        self.size = spec.resolution
        cand_angle = self._candidates()
        seed_angle = self._seeds()
        self._stamps(seed_angle, cand_angle)
        contrasts = (spec.target_contrast, spec.distractor_contrast)
        core_pts = [[_points(y0, x0, ink, c) for (y0, x0, ink) in self.ink] for c in contrasts]
        for cls in (TARGET, DISTRACTOR):
            if any(len(p) == 0 for p in core_pts[cls]):
                raise AssertionError(f"{spec.resolution}px: a paddle draws no foreground pixel")
        self.link = self._link_distance(core_pts[TARGET])
        same = contrasts[TARGET] == contrasts[DISTRACTOR]  # one set of tables serves both classes
        self._canvas(core_pts, same)
        self._local_tables(core_pts)
        # seed placement of the first target snake keeps the paddle and its margin inside the allowed box
        foot = [_dilate_points(core_pts[TARGET][i], _disk_offsets(margin)) for i in range(N_SEED)]
        self.seed_box = np.array([[f[:, 0].min(), f[:, 0].max(), f[:, 1].min(), f[:, 1].max()] for f in foot])
        # consecutive paddles must stay within the link distance (else the transition gets weight 0)
        self.gap_ok = [self._gap_table(core_pts[TARGET])]
        self.gap_ok.append(self.gap_ok[0] if same else self._gap_table(core_pts[DISTRACTOR]))
        self._pivot_tables()
        self._step_tables()

    def _candidates(self) -> np.ndarray:
        """Candidate heads: the original samples angles one pixel of arc apart on a circle of radius L + m around the
        pivot, truncates to pixels and keeps the unique ones. Returns their angles."""
        length, m = self.spec.paddle_length, self.margin
        radius = length + m
        step = 360.0 / (2 * radius * math.pi)
        ang = np.arange(0, 360, step) * math.pi / 180
        offs = np.stack([np.floor(radius * np.sin(ang)), np.floor(radius * np.cos(ang))], 1).astype(np.int64)
        self.cand_off = offs = np.unique(offs, axis=0)
        self.n_cand = len(offs)
        cand_angle = np.arctan2(offs[:, 0], offs[:, 1])
        self.cand_next = np.array([_ceil_translate(0, 0, a, length + 2 * m) for a in cand_angle], np.int64)
        return cand_angle

    def _seeds(self) -> np.ndarray:
        """Seed paddles in whole-degree orientations: head, pivot and next pivot of each. Returns their angles."""
        length, m = self.spec.paddle_length, self.margin
        seed_angle = (np.arange(N_SEED) - 180) * math.pi / 180
        self.seed_head = np.zeros((N_SEED, 2), np.int64)
        self.seed_pivot = np.zeros((N_SEED, 2), np.int64)
        self.seed_next = np.zeros((N_SEED, 2), np.int64)
        for i, a in enumerate(seed_angle):
            hy, hx = _ceil_translate(0, 0, a, length)
            py, px = _ceil_translate(hy, hx, _flip(a), length + m)
            self.seed_head[i] = hy, hx
            self.seed_pivot[i] = py, px
            self.seed_next[i] = _ceil_translate(py, px, a, length + 2 * m)
        return seed_angle

    def _stamps(self, seed_angle: np.ndarray, cand_angle: np.ndarray) -> None:
        """The ink of every paddle and of a marker, and the continuity weights between paddle orientations."""
        spec = self.spec
        length, t, aa = spec.paddle_length, spec.thickness, spec.antialias
        stamps = [_line_stamp((0, 0), a, length, t, aa) for a in seed_angle]
        stamps += [
            _line_stamp((int(o[0]), int(o[1])), _flip(a), length, t, aa) for o, a in zip(self.cand_off, cand_angle)
        ]
        self.orient = np.concatenate([seed_angle, cand_angle])
        my0, mx0, mink = _disk_stamp(spec.marker_radius, aa)
        # the original brings every stamp to 8 bits (so clipped at 1) before scaling it by its contrast: the
        # references' dash peaks are exactly 0.9 * 255 at 128 px and 255 at 256 px
        self.ink = [(y0, x0, np.clip(ink, 0.0, 1.0).astype(np.float32)) for (y0, x0, ink) in stamps]
        self.marker_ink = (my0, mx0, np.clip(mink, 0.0, 1.0).astype(np.float32))
        # continuity weights between the orientation of the previous paddle and each candidate
        delta = np.abs(self.orient[:, None] - cand_angle[None, :])
        delta = np.minimum(delta, 2 * math.pi - delta)
        turn = np.minimum(delta * spec.continuity, math.pi / 2)
        self.cont_w = (np.maximum(np.cos(turn), 0.0) ** 2).astype(np.float32)

    def _canvas(self, core_pts: list[list[np.ndarray]], same: bool) -> None:
        """The padded canvas and the flat core / keep-out offsets of every paddle and the marker on it."""
        length, m = self.spec.paddle_length, self.margin
        disk = _disk_offsets(self.link)
        # canvas border: keep-outs around paddles whose pivot is up to L + 2m outside the image, and ink windows
        windows = self.ink + [self.marker_ink]
        ink_extent = max(max(-y0, -x0, y0 + a.shape[0], x0 + a.shape[1]) for (y0, x0, a) in windows)
        core_extent = int(max(np.abs(np.concatenate(p)).max() for p in core_pts)) + int(math.ceil(self.link))
        self.pad = max(core_extent, ink_extent) + 2 * (length + 2 * m)
        self.width = w = self.size + 2 * self.pad
        flat = lambda pts: pts[:, 0] * w + pts[:, 1]  # noqa: E731
        self.core = [_pad_rows([flat(p) for p in core_pts[c]]) for c in (TARGET, DISTRACTOR)]
        self.keep = [_pad_rows([flat(_dilate_points(p, disk)) for p in core_pts[TARGET]])]
        self.keep.append(self.keep[0] if same else _pad_rows([flat(_dilate_points(p, disk)) for p in core_pts[1]]))
        # anchors whose core stays inside the image and off the padding band: lo_y <= y <= hi_y, lo_x <= x <= hi_x
        lo, hi = self.spec.padding, self.size - 1 - self.spec.padding
        self.frame_range = [
            np.array([[lo - p[:, 0].min(), hi - p[:, 0].max(), lo - p[:, 1].min(), hi - p[:, 1].max()] for p in pts])
            for pts in core_pts
        ]
        marker_pts = _points(*self.marker_ink, 1.0)
        self.marker_core = flat(marker_pts)
        self.marker_keep = flat(_dilate_points(marker_pts, disk))

    def _local_tables(self, core_pts: list[list[np.ndarray]]) -> None:
        """Keep-outs as local bitmaps around their anchor, per class: a new paddle is checked against the earlier
        paddles of its own attempt (found by distance) there, instead of through a map written per attempt. The
        bitmaps are padded so that every lookup from a paddle within `near` of the pivot stays inside them."""
        disk = _disk_offsets(self.link)
        offs = self.cand_off
        keep_pts = [[_dilate_points(p, disk) for p in core_pts[c]] for c in (TARGET, DISTRACTOR)]
        # each paddle's centre (middle of its core), relative to its anchor: nearness is measured between centres
        self.centre = np.rint(np.array([p.mean(0) for p in core_pts[TARGET]])).astype(np.int64)
        spread = max(
            np.sqrt(((k - self.centre[i]) ** 2).sum(1)).max() for kp in keep_pts for i, k in enumerate(kp)
        )  # keep-out radius around a paddle's centre
        ext = np.concatenate(core_pts[TARGET][N_SEED:] + core_pts[DISTRACTOR][N_SEED:])
        reach = float(max(np.sqrt((ext**2).sum(1)).max(), np.sqrt((offs**2).sum(1)).max()))  # new paddles near pivot
        # an earlier paddle whose centre is farther than this from the pivot can neither block a candidate head nor
        # touch the new paddle's core
        self.near2 = (spread + reach + 1.0) ** 2
        self.near = int(math.ceil(spread + reach + 1.0)) + int(np.abs(self.centre).max())  # bound on |anchor offset|
        self.local_r = r = self.near + int(math.ceil(reach))
        self.local_w = lw = 2 * r + 1
        self.local_keep, self.core_local = [], []
        for cls in (TARGET, DISTRACTOR):
            local = np.zeros((len(keep_pts[cls]), lw, lw), bool)
            for i, k in enumerate(keep_pts[cls]):
                local[i, k[:, 0] + r, k[:, 1] + r] = True
            self.local_keep.append(local.ravel())
            self.core_local.append(_pad_rows([p[:, 0] * lw + p[:, 1] for p in core_pts[cls]]))
        self.cand_local = offs[:, 0] * lw + offs[:, 1]

    def _pivot_tables(self) -> None:
        """Pivots from which candidate j is allowed: its head off the padding band dilated by the margin (where the
        original's weights vanish) and its whole core inside the frame."""
        offs, w, pad = self.cand_off, self.width, self.pad
        room = self.spec.padding + self.margin
        self.pivot_ok = []  # (width * width, M): candidate j allowed from the pivot at that flat position
        ys = np.arange(w)[:, None, None] - pad
        xs = np.arange(w)[None, :, None] - pad
        for cls in (TARGET, DISTRACTOR):
            fr = self.frame_range[cls][N_SEED:]  # (M, 4) rows of y_lo, y_hi, x_lo, x_hi
            ylo = np.maximum(room - offs[:, 0], fr[:, 0])
            yhi = np.minimum(self.size - 1 - room - offs[:, 0], fr[:, 1])
            xlo = np.maximum(room - offs[:, 1], fr[:, 2])
            xhi = np.minimum(self.size - 1 - room - offs[:, 1], fr[:, 3])
            ok = (ys >= ylo) & (ys <= yhi) & (xs >= xlo) & (xs <= xhi)
            self.pivot_ok.append(ok.reshape(w * w, self.n_cand))

    def _step_tables(self) -> None:
        """Continuity weight times the gap rule, per previous paddle and candidate; and, since most candidates turn too
        far to have any weight, the same as short rows over the candidates that can be drawn: step_idx[p] lists them
        (padded with weight 0), step_w[p] their weights."""
        self.step_idx, self.step_w = [], []
        for ok in self.gap_ok:
            full = (self.cont_w * ok).astype(np.float32)
            rows = [np.flatnonzero(r > 0) for r in full]
            width = max(1, max(len(r) for r in rows))
            idx = np.zeros((len(rows), width), np.int64)
            wts = np.zeros((len(rows), width), np.float32)
            for p, r in enumerate(rows):
                idx[p, : len(r)] = r
                wts[p, : len(r)] = full[p, r]
            self.step_idx.append(idx)
            self.step_w.append(wts)

    def _link_distance(self, core_pts: list[np.ndarray]) -> float:
        """The widest gap between consecutive dashes that counts as touching: the smallest half-pixel step from
        2 * margin + 1 that keeps LINK_MASS of the continuity-weighted transitions between extension paddles.

        A larger link keeps more turns possible but widens every keep-out; at 32 px the keep-out costs more (3.0 px:
        0.26% of target pairs succeed, 4.0 px: 0.10%), elsewhere the lost turns do (64 px: 3.5 px 0.08%, 4.0 px 0.14%).
        """
        nexts = self.cand_next
        m = self.margin
        dists, weights = [], []
        for p in range(self.n_cand):
            js = np.flatnonzero(self.cont_w[N_SEED + p] > 0)
            pts = core_pts[N_SEED + p]
            for j in js:
                d = pts[:, None, :] - (core_pts[N_SEED + j] + nexts[p])[None]
                dists.append(np.sqrt((d * d).sum(-1).min()))
                weights.append(self.cont_w[N_SEED + p, j])
        dists, weights = np.array(dists), np.array(weights)
        share = LINK_MASS.get(self.size, 0.99)
        for link in np.arange(2 * m + 1.0, 2 * m + 6.0, 0.5):
            if weights[dists <= link].sum() >= share * weights.sum():
                return float(link)
        return float(2 * m + 6.0)

    def _gap_table(self, core_pts: list[np.ndarray]) -> np.ndarray:
        """ok[p, j]: paddle j placed after paddle p leaves a gap of at most the link distance between their cores."""
        nexts = np.concatenate([self.seed_next, self.cand_next])  # next pivot relative to each stamp's anchor
        cand = core_pts[N_SEED:]
        width = max(len(c) for c in cand)
        stacked = np.zeros((self.n_cand, width, 2), np.int64)
        valid = np.zeros((self.n_cand, width), bool)
        for j, c in enumerate(cand):
            stacked[j, : len(c)] = c
            valid[j, : len(c)] = True
        ok = np.zeros((len(core_pts), self.n_cand), bool)
        for p, pts in enumerate(core_pts):
            js = np.flatnonzero(self.cont_w[p] > 0)
            d = pts[:, None, None, :] - (stacked[js] + nexts[p])[None]  # (Cp, J, C, 2)
            d2 = np.where(valid[js][None], (d * d).sum(-1), np.iinfo(np.int64).max).min(axis=(0, 2))
            ok[p, js] = d2 <= self.link**2
        return ok


@functools.cache
def geometry(resolution: int, margin: int) -> Geometry:
    """The (cached) tables for one resolution and margin."""
    if resolution not in SPECS:
        raise ValueError(f"no Pathfinder settings for {resolution} px; known: {sorted(SPECS)}")
    spec = SPECS[resolution]
    if margin not in spec.margins:
        raise ValueError(f"{resolution} px uses margins {spec.margins}, not {margin}")
    return Geometry(spec, margin)
