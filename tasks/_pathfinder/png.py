"""A small PNG codec in numpy + zlib, enough for Pathfinder's images without a Pillow dependency.

Decodes non-interlaced PNGs of bit depth 8 (grey, grey+alpha, RGB, RGBA, palette) and 1/2/4-bit grey or palette to a
2-D uint8 grey array (colour images are converted with ITU-R 601 luma weights, as Pillow's `convert("L")` does).
Interlaced or 16-bit files fall back to Pillow when it is installed, else fail with a message that says so.
Encodes 8-bit greyscale (filter type 0 on every row), which is what the original generator wrote.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


class PNGError(ValueError):
    """The bytes are not a PNG this decoder can read; the message names the file and what was wrong."""


def _chunks(data: bytes, name: str) -> list[tuple[bytes, bytes]]:
    if not data.startswith(_SIGNATURE):
        raise PNGError(f"{name}: not a PNG file (bad signature)")
    out = []
    pos = len(_SIGNATURE)
    while pos < len(data):
        if pos + 8 > len(data):
            raise PNGError(f"{name}: truncated chunk header at byte {pos}")
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        crc = data[pos + 8 + length : pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            raise PNGError(f"{name}: truncated {kind.decode('latin-1')!r} chunk at byte {pos}")
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            raise PNGError(f"{name}: CRC mismatch in {kind.decode('latin-1')!r} chunk at byte {pos}")
        out.append((kind, body))
        pos += 12 + length
        if kind == b"IEND":
            break
    return out


def _paeth_row(line: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    """Undo the Paeth filter on one row: sequential in x, so a loop over Python ints (fast enough for 256 px)."""
    out = line.tolist()
    up = prev.tolist()
    for i in range(len(out)):
        a = out[i - bpp] if i >= bpp else 0
        b = up[i]
        c = up[i - bpp] if i >= bpp else 0
        pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
        pred = a if (pa <= pb and pa <= pc) else (b if pb <= pc else c)
        out[i] = (out[i] + pred) & 0xFF
    return np.array(out, np.uint8)


def _average_row(line: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    """Undo the Average filter on one row (sequential in x like Paeth)."""
    out = line.tolist()
    up = prev.tolist()
    for i in range(len(out)):
        left = out[i - bpp] if i >= bpp else 0
        out[i] = (out[i] + ((left + up[i]) >> 1)) & 0xFF
    return np.array(out, np.uint8)


def _unfilter(raw: np.ndarray, height: int, stride: int, bpp: int, name: str) -> np.ndarray:
    if raw.size != height * (stride + 1):
        raise PNGError(f"{name}: image data holds {raw.size} bytes, expected {height * (stride + 1)} (truncated?)")
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), np.uint8)
    prev = np.zeros(stride, np.uint8)
    for y in range(height):
        kind = int(rows[y, 0])
        line = rows[y, 1:]
        if kind == 0:
            cur = line.copy()
        elif kind == 1:  # Sub: running sum (mod 256) along each byte lane of the pixel
            cur = np.empty(stride, np.uint8)
            for lane in range(bpp):
                cur[lane::bpp] = np.cumsum(line[lane::bpp], dtype=np.uint8)
        elif kind == 2:
            cur = line + prev
        elif kind == 3:
            cur = _average_row(line, prev, bpp)
        elif kind == 4:
            cur = _paeth_row(line, prev, bpp)
        else:
            raise PNGError(f"{name}: unknown filter type {kind} on row {y}")
        out[y] = cur
        prev = cur
    return out


def _decode_with_pillow(data: bytes, name: str, why: str) -> np.ndarray:
    try:
        import io

        from PIL import Image
    except ImportError:
        raise PNGError(f"{name}: {why}; the built-in decoder cannot read it: `pip install pillow` to read it") from None
    try:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("L"), dtype=np.uint8).copy()
    except Exception as err:
        raise PNGError(f"{name}: unreadable image ({err})") from None


def decode_png(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode PNG bytes to a (height, width) uint8 grey array; `name` is used in error messages."""
    chunks = _chunks(data, name)
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise PNGError(f"{name}: missing or malformed IHDR chunk")
    width, height, depth, ctype, _comp, _filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if ctype not in _CHANNELS:
        raise PNGError(f"{name}: unknown PNG colour type {ctype}")
    if interlace:
        return _decode_with_pillow(data, name, "interlaced PNG")
    if depth == 16 or (depth < 8 and ctype not in (0, 3)):
        return _decode_with_pillow(data, name, f"{depth}-bit colour type {ctype}")
    if not any(kind == b"IEND" for kind, _ in chunks):
        raise PNGError(f"{name}: truncated file (no IEND chunk)")
    try:
        raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    except zlib.error as err:
        raise PNGError(f"{name}: corrupt image data ({err})") from None
    channels = _CHANNELS[ctype]
    bits_per_pixel = depth * channels
    stride = (width * bits_per_pixel + 7) // 8
    bpp = max(1, bits_per_pixel // 8)
    rows = _unfilter(np.frombuffer(raw, np.uint8), height, stride, bpp, name)
    if depth < 8:
        bits = np.unpackbits(rows, axis=1).reshape(height, -1, depth)[:, :width]
        weights = (1 << np.arange(depth - 1, -1, -1)).astype(np.uint16)
        samples = (bits * weights).sum(-1).astype(np.uint16)
        if ctype == 0:
            return (samples * 255 // ((1 << depth) - 1)).astype(np.uint8)
        pix = samples.astype(np.intp)
    else:
        pix = rows.reshape(height, width, channels)
    if ctype == 3:
        plte = next((body for kind, body in chunks if kind == b"PLTE"), None)
        if plte is None or len(plte) % 3:
            raise PNGError(f"{name}: palette image without a valid PLTE chunk")
        palette = np.frombuffer(plte, np.uint8).reshape(-1, 3)
        idx = pix if depth < 8 else pix[..., 0].astype(np.intp)
        if idx.max(initial=0) >= len(palette):
            raise PNGError(f"{name}: palette index out of range")
        pix = palette[idx]
        channels = 3
    if channels <= 2:
        return np.ascontiguousarray(pix[..., 0])
    rgb = pix[..., :3].astype(np.float32)
    grey = rgb @ np.array([0.299, 0.587, 0.114], np.float32)
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
