"""The CIFAR-10 image task: LRA's grayscale, Pillow decoding, pickle batches, image trees, bad input, the real data."""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lra.core.errors import DataCorruptError, DataMissingError
from tasks import image as I
from tasks._imagefile import decode_image
from tasks.registry import TASKS, build_task

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10_jpeg.tar.gz"
RNG = np.random.default_rng(1234)


def grey_reference(rgb: np.ndarray) -> np.ndarray:
    """tf.image.rgb_to_grayscale + cast, by hand in float64: floor((.2989 R + .587 G + .114 B) / 255 * 255.5)."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    return np.floor((0.2989 * r + 0.5870 * g + 0.1140 * b) / 255.0 * 255.5).astype(np.int64)


# --------------------------------------------------------------------------------------- fixtures written by Pillow


def png_bytes(img: np.ndarray, **save: object) -> bytes:
    """A PNG of a uint8 (H, W, C) / (H, W) array (or a uint16 (H, W) one: 16-bit grey), written by Pillow."""
    buf = io.BytesIO()
    Image.fromarray(img[:, :, 0] if img.ndim == 3 and img.shape[2] == 1 else img).save(buf, "PNG", **save)
    return buf.getvalue()


def jpeg_bytes(img: np.ndarray, quality: int = 95) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def pillow_rgb(data: bytes) -> np.ndarray:
    """What libjpeg (through Pillow) decodes, as the expected pixels of a lossy fixture."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


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


# decoding -------------------------------------------------------------------------------------------------------


def test_decoded_images_keep_grey_as_one_channel_and_drop_alpha():
    rgb = RNG.integers(0, 256, size=(7, 9, 3)).astype(np.uint8)
    np.testing.assert_array_equal(decode_image(png_bytes(rgb), "a.png"), rgb)
    rgba = np.concatenate([rgb, RNG.integers(0, 256, size=(7, 9, 1)).astype(np.uint8)], axis=-1)
    np.testing.assert_array_equal(decode_image(png_bytes(rgba), "b.png"), rgb)  # alpha dropped
    grey = RNG.integers(0, 256, size=(6, 5, 1)).astype(np.uint8)
    np.testing.assert_array_equal(decode_image(png_bytes(grey), "c.png"), grey)
    deep = RNG.integers(0, 65536, size=(4, 6)).astype(np.uint16)
    np.testing.assert_array_equal(decode_image(png_bytes(deep), "e.png")[:, :, 0], deep // 256)  # 16-bit: high byte
    idx = RNG.integers(0, 16, size=(5, 8)).astype(np.uint8)
    for palette, channels in ((RNG.integers(0, 256, size=(16, 3)), 3), (np.repeat(np.arange(16) * 16, 3), 1)):
        im = Image.fromarray(idx, "P")
        im.putpalette(palette.astype(np.uint8).reshape(-1).tolist())
        buf = io.BytesIO()
        im.save(buf, "PNG")
        want = np.asarray(palette, dtype=np.uint8).reshape(-1, 3)[idx][:, :, :channels]
        np.testing.assert_array_equal(decode_image(buf.getvalue(), "f.png"), want)  # grey palette: one channel


def test_jpeg_decodes_close_to_the_encoded_image():
    img = smooth_image(40, 24)
    out = decode_image(jpeg_bytes(img, quality=100), "t.jpg")
    assert out.shape == img.shape and out.dtype == np.uint8
    assert np.abs(I.lra_grayscale(out).astype(int) - I.lra_grayscale(img).astype(int)).max() <= 3


def test_bad_image_bytes_name_the_file(tmp_path):
    data = png_bytes(smooth_image(8, 8))
    for bad in (data[:40], data[: len(data) - 30], b"GIF89a....", b""):
        with pytest.raises(DataCorruptError, match=r"^cat\.png: cannot (decode|read) image"):
            decode_image(bad, "cat.png")
    with pytest.raises(DataCorruptError, match="cannot read image: No such file"):
        decode_image(tmp_path / "absent.png", "absent.png")


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
    assert other.info()["details"]["source_kind"] == "python batches (archive)"


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
                data = png_bytes(img) if kind == "png" else jpeg_bytes(img)
                (root / split / cls / f"{i:04d}.{kind}").write_bytes(data)
                decoded = img if kind == "png" else pillow_rgb(data)
                made[split].append((decoded, I.CLASSES.index(cls)))
    return made


def check_tree(task, made) -> None:
    match_rows(task, ("train", "val"), made["train"])
    match_rows(task, ("test",), made["test"])
    assert sorted(task.load("test").labels.tolist()) == [0, 0, 3, 3, 9, 9]  # canonical ids: airplane, cat, truck


def test_png_tree_folder_and_tar_in_canonical_class_order(tmp_path, monkeypatch):
    made = make_tree(tmp_path / "tree")
    task = build_task("image", data_dir=tmp_path / "a", source=str(tmp_path / "tree"), num_val=3)
    monkeypatch.setattr(I, "POOL_MIN_IMAGES", 1)
    task.prepare(workers=2)  # decoded in two worker processes
    monkeypatch.undo()
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


def test_unknown_class_unreadable_image_and_truncated_archive_keep_the_cache(tmp_path, monkeypatch):
    make_tree(tmp_path / "tree")
    task = build_task("image", data_dir=tmp_path / "cache", source=str(tmp_path / "tree"), num_val=2)
    task.prepare()
    before = task.load("train").tokens.copy()

    (tmp_path / "tree" / "train" / "cat" / "0002.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    monkeypatch.setattr(I, "POOL_MIN_IMAGES", 1)
    with pytest.raises(DataCorruptError, match=r"train/cat/0002\.png: cannot (decode|read) image"):
        task.prepare(workers=2)  # raised in a worker process, reported here
    monkeypatch.undo()
    (tmp_path / "tree" / "train" / "cat" / "0002.png").unlink()

    (tmp_path / "tree" / "train" / "kangaroo").mkdir()
    (tmp_path / "tree" / "train" / "kangaroo" / "0.png").write_bytes(png_bytes(smooth_image()))
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

# The cache of the real archive (num_val 5000, seed 0) as the project's former hand-written decoder built it, before
# Pillow became the decoder: SHA-256 of each split's token and label arrays, examples per class, spot tokens. That
# decoder reproduced libjpeg's integer IDCT, fancy upsampling and colour tables; it and Pillow agreed on all 60,000
# images, so the cache is byte for byte the same.
BEFORE = {
    "train": ("0ad48eb63d6e8d719ca8ecbaa44f6cd2071ba1c1438af33a88f9863652447d93",
              "5f7bb3345baf6983692593902986e0c9c4f5f6f87f146dd0df16ef062903cb69",
              [4494, 4498, 4516, 4495, 4535, 4458, 4489, 4489, 4526, 4500]),
    "val": ("27cee31b371843f61429f7b6c45448660205e5e9d52c6652c1246aa332bfdf7b",
            "3963ab34ca34ffaa97f97b4c4d7159e427c3d4cb2d07df6ada3b9ab8c5e166e9",
            [506, 502, 484, 505, 465, 542, 511, 511, 474, 500]),
    "test": ("b0346bbd7032dfcc4360e220c780702090a6e7c15bb68cbc114064576c955e76",
             "c4102dd0db11900d67d74a3ae9ce464511f6426cf4659a6e4ab725c719d0cec9",
             [1000] * 10),
}  # fmt: skip
SPOTS = [  # (split, row, first token, tokens from there on, label)
    ("train", 0, 0, [149, 156, 150, 157, 160, 155, 160, 149, 136, 148, 147, 143, 146, 142, 133, 133], 4),
    ("val", 123, 500, [102, 91, 58, 66, 46, 54, 61, 82, 69, 10, 72, 143, 29, 4, 53, 63], 0),
    ("test", 9999, 1008, [113, 113, 109, 102, 97, 97, 99, 98, 98, 105, 110, 108, 105, 107, 108, 107], 5),
]


@pytest.mark.skipif(not REAL.is_file(), reason=f"the real CIFAR-10 archive is not at {REAL}")
def test_real_cifar_known_image():
    with tarfile.open(REAL, "r|gz") as tf:  # streamed up to the one member
        data = next(tf.extractfile(m).read() for m in tf if m.name == "train/airplane/0000.jpg")
    grey = I.lra_grayscale(decode_image(data, "train/airplane/0000.jpg"))
    for row, values in KNOWN_ROWS.items():
        assert grey[row].tolist() == values


@pytest.mark.skipif(not REAL.is_file(), reason=f"the real CIFAR-10 archive is not at {REAL}")
def test_real_cifar_archive_gives_the_same_cache_as_before(tmp_path):
    task = build_task("image", data_dir=tmp_path, source=str(REAL))
    task.prepare(workers=2)
    for split, (tokens_sha, labels_sha, per_class) in BEFORE.items():
        data = task.load(split)
        assert data.tokens.shape == (sum(per_class), 1024) and data.tokens.dtype == np.uint16
        assert np.bincount(data.labels, minlength=10).tolist() == per_class
        assert hashlib.sha256(np.ascontiguousarray(data.tokens).tobytes()).hexdigest() == tokens_sha, split
        assert hashlib.sha256(np.ascontiguousarray(data.labels).tobytes()).hexdigest() == labels_sha, split
    for split, row, at, values, label in SPOTS:
        data = task.load(split)
        assert data.tokens[row, at : at + len(values)].tolist() == values and data.labels[row] == label
    train_and_val = np.bincount(task.load("train").labels) + np.bincount(task.load("val").labels)
    assert train_and_val.tolist() == [5000] * 10  # CIFAR-10's 50,000 training images, 5,000 per class


@pytest.mark.parametrize("preset", [None, "tiny", "fa-paper"])
def test_config_data_settings_build_the_task(tmp_path, preset):
    from lra.train.config import load_config

    cfg = load_config("image", preset)
    task = build_task(cfg.task, data_dir=tmp_path, **cfg.data)
    assert task.name == "image" and task.max_length == cfg.data["max_length"]
