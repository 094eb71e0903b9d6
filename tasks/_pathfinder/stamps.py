"""The original generator's paddles and markers, drawn once per resolution and margin, and the tables that replace its
per-paddle work with lookups.

Linsley et al.'s `snakes.draw_line_n_mask` draws every paddle the same way wherever it lies: a PIL width-
round(thickness * aa) line in an 'F' image of (2R * aa + 1) pixels (R = length + ceil(thickness) + margin), brought to
(2R + 1) pixels by SciPy's `imresize` (bytescale to 8 bits, PIL Lanczos in 8-bit), and its soft mask: the same line
dilated by a disk of margin * aa (OpenCV), resized the same way. The paddle is pasted (cut at the image border) with
its start pixel at the window's centre. So a paddle's pixels depend only on its orientation, and every orientation the
original can draw is known in advance: 360 whole degrees for a snake's first (seed) paddle, and for each further paddle
the angle back to the pivot from one of the pixels `get_coords_cmf` lists on a circle of radius length + margin. Those
stamps are drawn here with Pillow exactly as the original draws them (PIL is a dependency of this project already);
`draw_circle`'s markers too (an aa-times disk, centred on the aa-grid pixel c * aa, resized in 8 bits: a quarter
pixel up-left of the pixel centre and not symmetric), by rendering the window around the marker, which the edge of
the image cuts as it cuts the whole image.

Everything is stored as flat offsets into a canvas padded by `pad` pixels (`Tables.width` wide), so the generator only
gathers and scatters. Mask values are kept as the 8-bit levels the original's float masks hold (level / 255, rounded
to float32 where the original stores them in an 'F' image); the comparisons the original makes on those floats are
tabulated per level (`hit_level`, `inverted`, `free_level`), so they come out exactly the same.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from tasks._pathfinder.settings import Spec

N_SEED = 360  # seed orientations: whole degrees -180..179, orientation id = degrees + 180
COLLIDE = 1.8  # extend_snake rejects a paddle where mask + its mask reaches this
FREE = 0.3  # seed_snake: a pixel is free where ceil(mask - 0.3) == 0


def bytescale(data: np.ndarray, cmin: float | None = None, cmax: float | None = None) -> np.ndarray:
    """SciPy <= 1.1 `misc.bytescale` (what `imresize` and `imsave` do to a float image): map [cmin, cmax] (the
    data's own min and max by default) to 0..255, round half up. uint8 input passes through."""
    data = np.asarray(data)
    if data.dtype == np.uint8:
        return data
    cmin = data.min() if cmin is None else cmin
    cmax = data.max() if cmax is None else cmax
    cscale = cmax - cmin
    if cscale < 0:
        raise ValueError("cmax < cmin")
    scale = 255.0 / (cscale if cscale != 0 else 1)
    return (((data - cmin) * scale).clip(0, 255) + 0.5).astype(np.uint8)


def imresize(arr: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """SciPy <= 1.1 `misc.imresize(arr, (rows, cols), interp='lanczos')`: bytescale, then PIL Lanczos in 8 bits."""
    return np.asarray(Image.fromarray(np.ascontiguousarray(bytescale(arr))).resize((cols, rows), Image.LANCZOS))


def disk(radius: int) -> np.ndarray:
    """`snakes.generate_dilation_struct`: the (2r+1)^2 0/1 disk x^2 + y^2 <= r^2."""
    y, x = np.ogrid[-radius : radius + 1, -radius : radius + 1]
    return (x**2 + y**2 <= radius**2).astype(np.uint8)


def dilate(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Grey dilation by a symmetric 0/1 kernel, pixels outside the image ignored (OpenCV's `dilate` default) - for
    images >= 0."""
    r = kernel.shape[0] // 2
    h, w = image.shape
    padded = np.zeros((h + 2 * r, w + 2 * r), image.dtype)
    padded[r : r + h, r : r + w] = image
    out = np.zeros_like(image)
    for dy, dx in zip(*np.nonzero(kernel)):
        np.maximum(out, padded[dy : dy + h, dx : dx + w], out=out)
    return out


def sin(angles: np.ndarray) -> np.ndarray:
    """Sine through the C library, value by value: numpy's vectorised float64 sine may differ by an ulp between CPUs
    (SIMD code paths), and the generator rounds values like 2 x sin(30 deg) up or down, so its tables must be the
    same on every machine."""
    return np.array([math.sin(a) for a in np.asarray(angles, np.float64).ravel()]).reshape(np.shape(angles))


def cos(angles: np.ndarray) -> np.ndarray:
    """Cosine through the C library (see `sin`)."""
    return np.array([math.cos(a) for a in np.asarray(angles, np.float64).ravel()]).reshape(np.shape(angles))


def translate(y: float, x: float, angle: float, dist: float) -> tuple[int, int]:
    """`snakes.translate_coord`: move by dist along angle (y down) and round up, in absolute float coordinates."""
    return int(math.ceil(y + float(dist) * math.sin(angle))), int(math.ceil(x + float(dist) * math.cos(angle)))


def flip(angle: float) -> float:
    """`snakes.flip_by_pi`."""
    return angle + np.pi if angle < 0 else angle - np.pi


def paddle(spec: Spec, margin: int, angle: float) -> tuple[np.ndarray, np.ndarray]:
    """`draw_line_n_mask`'s window: the paddle from the centre pixel along `angle`, and its soft mask, as the 8-bit
    levels the original divides by 255 ((2R+1, 2R+1) uint8 each)."""
    length, aa = spec.paddle_length, spec.antialias
    half = length + int(np.ceil(spec.thickness)) + margin
    size, centre = half * 2 * aa + 1, half * aa
    head = translate(centre, centre, angle, length * aa)
    blown = Image.new("F", (size, size), "black")
    ImageDraw.Draw(blown).line(
        [(centre, centre), (head[1], head[0])], fill="white", width=int(np.round(spec.thickness * aa))
    )
    line = np.array(blown)
    small = 2 * half + 1
    ink = imresize(line, small, small)
    mask = imresize(dilate(line, disk(margin * aa)).astype(float).astype(np.uint8), small, small)
    return ink, mask


def marker_window(spec: Spec, up: int, down: int, left: int, right: int) -> np.ndarray:
    """`snakes2.draw_circle` around its centre pixel: rows centre-up..centre+down, columns centre-left..centre+right,
    where the image ends there or the disk's ink has faded to 0 before (uint8, (up + down + 1, left + right + 1))."""
    aa, r = spec.antialias, spec.marker_radius
    y, x = np.ogrid[-up * aa : (down + 1) * aa, -left * aa : (right + 1) * aa]
    blown = np.zeros((y.shape[0], x.shape[1]))
    blown[x**2 + y**2 <= (r * aa) ** 2] = 1
    return imresize(blown, up + down + 1, left + right + 1)


def candidate_offsets(step: int) -> np.ndarray:
    """`get_coords_cmf`'s candidate pixels around a pivot: angles one pixel of arc apart on a circle of radius `step`,
    truncated to pixels, unique, in np.unique's (y, x) order. Returned as offsets (n, 2) from the pivot."""
    deg = 360.0 / (2 * step * np.pi)
    rad = np.arange(0, 360, deg) * np.pi / 180
    offs = np.stack([np.floor(step * sin(rad)), np.floor(step * cos(rad))], 1).astype(np.int64)
    return np.unique(offs, axis=0)


def _levels_f32(contrast: float = 1.0) -> np.ndarray:
    """The float64 value of each 8-bit level once the original has divided it by 255, scaled it and stored it in an
    'F' (float32) image."""
    levels = np.arange(256, dtype=np.float64) / 255
    return (levels * contrast if contrast != 1.0 else levels).astype(np.float32).astype(np.float64)


def _pad_rows(rows: list[np.ndarray], empty: int = 0, dtype: type = np.int64) -> np.ndarray:
    """Stack ragged 1-D arrays, padding each row with its own first entry (a harmless duplicate); an empty row is
    all `empty`."""
    width = max(1, max(len(r) for r in rows))
    out = np.full((len(rows), width), empty, dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = r
            out[i, len(r) :] = r[0]
    return out
