"""Snake growth as the original does it (`snakes.extend_snake` with `get_coords_cmf`), for many snakes at once.

Each row is one snake in its own world: a mask canvas (the soft mask the original keeps, as 8-bit levels; what
`extend_snake` dilates afresh before every paddle is read as the maximum over the margin's disk around each
candidate, the only pixels the original reads from its dilated mask). One call of `extend` adds a paddle to every row
given: candidate heads on the circle around the next pivot, weighted by the continuity prior times 1 - the dilated
mask there; three draws from those weights, the first whose mask, summed with the canvas mask, stays below 1.8
anywhere is kept; and then, as the original does, the snake's previous paddle is added to the mask (so a new paddle
is never tested against its predecessor, nor, within a pair, against the other snake's newest paddle).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks._pathfinder.settings import PADDLE_TRIES
from tasks._pathfinder.tables import Tables

DEAD_END = 1e-4  # get_coords_cmf: a total weight below this is a dead end


@dataclass
class Heads:
    """Where one snake of each row stands: its newest paddle (whose mask is not in the canvas yet) and its pivot."""

    stamp: np.ndarray  # (N,) stamp = orientation id of the newest paddle
    start: np.ndarray  # (N,) its flat canvas start (tail of a seed, head of an extension)
    py: np.ndarray  # (N,) the pivot the next pivot is translated from
    px: np.ndarray


_BUFFERS: dict[tuple[int, int, str], np.ndarray] = {}


class Canvases:
    """A mask canvas per row (8-bit levels, flat), in a buffer kept per (tables, use) so that memory is reused."""

    def __init__(self, t: Tables, rows: int, use: str) -> None:
        self.size = t.width * t.width
        key = (t.size, t.margin, use)
        buf = _BUFFERS.get(key)
        if buf is None or len(buf) < rows:
            buf = _BUFFERS[key] = np.empty((rows, self.size), np.uint8)
        self.mask = buf[:rows]

    def init(self, rows: np.ndarray, mask: np.ndarray) -> None:
        self.mask[rows] = mask

    def paste(self, t: Tables, rows: np.ndarray, stamp: np.ndarray, start: np.ndarray) -> None:
        """Add the masks of paddles (stamp, start) to rows (one paddle per row), cut at the image border as
        draw_line_n_mask cuts them."""
        idx = start[:, None] + t.m_off[stamp]
        vals = t.m_val[stamp] * t.inside[idx]
        at = idx + (rows * self.size)[:, None]
        flat = self.mask.reshape(-1)
        flat[at] = np.maximum(flat[at], vals)

    def paste_all(self, t: Tables, row: int, stamp: np.ndarray, start: np.ndarray) -> None:
        """Add the masks of several paddles to one row (where they overlap, the maximum)."""
        idx = start[:, None] + t.m_off[stamp]
        vals = np.where(t.inside[idx], t.m_val[stamp], 0).astype(np.uint8)
        np.maximum.at(self.mask[row], idx, vals)


def extend(t: Tables, cv: Canvases, h: Heads, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Add one paddle to the snake of each row in `rows` (extend_snake); returns which rows succeeded. Heads of the
    successful rows move on, and their previous paddle's mask joins the canvas."""
    o = h.stamp[rows]
    py = t.next_y[o, h.py[rows] + t.pad]  # translate_coord(last_pivot, orientation, L + 2m)
    px = t.next_x[o, h.px[rows] + t.pad]
    pos = (py * t.width + px + t.origin)[:, None] + t.step_off[o]  # (A, W) the candidates with continuity weight
    inside = t.inside[pos]  # get_coords_cmf drops the others
    pos = np.where(inside, pos, t.centre)
    flat = cv.mask.reshape(-1)
    gpos = pos + (rows * cv.size)[:, None]  # the candidates in the whole buffer
    dilated = flat[t.disk_off[:, None, None] + gpos].max(0)  # binary_dilate_custom(mask, disk(m))
    weights = t.step_w[o] * t.inverted[dilated] * inside
    total = weights.sum(1)
    live = total >= DEAD_END
    cmf = np.add.accumulate(weights, 1) / np.where(live, total, 1.0)[:, None]  # np.cumsum, without its wrapper
    u = rng.random((len(rows), PADDLE_TRIES))
    pick = (cmf[:, None, :] > u[:, :, None]).argmax(-1)  # np.argmax(cmf - random_num > 0), per draw
    stamp = t.step_stamp[o[:, None], pick]
    which, ok = _first_free(t, flat, gpos[np.arange(len(rows))[:, None], pick], stamp, live)
    sel = np.flatnonzero(ok)
    first = pick[sel, which[sel]]
    done, last = rows[sel], o[sel]
    cv.paste(t, done, last, h.start[done])
    h.stamp[done], h.start[done] = t.step_stamp[last, first], pos[sel, first]
    h.py[done], h.px[done] = py[sel], px[sel]
    return ok


def _first_free(t: Tables, flat: np.ndarray, start: np.ndarray, stamp: np.ndarray, live: np.ndarray):
    """extend_snake's retries: per row, the first of its draws (paddle `stamp` at buffer index `start`, (A, tries))
    whose mask stays below 1.8 with the canvas (np.max(mask + m_im) < 1.8), and whether a live row has one. The
    first draw passes for ~97% of rows, so the others are tested only for the rows it fails."""
    s0 = stamp[:, 0]
    free = (flat[start[:, :1] + t.h_off[s0]] < t.h_thr[s0]).all(1)
    ok = live & free
    which = np.zeros(len(ok), np.int64)
    retry = np.flatnonzero(live > free)  # live and not free
    if retry.size:
        rest = stamp[retry, 1:]
        passed = (flat[start[retry, 1:, None] + t.h_off[rest]] < t.h_thr[rest]).all(-1)
        ok[retry] = passed.any(1)
        which[retry] = passed.argmax(1) + 1
    return which, ok
