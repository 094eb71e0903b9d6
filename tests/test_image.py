"""The CIFAR-10 image task and its decoders: LRA's grayscale, pickle batches, image trees, JPEG/PNG, bad input."""

from __future__ import annotations

import math
import pickle
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from lra.core.errors import DataCorruptError, DataMissingError
from tasks import _imagecodec as codec
from tasks import image as I
from tasks.registry import TASKS, build_task

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10_jpeg.tar.gz"
RNG = np.random.default_rng(1234)


def grey_reference(rgb: np.ndarray) -> np.ndarray:
    """tf.image.rgb_to_grayscale + cast, by hand in float64: floor((.2989 R + .587 G + .114 B) / 255 * 255.5)."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    return np.floor((0.2989 * r + 0.5870 * g + 0.1140 * b) / 255.0 * 255.5).astype(np.int64)


# ------------------------------------------------------------------------------------ an independent JPEG encoder

# The standard zig-zag sequence (JPEG spec, figure A.6): position k of the stream -> row-major index in the block.
ZIGZAG = [0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14,
          21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53,
          60, 61, 54, 47, 55, 62, 63]  # fmt: skip
DCT = np.array([[(math.sqrt(0.5) if k == 0 else 1.0) / 2 * math.cos((2 * n + 1) * k * math.pi / 16) for n in range(8)]
                for k in range(8)])  # fmt: skip
AC_SYMBOLS = [0x00, 0xF0] + [(r << 4) | s for r in range(16) for s in range(1, 11)]  # EOB, ZRL, run/size


class BitWriter:
    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value: int, bits: int) -> None:
        for i in range(bits - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)  # byte stuffing
                self.acc = self.n = 0

    def flush(self) -> None:
        while self.n:
            self.put(1, 1)  # pad with one-bits


def category(v: int) -> tuple[int, int]:
    s = abs(v).bit_length()
    return s, (v if v >= 0 else v + (1 << s) - 1)


def encode_jpeg(img: np.ndarray, sampling: tuple[int, int] = (1, 1), restart: int = 0, q: int = 1) -> bytes:
    """Baseline JPEG of a uint8 (H, W, 3) or (H, W, 1) image: luma sampled (h, v), chroma 1x1, every quantiser = q.

    Huffman tables: DC categories 0..11 get 4-bit codes, the 162 AC symbols 8-bit codes (valid canonical tables).
    """
    h_img, w_img, ncomp = img.shape
    x = img.astype(np.float64)
    if ncomp == 3:
        r, g, b = x[..., 0], x[..., 1], x[..., 2]
        planes = [
            0.299 * r + 0.587 * g + 0.114 * b,
            -0.168736 * r - 0.331264 * g + 0.5 * b + 128,
            0.5 * r - 0.418688 * g - 0.081312 * b + 128,
        ]
        factors = [sampling, (1, 1), (1, 1)]
    else:
        planes, factors = [x[..., 0]], [(1, 1)]
    hmax, vmax = factors[0]
    mcu_w, mcu_h = 8 * hmax, 8 * vmax
    mcux, mcuy = -(-w_img // mcu_w), -(-h_img // mcu_h)
    comp_blocks = []
    for plane, (h, v) in zip(planes, factors):
        full = np.pad(plane, ((0, mcuy * mcu_h - h_img), (0, mcux * mcu_w - w_img)), mode="edge")
        fy, fx = vmax // v, hmax // h
        small = full.reshape(full.shape[0] // fy, fy, full.shape[1] // fx, fx).mean(axis=(1, 3))
        by, bx = small.shape[0] // 8, small.shape[1] // 8
        blocks = small.reshape(by, 8, bx, 8).transpose(0, 2, 1, 3) - 128
        coef = np.rint(DCT @ blocks @ DCT.T / q).astype(np.int64)  # forward DCT, F[v, u]
        comp_blocks.append(coef.reshape(by, bx, 64)[:, :, ZIGZAG])
    bw = BitWriter()
    pred = [0] * ncomp
    mcu = 0
    rst = 0
    for my in range(mcuy):
        for mx in range(mcux):
            if restart and mcu and mcu % restart == 0:
                bw.flush()
                bw.out += bytes([0xFF, 0xD0 + rst % 8])
                rst += 1
                pred = [0] * ncomp
            for ci, (h, v) in enumerate(factors):
                for yy in range(v):
                    for xx in range(h):
                        zz = comp_blocks[ci][my * v + yy, mx * h + xx]
                        s, bits = category(int(zz[0]) - pred[ci])
                        pred[ci] = int(zz[0])
                        bw.put(s, 4)
                        bw.put(bits, s)
                        run = 0
                        for k in range(1, 64):
                            val = int(zz[k])
                            if val == 0:
                                run += 1
                                continue
                            while run > 15:
                                bw.put(AC_SYMBOLS.index(0xF0), 8)
                                run -= 16
                            s, bits = category(val)
                            bw.put(AC_SYMBOLS.index((run << 4) | s), 8)
                            bw.put(bits, s)
                            run = 0
                        if run:
                            bw.put(AC_SYMBOLS.index(0x00), 8)
            mcu += 1
    bw.flush()

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body

    ids = list(range(1, ncomp + 1))
    sof = struct.pack(">BHHB", 8, h_img, w_img, ncomp) + b"".join(
        bytes([cid, (h << 4) | v, 0]) for cid, (h, v) in zip(ids, factors)
    )
    dc_counts = bytes([0, 0, 0, 12] + [0] * 12)
    ac_counts = bytes([0] * 7 + [162] + [0] * 8)
    out = b"\xff\xd8" + segment(0xDB, bytes([0]) + bytes([q] * 64)) + segment(0xC0, sof)
    out += segment(0xC4, bytes([0x00]) + dc_counts + bytes(range(12)))
    out += segment(0xC4, bytes([0x10]) + ac_counts + bytes(AC_SYMBOLS))
    if restart:
        out += segment(0xDD, struct.pack(">H", restart))
    sos = bytes([ncomp]) + b"".join(bytes([cid, 0x00]) for cid in ids) + bytes([0, 63, 0])
    return out + segment(0xDA, sos) + bytes(bw.out) + b"\xff\xd9"


# ---------------------------------------------------------------------------------------- an independent PNG writer


def encode_png(img: np.ndarray, ctype: int, palette: np.ndarray | None = None) -> bytes:
    """8-bit PNG; row y uses filter type y % 5, so every filter is exercised."""
    h, w = img.shape[:2]
    px = img.reshape(h, -1).astype(np.int64)
    bpp = px.shape[1] // w
    raw = bytearray()
    for y in range(h):
        ftype = y % 5
        raw.append(ftype)
        for i in range(px.shape[1]):
            x = int(px[y, i])
            a = int(px[y, i - bpp]) if i >= bpp else 0
            b = int(px[y - 1, i]) if y else 0
            c = int(px[y - 1, i - bpp]) if y and i >= bpp else 0
            if ftype == 0:
                pred = 0
            elif ftype == 1:
                pred = a
            elif ftype == 2:
                pred = b
            elif ftype == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            raw.append((x - pred) % 256)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0))
    if palette is not None:
        out += chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    return out + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")


def smooth_image(h: int = 32, w: int = 32, channels: int = 3) -> np.ndarray:
    """Gradients plus mild noise: what JPEG keeps well (AC coefficients stay in baseline range at quantiser 1)."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = [40 + 5 * xx + 2 * yy, 200 - 3 * yy + xx, 90 + 2 * xx + 3 * yy][:channels]
    img = np.stack(base, axis=-1) + RNG.integers(-6, 7, size=(h, w, channels))
    return np.clip(img, 0, 255).astype(np.uint8)


# -------------------------------------------------------------------------------------------------------- tests


def test_registered_with_lras_shape():
    cls = TASKS.get("image")
    task = build_task("image", data_dir="/x")
    assert cls.num_classes == 10 and task.vocab_size == 257 and task.max_length == 1024
    with pytest.raises(ValueError, match="must be 1024"):
        build_task("image", max_length=512)


def test_lra_grayscale_matches_the_hand_evaluated_formula():
    rgb = RNG.integers(0, 256, size=(4000, 3)).astype(np.uint8)
    exact = (0.2989 * rgb[:, 0] + 0.587 * rgb[:, 1] + 0.114 * rgb[:, 2]) / 255 * 255.5
    clear = np.abs(exact - np.round(exact)) > 1e-3  # float32 vs float64 can only differ right at an integer
    got = I.lra_grayscale(rgb).astype(np.int64)
    np.testing.assert_array_equal(got[clear], grey_reference(rgb)[clear])
    assert np.abs(got - grey_reference(rgb)).max() <= 1
    corners = np.array([[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
    assert I.lra_grayscale(corners).tolist() == [0, 255, 76, 149, 29]  # e.g. 0.587 * 255.5 = 149.97 -> 149


# JPEG ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", [(1, 1), (2, 2), (2, 1)])
def test_jpeg_decoder_inverts_an_independent_encoder(sampling):
    img = smooth_image(40, 24)  # not a multiple of the MCU: exercises edge padding and cropping
    out = codec.decode_jpeg(encode_jpeg(img, sampling), "t.jpg")
    assert out.shape == img.shape and out.dtype == np.uint8
    grey_err = np.abs(I.lra_grayscale(out).astype(int) - I.lra_grayscale(img).astype(int))
    assert grey_err.max() <= 2  # quantiser 1: only rounding (DCT, colour conversion) remains
    if sampling == (1, 1):
        assert np.abs(out.astype(int) - img.astype(int)).max() <= 3


def test_jpeg_restart_intervals_and_greyscale():
    img = smooth_image(32, 32)
    plain = codec.decode_jpeg(encode_jpeg(img, (2, 2)), "a.jpg")
    np.testing.assert_array_equal(codec.decode_jpeg(encode_jpeg(img, (2, 2), restart=3), "b.jpg"), plain)
    grey = smooth_image(17, 33, channels=1)
    out = codec.decode_jpeg(encode_jpeg(grey), "g.jpg")
    assert out.shape == (17, 33, 1) and np.abs(out.astype(int) - grey.astype(int)).max() <= 1


def test_jpeg_coarse_quantiser_still_decodes_the_encoded_coefficients():
    img = smooth_image(16, 16, channels=1)
    out = codec.decode_jpeg(encode_jpeg(img, q=16), "q.jpg").astype(int)
    assert np.abs(out - img.astype(int)).mean() < 4  # lossy, but the picture survives


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: b"\x00\x01" + d[2:], "not a JPEG"),
        (lambda d: d.replace(b"\xff\xc0", b"\xff\xc2", 1), "progressive"),
    ],
)
def test_jpeg_bad_input_is_reported(damage, message):
    data = encode_jpeg(smooth_image(), (2, 2))
    with pytest.raises(codec.ImageDecodeError, match=message) as err:
        codec.decode_jpeg(damage(data), "cat.jpg")
    assert "cat.jpg" in str(err.value)


def test_idct_matches_the_float_definition_to_rounding():
    coef = RNG.integers(-300, 300, size=(50, 8, 8))
    coef[:, 4:, 4:] = 0
    exact = DCT.T @ coef @ DCT + 128
    got = codec.idct_islow(coef)
    inside = (exact > 0.5) & (exact < 254.5)
    assert np.abs(got[inside] - exact[inside]).max() <= 1


# PNG ---------------------------------------------------------------------------------------------------------------


def test_png_decoder_reads_every_colour_type_and_filter():
    rgb = RNG.integers(0, 256, size=(7, 9, 3)).astype(np.uint8)
    np.testing.assert_array_equal(codec.decode_png(encode_png(rgb, 2)), rgb)
    rgba = np.concatenate([rgb, RNG.integers(0, 256, size=(7, 9, 1)).astype(np.uint8)], axis=-1)
    np.testing.assert_array_equal(codec.decode_png(encode_png(rgba, 6)), rgb)  # alpha dropped
    grey = RNG.integers(0, 256, size=(6, 5, 1)).astype(np.uint8)
    np.testing.assert_array_equal(codec.decode_png(encode_png(grey, 0)), grey)
    palette = RNG.integers(0, 256, size=(16, 3))
    idx = RNG.integers(0, 16, size=(5, 8, 1)).astype(np.uint8)
    np.testing.assert_array_equal(codec.decode_png(encode_png(idx, 3, palette)), palette[idx[:, :, 0]])


def test_png_bad_input_is_reported():
    data = encode_png(smooth_image(8, 8), 2)
    with pytest.raises(codec.ImageDecodeError, match="truncated"):
        codec.decode_png(data[:40], "x.png")
    flipped = bytearray(data)
    flipped[40] ^= 0xFF
    with pytest.raises(codec.ImageDecodeError, match="CRC"):
        codec.decode_png(bytes(flipped), "x.png")
    with pytest.raises(codec.ImageDecodeError, match="neither a PNG nor a JPEG"):
        codec.decode_image(b"GIF89a....", "x.gif", use_pil=False)


# pickle batches ------------------------------------------------------------------------------------------------


def make_batches(folder: Path, per_batch: int = 4, n_test: int = 6) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A tiny cifar-10-batches-py: 5 train batches and a test batch, pickled (protocol 2) like the originals."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    names = [*I.TRAIN_BATCHES, I.TEST_BATCH]
    for bi, name in enumerate(names):
        n = n_test if name == I.TEST_BATCH else per_batch
        rgb = RNG.integers(0, 256, size=(n, 32, 32, 3)).astype(np.uint8)
        rgb[:, 0, 0, 0] = np.arange(n) + 10 * bi  # every image unique
        labels = [int(x) for x in RNG.integers(0, 10, size=n)]
        data = rgb.transpose(0, 3, 1, 2).reshape(n, 3072)  # R plane, G plane, B plane
        blob = {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"x.png"] * n}
        data = pickle.dumps(blob, protocol=2)
        if bi % 2:  # numpy 1.x wrote this module name (the original files were made with it)
            data = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        (folder / name).write_bytes(data)
        made[name] = (rgb, np.array(labels))
    return made


def match_rows(task, splits: tuple[str, ...], want: list[tuple[np.ndarray, int]]) -> None:
    """The stored rows of `splits` are exactly the images of `want` (grey + 1, by the hand formula) with their labels.

    float32 (TF's arithmetic) and the float64 formula can differ by one level right at an integer: rows are matched to
    the nearest expected image and allowed that difference.
    """
    expected = np.stack([grey_reference(img).reshape(-1) + 1 for img, _ in want])
    labels = np.array([lab for _, lab in want])
    used = []
    for split in splits:
        data = task.load(split)
        assert data.tokens.shape[1] == 1024 and data.tokens.min() >= 1
        for row, lab in zip(data.tokens, data.labels):
            dist = np.abs(expected - row.astype(np.int64)).max(axis=1)
            i = int(dist.argmin())
            assert dist[i] <= 1 and labels[i] == lab
            used.append(i)
    assert sorted(used) == list(range(len(want)))  # every image once: the splits partition the source


def batches_as_list(made: dict, names) -> list[tuple[np.ndarray, int]]:
    return [(img, int(lab)) for name in names for img, lab in zip(*made[name])]


def check_against(task, made: dict) -> None:
    match_rows(task, ("train", "val"), batches_as_list(made, I.TRAIN_BATCHES))
    match_rows(task, ("test",), batches_as_list(made, [I.TEST_BATCH]))


def test_pickle_batches_folder_and_archive(tmp_path):
    made = make_batches(tmp_path / "src" / "cifar-10-batches-py")
    task = build_task("image", data_dir=tmp_path / "a", source=str(tmp_path / "src"), num_val=5)
    check_against(task, made)
    assert (len(task.load("train")), len(task.load("val"))) == (15, 5)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    other = build_task("image", data_dir=tmp_path / "b", source=str(archive), num_val=5)
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(other.load(split).tokens, task.load(split).tokens)
        np.testing.assert_array_equal(other.load(split).labels, task.load(split).labels)
    assert other.info()["source_kind"] == "python batches (archive)"


def test_pickle_with_code_or_bad_labels_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("this must not run",))

    folder = tmp_path / "cifar-10-batches-py"
    make_batches(folder)
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2))
    with pytest.raises(DataCorruptError, match=r"data_batch_3: not a readable CIFAR-10 python batch.*refusing"):
        build_task("image", data_dir=tmp_path / "c", source=str(folder), num_val=2).prepare()
    make_batches(folder)
    blob = pickle.loads((folder / "test_batch").read_bytes())
    blob[b"labels"][2] = 10
    (folder / "test_batch").write_bytes(pickle.dumps(blob, protocol=2))
    with pytest.raises(DataCorruptError, match=r"test_batch: label 10 of image 2 is not a CIFAR-10 class"):
        build_task("image", data_dir=tmp_path / "c", source=str(folder), num_val=2).prepare()


# image trees ---------------------------------------------------------------------------------------------------


def make_tree(root: Path, kind: str = "png") -> dict[str, list[tuple[np.ndarray, int]]]:
    """{train,test}/<class>/NNNN.<kind> for three classes, created in an order unlike CIFAR's label order."""
    made = {"train": [], "test": []}
    for split, n in (("train", 4), ("test", 2)):
        for cls in ("truck", "airplane", "cat"):
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                img = smooth_image()
                img[0, 0] = [len(made[split]), 0, 0]
                data = encode_png(img, 2) if kind == "png" else encode_jpeg(img, (2, 2))
                (root / split / cls / f"{i:04d}.{kind}").write_bytes(data)
                decoded = img if kind == "png" else codec.decode_jpeg(data)
                made[split].append((decoded, I.CLASSES.index(cls)))
    return made


def check_tree(task, made) -> None:
    match_rows(task, ("train", "val"), made["train"])
    match_rows(task, ("test",), made["test"])
    assert sorted(task.load("test").labels.tolist()) == [0, 0, 3, 3, 9, 9]  # canonical ids: airplane, cat, truck


def test_png_tree_folder_and_tar_in_canonical_class_order(tmp_path):
    made = make_tree(tmp_path / "tree")
    task = build_task("image", data_dir=tmp_path / "a", source=str(tmp_path / "tree"), num_val=3)
    task.prepare(workers=2)
    check_tree(task, made)
    archive = tmp_path / "tree.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(tmp_path / "tree" / "test", arcname="cifar/test")
        tf.add(tmp_path / "tree" / "train", arcname="cifar/train")
    other = build_task("image", data_dir=tmp_path / "b", source=str(archive), num_val=3)
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(other.load(split).tokens, task.load(split).tokens)


def test_jpeg_tree_in_a_tar_gz(tmp_path):
    made = make_tree(tmp_path / "tree", kind="jpg")
    archive = tmp_path / "cifar10_jpeg.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for split in ("train", "test"):
            tf.add(tmp_path / "tree" / split, arcname=split)
    task = build_task("image", data_dir=tmp_path / "c", source=str(archive), num_val=2, num_train=5)
    assert len(task.load("train")) == 5  # capped
    full = build_task("image", data_dir=tmp_path / "c", num_val=2)
    check_tree(full, made)


def test_unknown_class_unreadable_image_and_truncated_archive_keep_the_cache(tmp_path):
    make_tree(tmp_path / "tree")
    task = build_task("image", data_dir=tmp_path / "cache", source=str(tmp_path / "tree"), num_val=2)
    task.prepare()
    before = task.load("train").tokens.copy()

    (tmp_path / "tree" / "train" / "cat" / "0002.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with pytest.raises(DataCorruptError, match=r"train/cat/0002\.png: unreadable image"):
        task.prepare(workers=2)
    (tmp_path / "tree" / "train" / "cat" / "0002.png").unlink()

    (tmp_path / "tree" / "train" / "kangaroo").mkdir()
    (tmp_path / "tree" / "train" / "kangaroo" / "0.png").write_bytes(encode_png(smooth_image(), 2))
    with pytest.raises(DataCorruptError, match="class folder 'kangaroo' is not a CIFAR-10 class"):
        task.prepare()

    archive = tmp_path / "t.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tmp_path / "tree" / "train" / "cat", arcname="train/cat")
    archive.write_bytes(archive.read_bytes()[:-200])
    with pytest.raises(DataCorruptError, match=r"t\.tar\.gz: truncated or corrupt archive"):
        task.prepare(source=str(archive))

    np.testing.assert_array_equal(task.load("train").tokens, before)
    assert [p.name for p in (tmp_path / "cache" / "image").iterdir()] == [task.cache().path.name]


def test_missing_data_message(tmp_path):
    with pytest.raises(DataMissingError) as err:
        build_task("image", data_dir=tmp_path).load("test")
    assert "lra data prepare image --from /path/to/cifar-10-python.tar.gz" in str(err.value)
    assert "cs.toronto.edu" in str(err.value)


# the real archive ----------------------------------------------------------------------------------------------

# train/airplane/0000.jpg decoded by libjpeg-turbo (Pillow 13.0), rows 0 and 16, through tf's grey formula.
KNOWN_ROWS = {
    0: [201, 203, 204, 204, 208, 213, 214, 211, 203, 222, 223, 207, 218, 227, 212, 214,
        217, 222, 220, 213, 217, 225, 220, 205, 212, 211, 211, 209, 207, 205, 202, 201],
    16: [227, 222, 233, 228, 224, 224, 195, 165, 128, 57, 4, 7, 18, 7, 5, 18,
         7, 7, 6, 12, 30, 50, 55, 50, 159, 255, 255, 231, 255, 239, 255, 248],
}  # fmt: skip


@pytest.mark.skipif(not REAL.is_file(), reason=f"the real CIFAR-10 archive is not at {REAL}")
def test_real_cifar_archive_counts_and_known_image():
    with tarfile.open(REAL) as tf:  # counts from the listing (decoding all 60k images is a minute of CPU)
        names = [m.name for m in tf.getmembers() if m.isfile()]
        data = tf.extractfile("train/airplane/0000.jpg").read()
        sample = [(n, tf.extractfile(n).read()) for n in names if n.startswith("test/ship/00")][:40]
    for split, per_class in (("train", 5000), ("test", 1000)):
        for cls in I.CLASSES:
            assert sum(n.startswith(f"{split}/{cls}/") for n in names) == per_class, (split, cls)
    assert len(names) == 60000
    grey = I.lra_grayscale(codec.decode_jpeg(data, "train/airplane/0000.jpg"))
    for row, values in KNOWN_ROWS.items():
        assert grey[row].tolist() == values
    if codec.pil_available():  # then the built-in decoder must agree with libjpeg exactly
        for name, blob in sample:
            np.testing.assert_array_equal(codec.decode_jpeg(blob, name), codec.decode_image(blob, name, use_pil=True))
    else:
        for name, blob in sample:
            assert codec.decode_jpeg(blob, name).shape == (32, 32, 3)


@pytest.mark.parametrize("preset", [None, "tiny", "full"])
def test_config_data_settings_build_the_task(tmp_path, preset):
    from lra.train.config import load_config

    cfg = load_config("image", preset)
    task = build_task(cfg["task"], data_dir=tmp_path, **cfg["data"])
    assert task.name == "image" and task.max_length == cfg["data"]["max_length"]
