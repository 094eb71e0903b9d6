"""Pathfinder / Path-64 / Path-X / Path-256: the generator, the cache, the release reader and its PNGs, configs."""

from __future__ import annotations

import hashlib
import io
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from lra.core.errors import DataCorruptError, DataMissingError
from tasks import build_task
from tasks._pathfinder import draw as D
from tasks._pathfinder.geometry import FOREGROUND, SPECS
from tasks._pathfinder.release import read_grey
from tasks._pathfinder.store import GeneratedStore
from tasks.registry import INFO_FIELDS, task_options

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "data" / "pathfinder_reference"


# ---------------------------------------------------------------- a connectivity check of our own
def _disk(radius: float) -> list[tuple[int, int]]:
    r = int(math.floor(radius))
    return [(dy, dx) for dy in range(-r, r + 1) for dx in range(-r, r + 1) if dy * dy + dx * dx <= radius * radius]


def flood_reaches(image: np.ndarray, start: tuple[int, int], goal: tuple[int, int], link: float) -> bool:
    """Flood fill over drawn pixels (>= FOREGROUND) from `start`; pixels up to `link` apart (centre to centre) touch,
    which bridges the gaps between the dashes of one snake. True when `goal` is reached."""
    fg = image >= FOREGROUND
    assert fg[start] and fg[goal], "markers must be drawn pixels"
    h, w = fg.shape
    offs = _disk(link)
    pad = int(math.floor(link))
    reached = np.zeros_like(fg)
    reached[start] = True
    frontier = reached.copy()
    while frontier.any():
        ys, xs = np.nonzero(frontier)
        y0, y1 = max(ys.min() - pad, 0), min(ys.max() + pad + 1, h)
        x0, x1 = max(xs.min() - pad, 0), min(xs.max() + pad + 1, w)
        padded = np.pad(frontier, pad)
        grow = np.zeros((y1 - y0, x1 - x0), bool)
        for dy, dx in offs:
            grow |= padded[y0 + pad - dy : y1 + pad - dy, x0 + pad - dx : x1 + pad - dx]
        new = np.zeros_like(fg)
        new[y0:y1, x0:x1] = grow & fg[y0:y1, x0:x1] & ~reached[y0:y1, x0:x1]
        reached |= new
        frontier = new
    return bool(reached[goal])


def test_flood_fill_bridges_gaps_up_to_the_link_distance():
    img = np.zeros((20, 40), np.uint8)
    img[10, 2:8] = 200  # dash 1
    img[10, 12:18] = 200  # 4 px gap (centres 7 -> 12: distance 5)
    img[10, 25:30] = 200  # 6 px gap (17 -> 25: distance 8)
    img[3, 12] = 63  # below FOREGROUND: never a stepping stone
    assert flood_reaches(img, (10, 2), (10, 17), link=5.0)
    assert not flood_reaches(img, (10, 2), (10, 17), link=4.9)
    assert not flood_reaches(img, (10, 2), (10, 29), link=7.9)
    assert flood_reaches(img, (10, 2), (10, 29), link=8.0)


# ---------------------------------------------------------------- settings
def test_settings_per_resolution_follow_lra():
    """LRA's lra_benchmarks/data/pathfinder.py settings, with Python 2 integer division for the distractors."""
    want = {  # padding, margins, seed distance, marker radius, paddle length, thickness, continuity, distractors
        32: (1, (1,), 7, 1.5, 2, 0.5, 1.0, 20 // 4),
        64: (1, (1,), 12, 2.5, 5, 1.0, 1.8, 22 // 4),
        128: (1, (2, 3), 20, 3.0, 5, 1.5, 1.8, 35 // 4),
        256: (22, (3,), 27, 5.0, 5, 2.0, 1.8, 30 // 4),
    }
    for res, (pad, margins, sd, radius, length, thick, cont, n_dist) in want.items():
        s = SPECS[res]
        assert (s.padding, s.margins, s.seed_distance, s.marker_radius) == (pad, margins, sd, radius)
        assert (s.paddle_length, s.thickness, s.continuity, s.antialias) == (length, thick, cont, 2)
        assert s.distractor_length(14) == 4 and s.num_distractors(14) == n_dist
    assert SPECS[256].num_distractors(14) == 7  # "7 distractors of 4 dashes" at 256 px
    assert SPECS[128].num_distractors(9) == 35 // 3 and SPECS[32].distractor_length(6) == 2
    assert (SPECS[128].target_contrast, SPECS[64].target_contrast, SPECS[32].target_contrast) == (0.9, 0.8, 1.5)


def test_registered_tasks_and_their_shapes(tmp_path):
    expect = {"pathfinder": 32, "path-64": 64, "path-x": 128, "path-256": 256}
    for name, res in expect.items():
        task = build_task(name, data_dir=tmp_path)
        assert task.resolution == res and task.seq_len == res * res
        assert task.num_classes == 2 and task.vocab_size == 257
        assert set(task_options(name)) >= {"difficulty", "num_train", "seed", "cache", "source"}
    assert build_task("path-x", data_dir=tmp_path, downsample=4).seq_len == 32 * 32
    with pytest.raises(ValueError, match="max_length must be 16384"):
        build_task("path-x", data_dir=tmp_path, max_length=1024)
    with pytest.raises(ValueError, match="difficulty"):
        build_task("pathfinder", data_dir=tmp_path, difficulty=10)
    with pytest.raises(ValueError, match="downsample"):
        build_task("pathfinder", data_dir=tmp_path, downsample=3)


# ---------------------------------------------------------------- determinism and labels
def test_images_are_deterministic_in_their_key():
    a = D.draw(128, 14, "train", 5, seed=3)
    b = D.draw(128, 14, "train", 5, seed=3)
    assert np.array_equal(a.image, b.image) and a.label == b.label
    assert not np.array_equal(a.image, D.draw(128, 14, "train", 5, seed=4).image)
    assert not np.array_equal(a.image, D.draw(128, 14, "val", 5, seed=3).image)
    assert not np.array_equal(a.image, D.draw(128, 14, "train", 6, seed=3).image)
    assert a.image.dtype == np.uint8 and a.image.shape == (128, 128)


def test_labels_are_balanced_in_every_pair_and_not_index_parity():
    labels = D.labels_for(32, 14, "train", 0, 0, 2000)
    assert labels.sum() == 1000
    assert np.all(labels[0::2] + labels[1::2] == 1)
    parity = np.arange(2000) % 2
    assert 0.3 < (labels == parity).mean() < 0.7
    assert np.array_equal(D.labels_for(32, 14, "train", 0, 600, 700), labels[600:700])
    assert not np.array_equal(D.labels_for(32, 14, "train", 1, 0, 2000), labels)
    assert [D.draw(32, 14, "train", i).label for i in range(6)] == labels[:6].tolist()


def test_generation_is_the_same_across_worker_counts(tmp_path):
    counts = {"train": 10, "test": 4}
    one, two = (GeneratedStore(tmp_path / name, "pathfinder", 32, 9, seed=7) for name in ("one", "two"))
    one.generate(counts, workers=1)
    two.generate(counts, workers=2)
    for split, n in counts.items():
        one_images, lab1 = one.open(split, n)
        two_images, lab2 = two.open(split, n)
        assert np.array_equal(one_images, two_images) and np.array_equal(lab1, lab2)
        assert np.array_equal(one_images[3], D.draw(32, 9, split, 3, seed=7).image)


# ---------------------------------------------------------------- what the images show
@pytest.mark.parametrize("res", [32, 64, 128, 256])
def test_markers_are_connected_exactly_when_the_label_says_so(res):
    for index in range(4 if res < 256 else 3):
        d = D.draw(res, 14, "test", index, seed=11)
        (y0, x0), (y1, x1) = d.markers
        assert d.image[y0, x0] >= FOREGROUND and d.image[y1, x1] >= FOREGROUND
        assert flood_reaches(d.image, (y0, x0), (y1, x1), d.link) == bool(d.label), (res, index, d.label)
    # both labels were seen: pairs (0, 1) and (2, 3) each hold one of each
    assert {D.draw(res, 14, "test", i, seed=11).label for i in range(2)} == {0, 1}


def test_shorter_contours_draw_too():
    for diff in (6, 9):
        d = D.draw(128, diff, "train", 1)
        (y0, x0), (y1, x1) = d.markers
        assert flood_reaches(d.image, (y0, x0), (y1, x1), d.link) == bool(d.label)


def _peaks(img: np.ndarray) -> np.ndarray:
    p = np.pad(img.astype(int), 1)
    h, w = img.shape
    neigh = np.stack([p[1 + dy : h + 1 + dy, 1 + dx : w + 1 + dx] for dy in (-1, 0, 1) for dx in (-1, 0, 1)])
    return img[(img >= neigh.max(0)) & (img > 40)]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared/data/pathfinder_reference not present")
@pytest.mark.parametrize("res", [32, 128, 256])
def test_same_look_as_the_original_images(res):
    """Ink coverage, dash brightness and markers match the original generator's images at the same resolution."""
    refs = [read_grey(p) for p in sorted(REFERENCE.glob(f"pf{res}_*.png"))]
    mine = [D.draw(res, 14, "train", i).image for i in range(4)]
    assert all(im.shape == (res, res) for im in refs + mine)
    ref_cover = np.mean([(r >= FOREGROUND).mean() for r in refs])
    my_cover = np.mean([(m >= FOREGROUND).mean() for m in mine])
    assert 0.67 < my_cover / ref_cover < 1.5, (my_cover, ref_cover)  # measured: 0.99 at 32 px, 0.95 at 128, 1.0 at 256
    assert max(r.max() for r in refs) == max(m.max() for m in mine) == 255  # the markers
    if res >= 128:  # dashes at the snake's contrast: 229 at 128 px, 255 at 256 px (thin 32 px dashes vary)
        ref_peak = np.median(np.concatenate([_peaks(r) for r in refs]))
        assert ref_peak == np.median(np.concatenate([_peaks(m) for m in mine]))
        assert abs(ref_peak - SPECS[res].target_contrast * 255) <= 1


# ---------------------------------------------------------------- the task: cache, lazy, tokens
def test_cache_lazy_and_tokens_agree(tmp_path):
    task = build_task("pathfinder", data_dir=tmp_path, num_train=12, num_val=4, num_test=4, seed=2)
    info = task.info()
    assert tuple(info) == INFO_FIELDS and not info["ready"] and info["bytes"] == 0
    want = "lra data prepare pathfinder --set data.seed=2 --set data.num_train=12 --set data.num_val=4 "
    assert info["prepare"] == want + f"--set data.num_test=4 --data-dir {tmp_path}"
    task.prepare(workers=1)
    info = task.info()
    assert info["ready"] and info["prepare"] is None and info["splits"] == {"train": 12, "val": 4, "test": 4}
    assert info["bytes"] == sum(f.stat().st_size for f in task.store.path.rglob("*") if f.is_file())
    assert info["bytes"] > 20 * 1024 and info["where"] == str(task.store.path)
    train = task.load("train")
    assert isinstance(train.tokens.images, np.memmap)
    assert train.tokens.shape == (12, 1024) and len(train) == 12
    tokens = np.asarray(train.tokens)
    first = D.draw(32, 14, "train", 0, seed=2)
    assert np.array_equal(tokens[0], first.image.ravel().astype(np.int64) + 1)  # pixel + 1: black is not padding
    assert tokens.min() >= 1 and tokens.max() <= 256
    assert np.array_equal(train.labels, D.labels_for(32, 14, "train", 2, 0, 12))
    assert np.array_equal(train.tokens[np.array([3, 1])], tokens[[3, 1]])
    assert np.array_equal(train.tokens[:5][np.arange(5)], tokens[:5])

    lazy = build_task("pathfinder", data_dir=tmp_path / "none", num_train=12, seed=2, cache=False).load("train")
    assert np.array_equal(lazy.tokens[np.array([0, 7])], tokens[[0, 7]])
    assert not (tmp_path / "none").exists()

    smaller = build_task("pathfinder", data_dir=tmp_path, num_train=6, num_val=4, num_test=4, seed=2)
    assert np.array_equal(np.asarray(smaller.load("train").tokens), tokens[:6])  # served by the 12-image cache
    assert task.store.sizes("train") == [12] and smaller.info()["details"]["caches"]["train"] == "train-12"

    pooled = build_task("pathfinder", data_dir=tmp_path, num_train=12, seed=2, downsample=2).load("train")
    img = first.image.astype(float).reshape(16, 2, 16, 2).mean(axis=(1, 3))
    assert np.array_equal(pooled.tokens[0], np.rint(img).ravel().astype(np.int64) + 1)


# ---------------------------------------------------------------- LRA's release layout
def png_bytes(image: np.ndarray) -> bytes:
    """An 8-bit PNG of a uint8 (H, W) grey or (H, W, 3) colour array, written by Pillow (as the original generator)."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def _write_release(root: Path, images: list[np.ndarray], labels: list[int], batches: list[int]) -> Path:
    folder = root / "pathfinder32" / "curv_contour_length_14"
    rows: dict[int, list[str]] = {}
    for i, (img, label, batch) in enumerate(zip(images, labels, batches)):
        sub = folder / "imgs" / str(batch)
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"sample_{i}.png").write_bytes(png_bytes(img))
        rows.setdefault(batch, []).append(f"imgs/{batch} sample_{i}.png {i} {label} 1.0 14 4 2 0.5 1 1")
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    for batch, lines in rows.items():
        (folder / "metadata" / f"{batch}.npy").write_text("\n".join(lines) + "\n")
    return folder


def test_release_layout_reader(tmp_path):
    drawings = [D.draw(32, 14, "train", i, seed=5) for i in range(20)]
    # batch 10 sorts after batch 2 (numeric order, as LRA's files are numbered)
    batches = [2] * 10 + [10] * 10
    folder = _write_release(tmp_path / "lra_release", [d.image for d in drawings], [d.label for d in drawings], batches)
    (folder / "imgs" / "10" / "sample_19.png").write_bytes(b"")  # an empty file, skipped like LRA does
    task = build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "lra_release")
    task.prepare(workers=1)
    info = task.info()
    assert info["ready"] and info["details"]["empty_skipped"] == 1 and info["source"] == str(tmp_path / "lra_release")
    sizes = {s: len(task.load(s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 15, "val": 2, "test": 2}  # 19 images split 80/10/10
    test = task.load("test")
    assert np.array_equal(test.labels, [d.label for d in drawings[17:19]])
    assert np.array_equal(test.tokens[np.array([1])][0], drawings[18].image.ravel().astype(np.int64) + 1)
    capped = build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "lra_release", num_train=4)
    assert len(capped.load("train")) == 4


def test_release_metadata_as_a_real_npy_array(tmp_path):
    drawings = [D.draw(32, 6, "val", i) for i in range(10)]
    folder = tmp_path / "curv_baseline"
    (folder / "imgs" / "0").mkdir(parents=True)
    (folder / "metadata").mkdir()
    table = []
    for i, d in enumerate(drawings):
        (folder / "imgs" / "0" / f"sample_{i}.png").write_bytes(png_bytes(d.image))
        table.append(["imgs/0", f"sample_{i}.png", str(i), str(d.label), "1.0", "6", "2", "2", "0.5", "1", "1"])
    np.save(folder / "metadata" / "0.npy", np.array(table))
    task = build_task("pathfinder", data_dir=tmp_path / "c", difficulty=6, source=folder)
    assert np.array_equal(task.load("train").labels, [d.label for d in drawings[:8]])


def test_corrupt_png_names_the_file_and_row(tmp_path):
    drawings = [D.draw(32, 14, "train", i) for i in range(10)]
    folder = _write_release(tmp_path / "rel", [d.image for d in drawings], [d.label for d in drawings], [0] * 10)
    bad = folder / "imgs" / "0" / "sample_4.png"
    bad.write_bytes(bad.read_bytes()[:60])  # truncated
    task = build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "rel")
    with pytest.raises(DataCorruptError) as err:
        task.load("train")
    assert "sample_4.png" in str(err.value) and "row 5" in str(err.value)
    assert list((tmp_path / "cache" / "pathfinder").iterdir()) == []  # nothing half-written is left


def test_missing_release_and_bad_metadata(tmp_path):
    with pytest.raises(DataMissingError, match="pathfinder128/curv_contour_length_14"):
        build_task("path-x", data_dir=tmp_path, source=tmp_path / "nowhere").load("train")
    folder = tmp_path / "curv_contour_length_14"
    (folder / "metadata").mkdir(parents=True)
    (folder / "metadata" / "0.npy").write_text("imgs/0 sample_0.png 0 seven 1.0 14 4 2 0.5 1 1\n")
    with pytest.raises(DataCorruptError, match=r"0\.npy, row 1: label field 'seven'"):
        build_task("pathfinder", data_dir=tmp_path, source=folder).load("train")


# ---------------------------------------------------------------- a release that changes, PNG reading
def file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_release_import_follows_its_source(tmp_path, capsys):
    drawings = [D.draw(32, 14, "train", i, seed=5) for i in range(10)]
    images, labels = [d.image for d in drawings], [d.label for d in drawings]
    _write_release(tmp_path / "rel", images, labels, [0] * 10)
    task = build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "rel")
    assert len(task.load("train")) == 8
    cache = task.release_cache().path
    before = file_hashes(cache)
    folder = _write_release(tmp_path / "rel", images[:5] * 2, labels[:5] * 2, [0] * 10)  # same names, new images
    bad = folder / "imgs" / "0" / "sample_7.png"
    bad.write_bytes(bad.read_bytes()[:50])
    again = build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "rel")
    assert not again.info()["ready"] and "changed since" in again.info()["details"]["stale"]
    with pytest.raises(DataCorruptError, match="sample_7.png"):
        again.load("train")  # the release changed: imported again, and its damaged PNG is reported
    assert "changed since the cache" in capsys.readouterr().err
    assert file_hashes(cache) == before  # the old import is intact
    bad.write_bytes(png_bytes(images[2]))
    test = build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "rel").load("test")
    assert np.array_equal(test.tokens[np.array([0])][0], images[4].ravel().astype(np.int64) + 1)  # image 9 of 10
    with pytest.raises(DataMissingError, match="no Pathfinder 32px release"):
        build_task("pathfinder", data_dir=tmp_path / "cache", source=tmp_path / "gone").load("train")


def test_release_pngs_read_as_grey(tmp_path):
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (9, 13), dtype=np.uint8)
    (tmp_path / "g.png").write_bytes(png_bytes(grey))
    assert np.array_equal(read_grey(tmp_path / "g.png"), grey)
    rgb = rng.integers(0, 256, (9, 13, 3), dtype=np.uint8)
    (tmp_path / "c.png").write_bytes(png_bytes(rgb))
    luma = np.floor(rgb.astype(np.float64) @ [0.299, 0.587, 0.114] + 0.5)  # ITU-R 601, rounded
    got = read_grey(tmp_path / "c.png").astype(np.int64)
    clear = np.abs(luma - 0.5 - np.floor(luma - 0.5) - 0.5) < 0.499  # float32 and float64 agree off a .5 tie
    assert np.array_equal(got[clear], luma[clear]) and np.abs(got - luma).max() <= 1
    good = png_bytes(grey)
    cut = good[: len(good) // 2]  # truncated inside the pixel data
    for name, data in [("a.png", b"not a png"), ("b.png", cut), ("c.png", good[:40] + b"\0" + good[41:])]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataCorruptError, match="cannot (decode|read) image") as err:
            read_grey(tmp_path / name)
        assert str(err.value).startswith(str(tmp_path / name))


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared/data/pathfinder_reference not present")
def test_reference_images_read_as_grey():
    for path in sorted(REFERENCE.glob("*.png")):
        img = read_grey(path)
        res = int(path.name[2:].split("_")[0])
        assert img.shape == (res, res) and img.max() == 255 and (img == 0).mean() > 0.5


# ---------------------------------------------------------------- configs
@pytest.mark.parametrize(
    "name,layers,dim,heads,pool",
    [
        ("pathfinder", 4, 32, 4, "mean"),
        ("path-64", 4, 32, 4, "mean"),
        ("path-x", 1, 32, 2, "mean"),
        ("path-256", 2, 32, 4, "cls"),
    ],
)
def test_configs_follow_lra_and_have_a_cpu_sized_tiny_preset(tmp_path, name, layers, dim, heads, pool):
    cfg = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    assert cfg["task"] == name
    assert set(cfg["data"]) <= set(task_options(name))
    m = cfg["model"]
    assert (m["layers"], m["dim"], m["heads"], m["pool"]) == (layers, dim, heads, pool)
    tiny = cfg["presets"]["tiny"]
    data = {**cfg["data"], **tiny.get("data", {}), "source": None}
    task = build_task(name, data_dir=tmp_path, **data)
    assert task.seq_len <= 4096 and task.counts["train"] <= 2000
