"""Image decoding without new dependencies: baseline JPEG and PNG in numpy (+ zlib), Pillow when it is installed.

Neither torchvision nor Pillow is a dependency of this project, and CIFAR-10's image-folder copy is JPEG, so this module
carries a small decoder of its own:

- JPEG: baseline and extended sequential Huffman-coded files (SOF0/SOF1, 8-bit), any sampling factors, restart
  intervals, 1 (grey) or 3 (YCbCr, or RGB with Adobe's transform flag 0) components. It follows libjpeg's default
  output path step by step, so that pixels equal libjpeg's (what Pillow and TensorFlow use): its default integer
  inverse DCT ("islow"), fancy (triangle-filter) chroma upsampling for 2x1 and 2x2 sampling (other ratios replicate
  pixels) and its fixed-point YCbCr->RGB tables. Progressive, lossless, arithmetic-coded and 12-bit files are refused
  with a message (Pillow reads them).
- PNG: non-interlaced, bit depth 1/2/4/8/16, grey, grey+alpha, RGB, RGBA and palette (alpha is dropped).

Speed: the Huffman decoding is a Python loop, about 1-2 ms for a 32x32 JPEG; Pillow is ~30x faster, so `decode_image`
uses Pillow when it can be imported and this decoder otherwise (`use_pil=False` forces this one).
"""

from __future__ import annotations

import io
import re
import struct
import zlib

import numpy as np


class ImageDecodeError(ValueError):
    """The bytes are not an image this module can read; the message names the image and what was wrong."""


def pil_available() -> bool:
    try:
        import PIL.Image  # noqa: F401
    except ImportError:
        return False
    return True


def decode_image(data: bytes, name: str = "<bytes>", use_pil: bool | None = None) -> np.ndarray:
    """Decode a PNG or JPEG to uint8 (H, W, C), C = 1 (grey) or 3 (RGB). `use_pil=None`: Pillow when installed."""
    if use_pil is None:
        use_pil = pil_available()
    if use_pil:
        return _decode_pil(data, name)
    if data[:8] == _PNG_SIGNATURE:
        return decode_png(data, name)
    if data[:2] == b"\xff\xd8":
        return decode_jpeg(data, name)
    raise ImageDecodeError(f"{name}: neither a PNG nor a JPEG file (starts with {data[:8]!r})")


def _decode_pil(data: bytes, name: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            grey = im.mode in ("1", "L", "LA", "I", "I;16", "F") or (im.mode == "P" and _pil_palette_is_grey(im))
            out = np.asarray(im.convert("L" if grey else "RGB"))
    except Exception as e:  # Pillow raises many types for bad input (OSError, SyntaxError, ValueError, ...)
        raise ImageDecodeError(f"{name}: cannot decode image: {e}") from e
    return out[:, :, None] if out.ndim == 2 else out


def _pil_palette_is_grey(im) -> bool:
    pal = np.asarray(im.getpalette() or [], dtype=np.uint8).reshape(-1, 3)
    return pal.size > 0 and bool((pal == pal[:, :1]).all())


# ----------------------------------------------------------------------------------------------------------- JPEG

# ZIGZAG[k] = row-major index (row * 8 + col) of the k-th coefficient in the stream's zig-zag order.
ZIGZAG = np.array(
    [
        r * 8 + (s - r)
        for s in range(15)
        for r in (range(min(s, 7), max(0, s - 7) - 1, -1) if s % 2 == 0 else range(max(0, s - 7), min(s, 7) + 1))
    ],
    dtype=np.int64,
)

# libjpeg's default inverse DCT ("islow": Loeffler-Ligtenberg-Moschytz with 13-bit constants), reproduced exactly
# so that decoded pixels equal libjpeg's (and so Pillow's and TensorFlow's).
_CONST_BITS = 13
_PASS1_BITS = 2


def _c(x: float) -> int:
    return int(x * (1 << _CONST_BITS) + 0.5)


def _idct_1d(s: list[np.ndarray]) -> list[np.ndarray]:
    """One 8-point pass of libjpeg's islow IDCT on eight coefficient arrays; outputs are scaled by 2**CONST_BITS."""
    z1 = (s[2] + s[6]) * _c(0.541196100)
    tmp2 = z1 - s[6] * _c(1.847759065)
    tmp3 = z1 + s[2] * _c(0.765366865)
    tmp0 = (s[0] + s[4]) << _CONST_BITS
    tmp1 = (s[0] - s[4]) << _CONST_BITS
    tmp10, tmp13, tmp11, tmp12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    t0, t1, t2, t3 = s[7], s[5], s[3], s[1]
    z1, z2, z3, z4 = t0 + t3, t1 + t2, t0 + t2, t1 + t3
    z5 = (z3 + z4) * _c(1.175875602)
    t0 = t0 * _c(0.298631336)
    t1 = t1 * _c(2.053119869)
    t2 = t2 * _c(3.072711026)
    t3 = t3 * _c(1.501321110)
    z1 = z1 * -_c(0.899976223)
    z2 = z2 * -_c(2.562915447)
    z3 = z3 * -_c(1.961570560) + z5
    z4 = z4 * -_c(0.390180644) + z5
    t0 = t0 + z1 + z3
    t1 = t1 + z2 + z4
    t2 = t2 + z2 + z3
    t3 = t3 + z1 + z4
    return [tmp10 + t3, tmp11 + t2, tmp12 + t1, tmp13 + t0, tmp13 - t0, tmp12 - t1, tmp11 - t2, tmp10 - t3]


def _descale(x: np.ndarray, n: int) -> np.ndarray:
    return (x + (1 << (n - 1))) >> n


# Each pass is an integer-linear map before its rounding shift, so it is one integer matrix: column j of _ISLOW is
# the pass applied to the j-th unit vector.
_ISLOW = np.stack(_idct_1d(list(np.eye(8, dtype=np.int64))), axis=0)


def idct_islow(blocks: np.ndarray) -> np.ndarray:
    """Dequantised coefficient blocks (N, 8, 8) int, [row = vertical frequency] -> pixel values (N, 8, 8) in 0..255."""
    ws = _descale(_ISLOW @ blocks.astype(np.int64), _CONST_BITS - _PASS1_BITS)  # pass 1: down each column
    out = _descale(ws @ _ISLOW.T, _CONST_BITS + _PASS1_BITS + 3)  # pass 2: along each row
    return np.clip(out + 128, 0, 255)


_LUT_CACHE: dict[bytes, list[int]] = {}


def _huffman_lut(counts: bytes, symbols: bytes, name: str) -> list[int]:
    """A 65536-entry table: the next 16 bits of the stream -> (code length << 8) | symbol; 0 marks no valid code."""
    key = counts + symbols
    lut = _LUT_CACHE.get(key)
    if lut is not None:
        return lut
    table = np.zeros(1 << 16, dtype=np.int64)
    code = 0
    i = 0
    for length in range(1, 17):
        for _ in range(counts[length - 1]):
            if code >= (1 << length):
                raise ImageDecodeError(f"{name}: invalid Huffman table (too many codes of length {length})")
            shift = 16 - length
            table[code << shift : (code + 1) << shift] = (length << 8) | symbols[i]
            code += 1
            i += 1
        code <<= 1
    lut = table.tolist()
    if len(_LUT_CACHE) < 64:
        _LUT_CACHE[key] = lut
    return lut


def _u16(b: bytes, at: int) -> int:
    return (b[at] << 8) | b[at + 1]


def decode_jpeg(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode a baseline/sequential Huffman JPEG to uint8 (H, W, 1) or (H, W, 3)."""
    n = len(data)
    if data[:2] != b"\xff\xd8":
        raise ImageDecodeError(f"{name}: not a JPEG file (no start-of-image marker)")
    qtables: dict[int, np.ndarray] = {}
    dc_luts: dict[int, list[int]] = {}
    ac_luts: dict[int, list[int]] = {}
    frame = None
    restart = 0
    adobe_transform = None
    scans = 0
    pos = 2
    while True:
        if pos >= n:
            raise ImageDecodeError(f"{name}: truncated JPEG (no end-of-image marker)")
        if data[pos] != 0xFF:
            raise ImageDecodeError(f"{name}: corrupt JPEG (expected a marker at byte {pos})")
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:
            raise ImageDecodeError(f"{name}: truncated JPEG (no end-of-image marker)")
        marker = data[pos]
        pos += 1
        if marker == 0xD9:  # end of image
            break
        if marker == 0xD8 or 0xD0 <= marker <= 0xD7 or marker == 0x01:
            continue
        if pos + 2 > n:
            raise ImageDecodeError(f"{name}: truncated JPEG (segment header at byte {pos})")
        length = _u16(data, pos)
        seg = data[pos + 2 : pos + length]
        if length < 2 or len(seg) != length - 2:
            raise ImageDecodeError(f"{name}: truncated JPEG (segment 0xFF{marker:02X} at byte {pos})")
        pos += length
        if marker == 0xDB:
            _parse_dqt(seg, qtables, name)
        elif marker == 0xC4:
            _parse_dht(seg, dc_luts, ac_luts, name)
        elif marker in (0xC0, 0xC1):
            frame = _parse_sof(seg, name)
        elif 0xC2 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            kind = {0xC2: "progressive", 0xC3: "lossless"}.get(marker, "arithmetic-coded or hierarchical")
            raise ImageDecodeError(f"{name}: {kind} JPEG is not supported by the built-in decoder (install Pillow)")
        elif marker == 0xDD:
            restart = _u16(seg, 0) if len(seg) >= 2 else 0
        elif marker == 0xEE and seg[:5] == b"Adobe" and len(seg) >= 12:
            adobe_transform = seg[11]
        elif marker == 0xDA:
            if frame is None:
                raise ImageDecodeError(f"{name}: corrupt JPEG (scan before frame header)")
            pos = _decode_scan(data, pos, seg, frame, dc_luts, ac_luts, restart, name)
            scans += 1
    if frame is None or scans == 0:
        raise ImageDecodeError(f"{name}: corrupt JPEG (no frame or no scan)")
    return _reconstruct(frame, qtables, adobe_transform, name)


def _parse_dqt(seg: bytes, qtables: dict[int, np.ndarray], name: str) -> None:
    i = 0
    while i < len(seg):
        pq, tq = seg[i] >> 4, seg[i] & 15
        size = 128 if pq else 64
        body = seg[i + 1 : i + 1 + size]
        if len(body) != size:
            raise ImageDecodeError(f"{name}: corrupt JPEG (short quantisation table)")
        qtables[tq] = np.frombuffer(body, dtype=">u2" if pq else np.uint8).astype(np.int64)
        i += 1 + size


def _parse_dht(seg: bytes, dc: dict[int, list[int]], ac: dict[int, list[int]], name: str) -> None:
    i = 0
    while i < len(seg):
        if i + 17 > len(seg):
            raise ImageDecodeError(f"{name}: corrupt JPEG (short Huffman table)")
        tc, th = seg[i] >> 4, seg[i] & 15
        counts = seg[i + 1 : i + 17]
        total = sum(counts)
        symbols = seg[i + 17 : i + 17 + total]
        if len(symbols) != total:
            raise ImageDecodeError(f"{name}: corrupt JPEG (short Huffman table)")
        (ac if tc else dc)[th] = _huffman_lut(counts, symbols, name)
        i += 17 + total


def _parse_sof(seg: bytes, name: str) -> dict:
    if len(seg) < 6:
        raise ImageDecodeError(f"{name}: corrupt JPEG (short frame header)")
    precision, height, width, ncomp = seg[0], _u16(seg, 1), _u16(seg, 3), seg[5]
    if precision != 8:
        raise ImageDecodeError(f"{name}: {precision}-bit JPEG is not supported by the built-in decoder")
    if height == 0 or width == 0:
        raise ImageDecodeError(f"{name}: JPEG without a size in its frame header is not supported")
    if ncomp not in (1, 3) or len(seg) < 6 + 3 * ncomp:
        raise ImageDecodeError(f"{name}: JPEG with {ncomp} components is not supported (only grey and colour)")
    comps = []
    for c in range(ncomp):
        cid, hv, tq = seg[6 + 3 * c], seg[7 + 3 * c], seg[8 + 3 * c]
        h, v = hv >> 4, hv & 15
        if not (1 <= h <= 4 and 1 <= v <= 4):
            raise ImageDecodeError(f"{name}: corrupt JPEG (sampling factor {h}x{v})")
        comps.append({"id": cid, "h": h, "v": v, "tq": tq})
    hmax = max(c["h"] for c in comps)
    vmax = max(c["v"] for c in comps)
    mcux = -(-width // (8 * hmax))
    mcuy = -(-height // (8 * vmax))
    for c in comps:
        c["bw"], c["bh"] = mcux * c["h"], mcuy * c["v"]  # blocks in the padded grid
        c["cw"] = -(-width * c["h"] // hmax)  # the component's own size (before upsampling)
        c["ch"] = -(-height * c["v"] // vmax)
        c["coef"] = [0] * (c["bw"] * c["bh"] * 64)  # zig-zag ordered, quantised coefficients
    return {"width": width, "height": height, "comps": comps, "hmax": hmax, "vmax": vmax, "mcux": mcux, "mcuy": mcuy}


def _entropy_end(data: bytes, start: int, name: str) -> int:
    """Index of the marker that ends the entropy-coded data beginning at `start` (RSTn and stuffed 0xFF00 skipped)."""
    i = start
    n = len(data)
    while True:
        j = data.find(b"\xff", i)
        if j < 0 or j + 1 >= n:
            raise ImageDecodeError(f"{name}: truncated JPEG (scan data runs to the end of the file)")
        nxt = data[j + 1]
        if nxt == 0 or 0xD0 <= nxt <= 0xD7 or nxt == 0xFF:
            i = j + 1 if nxt == 0xFF else j + 2
            continue
        return j


def _decode_scan(data, pos, seg, frame, dc_luts, ac_luts, restart, name) -> int:
    ns = seg[0] if seg else 0
    if ns < 1 or len(seg) < 1 + 2 * ns + 3:
        raise ImageDecodeError(f"{name}: corrupt JPEG (short scan header)")
    by_id = {c["id"]: c for c in frame["comps"]}
    scomps = []
    for k in range(ns):
        cid, tables = seg[1 + 2 * k], seg[2 + 2 * k]
        if cid not in by_id:
            raise ImageDecodeError(f"{name}: corrupt JPEG (scan names unknown component {cid})")
        td, ta = tables >> 4, tables & 15
        if td not in dc_luts or ta not in ac_luts:
            raise ImageDecodeError(f"{name}: corrupt JPEG (scan uses an undefined Huffman table)")
        scomps.append((by_id[cid], dc_luts[td], ac_luts[ta]))
    end = _entropy_end(data, pos, name)
    raw = data[pos:end]
    chunks = re.split(rb"\xff[\xd0-\xd7]", raw) if restart else [raw]

    # The blocks of each MCU, in stream order: (component index in scan, offset of the block's coefficients).
    if ns == 1:
        c = scomps[0][0]
        bw_used = -(-c["cw"] // 8)
        bh_used = -(-c["ch"] // 8)
        mcus = [[(0, (by * c["bw"] + bx) * 64)] for by in range(bh_used) for bx in range(bw_used)]
    else:
        mcus = []
        for my in range(frame["mcuy"]):
            for mx in range(frame["mcux"]):
                blocks = []
                for si, (c, _, _) in enumerate(scomps):
                    for by in range(c["v"]):
                        for bx in range(c["h"]):
                            blocks.append((si, ((my * c["v"] + by) * c["bw"] + mx * c["h"] + bx) * 64))
                mcus.append(blocks)
    per_chunk = restart if restart else len(mcus)
    needed = -(-len(mcus) // per_chunk)
    if len(chunks) < needed:
        raise ImageDecodeError(f"{name}: truncated JPEG (scan has {len(chunks)} of {needed} restart intervals)")
    coefs = [c["coef"] for c, _, _ in scomps]
    dcs = [d for _, d, _ in scomps]
    acs = [a for _, _, a in scomps]
    for ci in range(needed):
        _decode_interval(chunks[ci], mcus[ci * per_chunk : (ci + 1) * per_chunk], coefs, dcs, acs, name)
    return end


def _decode_interval(chunk: bytes, mcus, coefs, dcs, acs, name: str) -> None:
    """Huffman-decode the MCUs of one restart interval into the coefficient lists (the hot loop)."""
    buf = chunk.replace(b"\xff\x00", b"\xff")
    nbits = 8 * len(buf)
    b = np.frombuffer(buf + b"\x00" * 8, dtype=np.uint8).astype(np.uint64)
    win = ((b[:-3] << 24) | (b[1:-2] << 16) | (b[2:-1] << 8) | b[3:]).tolist()  # 32 bits from each byte
    pred = [0] * len(coefs)
    pos = 0
    for blocks in mcus:
        for si, base in blocks:
            coef = coefs[si]
            lut = dcs[si]
            e = lut[(win[pos >> 3] >> (16 - (pos & 7))) & 0xFFFF]
            if not e:
                raise ImageDecodeError(f"{name}: corrupt JPEG (invalid Huffman code in scan data)")
            pos += e >> 8
            s = e & 15
            if s:
                v = (win[pos >> 3] >> (32 - (pos & 7) - s)) & ((1 << s) - 1)
                pos += s
                if v < (1 << (s - 1)):
                    v -= (1 << s) - 1
                pred[si] += v
            coef[base] = pred[si]
            lut = acs[si]
            k = 1
            while k < 64:
                e = lut[(win[pos >> 3] >> (16 - (pos & 7))) & 0xFFFF]
                if not e:
                    raise ImageDecodeError(f"{name}: corrupt JPEG (invalid Huffman code in scan data)")
                pos += e >> 8
                s = e & 15
                if not s:
                    if (e & 0xFF) == 0xF0:  # sixteen zeros
                        k += 16
                        continue
                    break  # end of block
                k += (e >> 4) & 15
                if k > 63:
                    raise ImageDecodeError(f"{name}: corrupt JPEG (coefficient index past the block)")
                v = (win[pos >> 3] >> (32 - (pos & 7) - s)) & ((1 << s) - 1)
                pos += s
                if v < (1 << (s - 1)):
                    v -= (1 << s) - 1
                coef[base + k] = v
                k += 1
            if pos > nbits:
                raise ImageDecodeError(f"{name}: truncated JPEG (scan data ends inside a block)")


def _reconstruct(frame: dict, qtables: dict[int, np.ndarray], adobe_transform: int | None, name: str) -> np.ndarray:
    comps = frame["comps"]
    for c in comps:
        if c["tq"] not in qtables:
            raise ImageDecodeError(f"{name}: corrupt JPEG (component uses undefined quantisation table {c['tq']})")
    zz = np.concatenate([np.asarray(c["coef"], dtype=np.int64).reshape(-1, 64) * qtables[c["tq"]] for c in comps])
    nat = np.empty_like(zz)
    nat[:, ZIGZAG] = zz
    pix = idct_islow(nat.reshape(-1, 8, 8))  # every component's blocks in one call: numpy overhead dominates here
    planes = []
    start = 0
    for c in comps:
        nb = c["bh"] * c["bw"]
        plane = pix[start : start + nb].reshape(c["bh"], c["bw"], 8, 8).transpose(0, 2, 1, 3)
        plane = plane.reshape(c["bh"] * 8, c["bw"] * 8)[: c["ch"], : c["cw"]]
        start += nb
        planes.append(_upsample(plane, frame["hmax"] // c["h"], frame["vmax"] // c["v"], frame, c, name))
    h, w = frame["height"], frame["width"]
    planes = [p[:h, :w] for p in planes]
    if len(planes) == 1:
        return planes[0].astype(np.uint8)[:, :, None]
    if adobe_transform == 0:  # Adobe's flag: the three components are R, G, B
        return np.stack(planes, axis=-1).astype(np.uint8)
    return _ycc_to_rgb(*planes)


def _upsample(plane: np.ndarray, fx: int, fy: int, frame: dict, comp: dict, name: str) -> np.ndarray:
    """Scale a subsampled component up to full size: libjpeg's triangle filter for 2x1/2x2, replication otherwise."""
    if frame["hmax"] % comp["h"] or frame["vmax"] % comp["v"]:
        raise ImageDecodeError(f"{name}: JPEG with fractional sampling ratios is not supported")
    if fx == 1 and fy == 1:
        return plane
    if fx == 2 and fy == 2:
        above = np.vstack([plane[:1], plane[:-1]])
        below = np.vstack([plane[1:], plane[-1:]])
        rows = np.empty((2 * plane.shape[0], plane.shape[1]), dtype=np.int64)
        rows[0::2] = 3 * plane + above  # column sums, weights 3/4 near row, 1/4 far row (times 4)
        rows[1::2] = 3 * plane + below
        left = np.hstack([rows[:, :1], rows[:, :-1]])
        right = np.hstack([rows[:, 1:], rows[:, -1:]])
        out = np.empty((rows.shape[0], 2 * rows.shape[1]), dtype=np.int64)
        out[:, 0::2] = (3 * rows + left + 8) >> 4
        out[:, 1::2] = (3 * rows + right + 7) >> 4
        return out
    if fx == 2 and fy == 1:
        left = np.hstack([plane[:, :1], plane[:, :-1]])
        right = np.hstack([plane[:, 1:], plane[:, -1:]])
        out = np.empty((plane.shape[0], 2 * plane.shape[1]), dtype=np.int64)
        out[:, 0::2] = (3 * plane + left + 1) >> 2
        out[:, 1::2] = (3 * plane + right + 2) >> 2
        return out
    return np.repeat(np.repeat(plane, fy, axis=0), fx, axis=1)


def _fix(x: float) -> int:
    return int(x * 65536 + 0.5)


def _ycc_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """JFIF YCbCr -> RGB with libjpeg's 16-bit fixed-point arithmetic (so results match it exactly)."""
    cb = cb - 128
    cr = cr - 128
    half = 1 << 15
    r = y + ((_fix(1.40200) * cr + half) >> 16)
    g = y + ((-_fix(0.34414) * cb - _fix(0.71414) * cr + half) >> 16)
    b = y + ((_fix(1.77200) * cb + half) >> 16)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------------------------ PNG

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def decode_png(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode a non-interlaced PNG to uint8 (H, W, 1) or (H, W, 3); alpha is dropped, 16-bit keeps the high byte."""
    if data[:8] != _PNG_SIGNATURE:
        raise ImageDecodeError(f"{name}: not a PNG file (bad signature)")
    pos = 8
    header = None
    palette = None
    idat = []
    ended = False
    while pos < len(data):
        if pos + 8 > len(data):
            raise ImageDecodeError(f"{name}: truncated PNG (chunk header at byte {pos})")
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        crc = data[pos + 8 + length : pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            raise ImageDecodeError(f"{name}: truncated PNG ({kind.decode('latin-1')!r} chunk at byte {pos})")
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            raise ImageDecodeError(f"{name}: corrupt PNG (CRC mismatch in {kind.decode('latin-1')!r} chunk)")
        pos += 12 + length
        if kind == b"IHDR":
            if length != 13:
                raise ImageDecodeError(f"{name}: corrupt PNG (IHDR of {length} bytes)")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = np.frombuffer(body, dtype=np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            ended = True
            break
    if header is None or not ended:
        raise ImageDecodeError(f"{name}: truncated PNG (no {'IHDR' if header is None else 'IEND'} chunk)")
    width, height, depth, ctype, _, _, interlace = header
    if ctype not in _PNG_CHANNELS or depth not in (1, 2, 4, 8, 16) or (depth < 8 and ctype not in (0, 3)):
        raise ImageDecodeError(f"{name}: corrupt PNG (colour type {ctype} with bit depth {depth})")
    if interlace:
        raise ImageDecodeError(f"{name}: interlaced PNG is not supported by the built-in decoder (install Pillow)")
    if ctype == 3 and palette is None:
        raise ImageDecodeError(f"{name}: corrupt PNG (palette image without PLTE chunk)")
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise ImageDecodeError(f"{name}: corrupt PNG (image data: {e})") from e
    channels = _PNG_CHANNELS[ctype]
    bits_pp = channels * depth
    stride = -(-width * bits_pp // 8)
    bpp = max(1, bits_pp // 8)
    if len(raw) < height * (stride + 1):
        raise ImageDecodeError(f"{name}: truncated PNG (image data is {len(raw)} of {height * (stride + 1)} bytes)")
    rows = _png_unfilter(np.frombuffer(raw[: height * (stride + 1)], np.uint8).reshape(height, stride + 1), bpp, name)
    if depth == 16:
        pix = rows.reshape(height, width, channels, 2)[..., 0]
    elif depth == 8:
        pix = rows.reshape(height, width, channels)
    else:
        bits = np.unpackbits(rows, axis=1)[:, : width * depth].reshape(height, width, depth)
        vals = (bits * (1 << np.arange(depth - 1, -1, -1))).sum(-1)
        pix = (vals if ctype == 3 else vals * 255 // ((1 << depth) - 1)).astype(np.uint8)[:, :, None]
    if ctype == 3:
        if int(pix.max(initial=0)) >= len(palette):
            raise ImageDecodeError(f"{name}: corrupt PNG (palette index past the palette)")
        return palette[pix[:, :, 0]]
    if ctype in (4, 6):
        pix = pix[:, :, :-1]
    return np.ascontiguousarray(pix, dtype=np.uint8)


def _png_unfilter(filtered: np.ndarray, bpp: int, name: str) -> np.ndarray:
    height, width1 = filtered.shape
    out = np.zeros((height, width1 - 1), dtype=np.uint8)
    prev = np.zeros(width1 - 1, dtype=np.int64)
    for y in range(height):
        ftype = int(filtered[y, 0])
        line = filtered[y, 1:].astype(np.int64)
        if ftype == 0:
            cur = line
        elif ftype == 1:  # Sub: a running sum per byte position within a pixel
            pad = (-len(line)) % bpp
            cur = (np.cumsum(np.pad(line, (0, pad)).reshape(-1, bpp), axis=0).reshape(-1)[: len(line)]) & 0xFF
        elif ftype == 2:
            cur = (line + prev) & 0xFF
        elif ftype in (3, 4):
            cur = np.zeros_like(line)
            for i in range(len(line)):
                a = cur[i - bpp] if i >= bpp else 0
                b = prev[i]
                if ftype == 3:
                    cur[i] = (line[i] + ((a + b) >> 1)) & 0xFF
                else:
                    c = prev[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    cur[i] = (line[i] + pred) & 0xFF
        else:
            raise ImageDecodeError(f"{name}: corrupt PNG (filter type {ftype} on row {y})")
        out[y] = cur
        prev = cur
    return out
