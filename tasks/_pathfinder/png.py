"""PNG in and out for Pathfinder images: grey decoding on top of the shared image codec, and an 8-bit grey encoder.

Decoding goes through `tasks._imagecodec` (numpy + zlib; Pillow only for what it cannot read, e.g. interlaced files)
and converts colour to grey with ITU-R 601 luma weights, as Pillow's `convert("L")` does. Encoding writes 8-bit
greyscale with filter type 0 on every row, which is what the original generator wrote.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np

from tasks._imagecodec import ImageDecodeError, decode_image, pil_available
from tasks._imagecodec import decode_png as _decode_png_rgb

PNGError = ImageDecodeError  # the name the Pathfinder reader and its tests use

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def decode_png(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode PNG bytes to a (height, width) uint8 grey array; `name` is used in error messages."""
    try:
        pix = _decode_png_rgb(data, name)
    except ImageDecodeError as err:
        if "interlaced" not in str(err) or not pil_available():
            raise
        pix = decode_image(data, name, use_pil=True)
    if pix.shape[2] == 1:
        return np.ascontiguousarray(pix[:, :, 0])
    grey = pix[:, :, :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    return np.clip(np.floor(grey + 0.5), 0, 255).astype(np.uint8)


def read_png(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a PNG file to a (height, width) uint8 grey array; errors name the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise PNGError(f"{path}: cannot read ({err.strerror})") from None
    return decode_png(data, str(path))


def encode_png(image: np.ndarray, level: int = 6) -> bytes:
    """Encode a (height, width) uint8 array as an 8-bit greyscale PNG."""
    image = np.asarray(image)
    if image.ndim != 2 or image.dtype != np.uint8:
        raise ValueError(f"encode_png takes a 2-D uint8 array, got {image.dtype} of shape {image.shape}")
    h, w = image.shape
    raw = np.zeros((h, w + 1), np.uint8)
    raw[:, 1:] = image

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return (
        _SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), level)) + chunk(b"IEND", b"")
    )
