"""Every table the generator looks up for one resolution and margin (build with `tables(resolution, margin)`).

Orientation ids: 0..359 are seed paddles (degrees - 180, drawn from their tail), 360 + j the paddle towards candidate
j of `get_coords_cmf` (drawn from that head back towards the pivot). A stamp id is its orientation id.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tasks._pathfinder.settings import SPECS, Spec
from tasks._pathfinder.stamps import (
    COLLIDE,
    FREE,
    N_SEED,
    _levels_f32,
    _pad_rows,
    candidate_offsets,
    cos,
    disk,
    flip,
    marker_window,
    paddle,
    sin,
)

NEGLIGIBLE = 1e-20  # cos(90 deg)^2 = 3.7e-33 is the original's weight for a turn it cannot take: treated as 0


class Tables:
    """Stamps, candidate geometry, continuity weights and level tables of one (resolution, margin)."""

    def __init__(self, spec: Spec, margin: int) -> None:
        self.spec, self.margin, self.size = spec, margin, spec.resolution
        length = spec.paddle_length
        self.half = half = length + int(math.ceil(spec.thickness)) + margin
        # stamps start inside the image (their masks reach half + margin around); a pivot lies at most margin + 2
        # outside, so a candidate at most length + 2 * margin + 2
        self.pad = pad = max(half + margin + 1, length + 2 * margin + 3)
        self.width = w = self.size + 2 * pad
        self._orientations(length, margin)
        self._levels()
        self._stamps(spec, margin, w)
        self._seed_footprints(length, margin, w)
        self._canvas(spec, margin, w)

    # ---- geometry of snake growth
    def _orientations(self, length: int, margin: int) -> None:
        self.cand = cand = candidate_offsets(length + margin)
        self.n_cand = len(cand)
        cand_angle = np.array([math.atan2(dy, dx) for dy, dx in cand.tolist()])
        seed_angle = (np.arange(N_SEED) - 180) * np.pi / 180
        self.angle = angle = np.concatenate([seed_angle, cand_angle])
        self.draw_angle = np.concatenate([seed_angle, [flip(a) for a in cand_angle]])
        # translate_coord(pivot, orientation, length + 2 * margin): the next pivot
        self.next_dy = float(length + 2 * margin) * sin(angle)
        self.next_dx = float(length + 2 * margin) * cos(angle)
        # the same per (orientation, pivot row or column + pad): the float sums and ceilings done once
        coord = np.arange(self.width) - self.pad
        self.next_y = np.ceil(coord[None, :] + self.next_dy[:, None]).astype(np.int64)
        self.next_x = np.ceil(coord[None, :] + self.next_dx[:, None]).astype(np.int64)
        # a seed's head (tail + length) and pivot (head + length + margin backwards)
        rev = np.where(seed_angle + np.pi < np.pi, seed_angle + np.pi, seed_angle - np.pi)
        self.head_dy, self.head_dx = float(length) * sin(seed_angle), float(length) * cos(seed_angle)
        self.piv_dy, self.piv_dx = float(length + margin) * sin(rev), float(length + margin) * cos(rev)
        # initialize_two_seeds: the second tail, seed_distance along a whole degree (randint(0, 360) * pi / 180)
        whole = np.arange(360) * np.pi / 180
        self.seed_dy = self.spec.seed_distance * sin(whole)
        self.seed_dx = self.spec.seed_distance * cos(whole)
        # get_coords_cmf's continuity weights, previous orientation x candidate, kept where they are not negligible
        diff = np.abs(cand_angle[None, :] - angle[:, None])
        delta = np.minimum(np.minimum(diff, 2 * np.pi - diff) * self.spec.continuity, 0.5 * np.pi)
        weights = np.maximum(cos(delta), 0) ** 2
        rows = [np.flatnonzero(r > NEGLIGIBLE) for r in weights]
        self.step_idx = _pad_rows(rows)
        width = self.step_idx.shape[1]
        self.step_w = np.stack([np.pad(weights[i, r], (0, width - len(r))) for i, r in enumerate(rows)])
        self.step_off = cand[self.step_idx, 0] * (self.size + 2 * self.pad) + cand[self.step_idx, 1]
        self.step_stamp = N_SEED + self.step_idx  # the stamp id of each candidate's paddle

    def _levels(self) -> None:
        """Per 8-bit level a of the mask (b of a new paddle's mask): the original's float comparisons."""
        f = _levels_f32()
        self.inverted = 1.0 - f  # get_coords_cmf's weight factor 1 - dilated mask
        hit = (f[:, None] + f[None, :]) >= COLLIDE  # [a, b]: mask a plus paddle mask b collides
        self.hit_level = np.where(hit.any(0), hit.argmax(0), 256).astype(np.int16)  # per b: the lowest colliding a
        self.free_level = int(np.flatnonzero(np.ceil(f - FREE) <= 0).max())  # seed_snake's free pixels: a <= this
        spec = self.spec
        self.value = {
            "target": _levels_f32(spec.target_contrast),
            "distractor": _levels_f32(spec.distractor_contrast),
            "marker": np.arange(256, dtype=np.float64) / 255,
        }
        assert all((np.diff(v) >= 0).all() for v in self.value.values())  # draw.render: max level = max value

    def _stamps(self, spec: Spec, margin: int, w: int) -> None:
        """Ink, mask, dilated mask and collision pixels of every paddle, as flat canvas offsets from its start."""
        half = self.half
        ys, xs = np.mgrid[-half : half + 1, -half : half + 1]
        flat = (ys * w + xs).ravel()
        self.ink, m_off, m_val, h_off, h_thr, self._masks = [], [], [], [], [], []
        for angle in self.draw_angle:
            ink, mask = paddle(spec, margin, angle)
            self.ink.append(ink)
            self._masks.append(mask)
            m = mask.ravel()
            keep = np.flatnonzero(m)
            m_off.append(flat[keep])
            m_val.append(m[keep])
            thr = self.hit_level[m]
            keep = np.flatnonzero(thr <= 255)
            h_off.append(flat[keep])
            h_thr.append(thr[keep])
        self.ink = np.stack(self.ink)  # (n_stamps, 2R+1, 2R+1) uint8
        self.ink_off = flat
        self.m_off, self.m_val = _pad_rows(m_off), _pad_rows(m_val, dtype=np.uint8)
        self.h_off, self.h_thr = _pad_rows(h_off), _pad_rows(h_thr, empty=256, dtype=np.int16)
        if self.h_thr.max() <= 255:  # no stamp without collision pixels: compare uint8 with uint8
            self.h_thr = self.h_thr.astype(np.uint8)

    def _seed_footprints(self, length: int, margin: int, w: int) -> None:
        """seed_snake's dilation struct per seed orientation: the pixels where the paddle's mask, drawn from
        (L+m+1, L+m+1) in a (2(L+m)+1)^2 window, is 1.0; OpenCV anchors it at the centre (L+m, L+m). Stored as
        offsets from the tail whose paddle they test: (dy, dx), flat, and the bounding box."""
        span, half = length + margin, self.half
        offs, boxes, structs = [], [], []
        for sid in range(N_SEED):
            mask = self._masks[sid]  # the seed paddle's mask, drawn by _stamps
            struct = np.zeros((2 * span + 1, 2 * span + 1), np.uint8)
            lo = half - (span + 1)  # stamp row of struct row 0
            struct[:] = mask[lo : lo + 2 * span + 1, lo : lo + 2 * span + 1]  # lo >= 0: half >= span + 1
            dy, dx = np.nonzero(struct == 255)
            dy, dx = dy - span, dx - span
            offs.append(dy * w + dx)
            structs.append((dy, dx))
            boxes.append((dy.min(), dy.max(), dx.min(), dx.max()) if dy.size else (0, -1, 0, -1))
        self.foot = _pad_rows(offs)
        self.foot_box = np.array(boxes, np.int64)
        self.seed_dead = np.array([_struct_leaves_image(d, self.size) for d in structs])
        del self._masks

    def _canvas(self, spec: Spec, margin: int, w: int) -> None:
        """The padded canvas: where the image is, the padding band (the mask's start) and its dilation."""
        pad, size = self.pad, self.size
        inside = np.zeros((w, w), bool)
        inside[pad : pad + size, pad : pad + size] = True
        band = np.zeros((w, w), np.uint8)
        band[pad : pad + size, pad : pad + size] = 255
        p = spec.padding
        band[pad + p : pad + size - p, pad + p : pad + size - p] = 0
        self.inside = inside.ravel()
        clear = np.zeros((w, w), bool)  # a paddle starting here has its whole mask (within half) in the image
        clear[pad + self.half : pad + size - self.half, pad + self.half : pad + size - self.half] = True
        self.clear = clear.ravel()
        self.origin = pad * w + pad  # flat index of image pixel (0, 0)
        self.pixel = (self.origin + np.arange(size)[:, None] * w + np.arange(size)).ravel()  # image y * size + x
        self.base_mask = band.ravel()
        # grow.extend reads the mask of candidates outside the image here: 255, for a weight of 1 - 1.0 = 0
        assert self.base_mask[self.origin] == 255 and self.inverted[255] == 0.0
        dy, dx = np.nonzero(disk(margin))
        self.disk_off = (dy - margin) * w + (dx - margin)
        self.centre = (pad + size // 2) * w + pad + size // 2
        self.marker_reach = int(math.ceil(spec.marker_radius)) + 7  # beyond this the marker's ink is 0
        self._markers: dict[tuple[int, int, int, int], np.ndarray] = {}

    def marker(self, up: int, down: int, left: int, right: int) -> np.ndarray:
        """The marker's window around its centre, cut where the image ends (each side at most marker_reach)."""
        key = (up, down, left, right)
        if key not in self._markers:
            self._markers[key] = marker_window(self.spec, up, down, left, right)
        return self._markers[key]

    def marker_at(self, y: int, x: int) -> tuple[int, int, np.ndarray]:
        """The marker centred on pixel (y, x): (top row, left column, ink window)."""
        r, last = self.marker_reach, self.size - 1
        up, down, left, right = min(r, y), min(r, last - y), min(r, x), min(r, last - x)
        return y - up, x - left, self.marker(up, down, left, right)

    def flat(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Flat canvas index of image pixel (y, x)."""
        return (y + self.pad) * self.width + (x + self.pad)


def _struct_leaves_image(struct: tuple[np.ndarray, np.ndarray], size: int) -> bool:
    """Whether some pixel of the image has its whole dilation struct (offsets dy, dx) outside the image. OpenCV's
    dilate gives such a pixel -DBL_MAX, and find_available_coordinates, seeing a negative value, reports no free
    pixel at all: a seed paddle of this orientation always fails (most orientations at 32 px)."""
    dy, dx = struct
    if dy.size == 0:
        return True
    reach = int(max(np.abs(dy).max(), np.abs(dx).max())) + 1  # pixels deeper inside keep their struct in the image
    ys, xs = np.mgrid[0:size, 0:size]
    edge = np.minimum(np.minimum(ys, xs), np.minimum(size - 1 - ys, size - 1 - xs)) < reach
    py, px = ys[edge][:, None] + dy[None], xs[edge][:, None] + dx[None]
    inside = (py >= 0) & (py < size) & (px >= 0) & (px < size)
    return bool((~inside.any(1)).any())


@functools.cache
def tables(resolution: int, margin: int) -> Tables:
    """The (cached) tables for one resolution and margin."""
    spec = SPECS[resolution]
    if margin not in spec.margins:
        raise ValueError(f"{resolution} px uses margins {spec.margins}, not {margin}")
    return Tables(spec, margin)
