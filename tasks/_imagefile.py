"""Image files (PNG, JPEG, anything Pillow reads) to uint8 pixel arrays, for the image task and Pathfinder's release.

Grey images stay one channel (H, W, 1): modes 1 and L, grey with alpha, palettes whose colours are all grey, and
16-bit grey (its high byte, i.e. value // 256, as 8-bit grey). Every other image is (H, W, 3) RGB, alpha dropped.
Turning RGB into grey is the caller's business: the image task and Pathfinder's release each follow their own source.
"""

from __future__ import annotations

import io
import os

import numpy as np

from lra.core.errors import DataCorruptError

_GREY_MODES = ("1", "L", "LA", "La")


def decode_image(data: bytes | str | os.PathLike[str], name: str) -> np.ndarray:
    """PNG/JPEG bytes (or a file path) -> uint8 (H, W, 1) grey or (H, W, 3) RGB.

    An unreadable or undecodable image is a DataCorruptError whose message starts with `name`.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        if not isinstance(data, bytes):
            with open(data, "rb") as f:
                data = f.read()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            if im.mode.startswith("I"):  # 16-bit grey PNGs open as I;16 (or I): keep the high byte
                pix = (np.asarray(im).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8)
            else:
                pix = np.asarray(im.convert("L" if _is_grey(im) else "RGB"))
    except UnidentifiedImageError:
        raise DataCorruptError(f"{name}: cannot decode image: not an image or a damaged one") from None
    except OSError as e:
        raise DataCorruptError(f"{name}: cannot read image: {e.strerror or e}") from None
    except Exception as e:  # Pillow raises many types on damaged input (SyntaxError, ValueError, ...)
        raise DataCorruptError(f"{name}: cannot decode image: {e}") from None
    return pix[:, :, None] if pix.ndim == 2 else pix


def _is_grey(im) -> bool:
    if im.mode in _GREY_MODES:
        return True
    if im.mode != "P":
        return False
    palette = np.asarray(im.getpalette() or [], dtype=np.uint8).reshape(-1, 3)
    return palette.size > 0 and bool((palette == palette[:, :1]).all())
