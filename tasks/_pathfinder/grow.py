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
SMALL = 16  # rows up to which a call takes the way with fewer numpy calls (they cost more than the work there)


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
        draw_line_n_mask cuts them (in a big call, only the rows whose paddle may reach past the border)."""
        offset = rows * self.size
        at = t.m_off.take(stamp, 0) + (start + offset)[:, None]
        vals = t.m_val.take(stamp, 0)
        if len(rows) <= SMALL:
            vals *= t.inside.take(at - offset[:, None])
        else:
            cut = (~t.clear.take(start)).nonzero()[0]
            if cut.size:
                vals[cut] *= t.inside.take(at[cut] - offset[cut, None])
        flat = self.mask.reshape(-1)
        old = flat.take(at)
        flat[at] = np.maximum(old, vals, out=old)

    def paste_all(self, t: Tables, row: int, stamp: np.ndarray, start: np.ndarray) -> None:
        """Add the masks of several paddles to one row (where they overlap, the maximum)."""
        idx = start[:, None] + t.m_off[stamp]
        vals = np.where(t.inside[idx], t.m_val[stamp], 0).astype(np.uint8)
        np.maximum.at(self.mask[row], idx, vals)


def extend(t: Tables, cv: Canvases, h: Heads, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Add one paddle to the snake of each row in `rows` (extend_snake); returns which rows succeeded. Heads of the
    successful rows move on, and their previous paddle's mask joins the canvas."""
    o = h.stamp.take(rows)
    py = t.next_y[o, h.py.take(rows) + t.pad]  # translate_coord(last_pivot, orientation, L + 2m)
    px = t.next_x[o, h.px.take(rows) + t.pad]
    pos = (py * t.width + px + t.origin)[:, None] + t.step_off.take(o, 0)  # (A, W) the candidates with weight
    offset = (rows * cv.size)[:, None]  # each row's canvas in the whole buffer
    flat = cv.mask.reshape(-1)
    # get_coords_cmf drops the candidates outside the image: their mask is read at image pixel (0, 0), where the
    # padding band keeps it at 255, so that their weight is 1 - 1.0 = 0
    read = np.where(t.inside.take(pos), pos, t.origin) + offset
    dilated = flat.take(t.disk_off[:, None, None] + read).max(0)  # binary_dilate_custom(mask, disk(m))
    weights = t.step_w.take(o, 0) * t.inverted.take(dilated)
    total = weights.sum(1)
    live = total >= DEAD_END
    cmf = np.add.accumulate(weights, 1)  # np.cumsum, without its wrapper
    cmf /= np.where(live, total, 1.0)[:, None]
    u = rng.random((len(rows), PADDLE_TRIES))
    pick = (cmf[:, None, :] > u[:, :, None]).argmax(-1)  # np.argmax(cmf - random_num > 0), per draw
    start = pos.take(pick + np.arange(0, pos.size, pos.shape[1])[:, None])  # (A, tries)
    # as the original's positions: a candidate outside the image at the image's centre (drawn only where no cmf > u
    # made argmax take candidate 0)
    start = np.where(t.inside.take(start), start, t.centre)
    stamp = t.step_stamp.take(pick + (o * t.step_stamp.shape[1])[:, None])
    which, ok = _first_free(t, flat, start + offset, stamp, live)
    sel = ok.nonzero()[0]
    first = which.take(sel) + sel * PADDLE_TRIES
    done, last = rows.take(sel), o.take(sel)
    cv.paste(t, done, last, h.start.take(done))
    h.stamp[done], h.start[done] = stamp.take(first), start.take(first)
    h.py[done], h.px[done] = py.take(sel), px.take(sel)
    return ok


def _first_free(t: Tables, flat: np.ndarray, start: np.ndarray, stamp: np.ndarray, live: np.ndarray):
    """extend_snake's retries: per row, the first of its draws (paddle `stamp` at buffer index `start`, (A, tries))
    whose mask stays below 1.8 with the canvas (np.max(mask + m_im) < 1.8), and whether a live row has one. The
    first draw passes for ~97% of rows: in a big batch the others are tested only for the rows it fails; in a small
    one all draws at once, in fewer numpy calls."""
    if len(live) <= SMALL:
        free = (flat.take(start[:, :, None] + t.h_off.take(stamp, 0)) < t.h_thr.take(stamp, 0)).all(-1)
        return free.argmax(1), live & free.any(1)
    s0 = stamp[:, 0]
    free = (flat.take(start[:, :1] + t.h_off.take(s0, 0)) < t.h_thr.take(s0, 0)).all(1)
    ok = live & free
    which = np.zeros(len(ok), np.int64)
    retry = (live > free).nonzero()[0]  # live and not free
    if retry.size:
        rest = stamp[retry, 1:]
        passed = (flat.take(start[retry, 1:, None] + t.h_off.take(rest, 0)) < t.h_thr.take(rest, 0)).all(-1)
        ok[retry] = passed.any(1)
        which[retry] = passed.argmax(1) + 1
    return which, ok
