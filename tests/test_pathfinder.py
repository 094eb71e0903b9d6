"""Pathfinder / Path-64 / Path-X / Path-256: settings, the registered tasks, the cache, the release reader and its PNGs,
configs. The generator's tests are tests/test_pathfinder_generator.py."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from lra.core import locks
from lra.core.errors import DataCorruptError, DataMissingError, RunSetupError
from lra.train.config import config_hash, load_config
from lra.train.gate import gate
from tasks import build_task
from tasks._pathfinder import draw as D
from tasks._pathfinder import store as store_module
from tasks._pathfinder.release import read_grey
from tasks._pathfinder.settings import SPECS
from tasks.base import INFO_FIELDS
from tasks.registry import task_options

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "data" / "pathfinder_reference"


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
    # snake_contrast_list [2] and paddle_contrast_list [0.75] at 32 px; [0.8], [0.9], [1.0] (paddle 1) above
    contrasts = {res: (SPECS[res].target_contrast, SPECS[res].distractor_contrast) for res in SPECS}
    assert contrasts == {32: (1.5, 2.0), 64: (0.8, 0.8), 128: (0.9, 0.9), 256: (1.0, 1.0)}


def test_registered_tasks_and_their_shapes(tmp_path):
    expect = {"pathfinder": 32, "path-64": 64, "path-x": 128, "path-256": 256}
    for name, res in expect.items():
        task = build_task(name, data_dir=tmp_path)
        assert task.resolution == res and task.seq_len == res * res
        assert task.num_classes == 2 and task.vocab_size == 257
        assert set(task_options(name)) >= {"difficulty", "num_train", "seed", "cache", "source", "generator"}
    assert build_task("path-x", data_dir=tmp_path, downsample=4).seq_len == 32 * 32
    with pytest.raises(ValueError, match="max_length must be 16384"):
        build_task("path-x", data_dir=tmp_path, max_length=1024)
    with pytest.raises(ValueError, match="difficulty"):
        build_task("pathfinder", data_dir=tmp_path, difficulty=10)
    with pytest.raises(ValueError, match="downsample"):
        build_task("pathfinder", data_dir=tmp_path, downsample=3)
    with pytest.raises(ValueError, match=r"data.generator = 1: .* generator 2 only"):
        build_task("pathfinder", data_dir=tmp_path, generator=1)


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


@pytest.mark.parametrize("first_finishes", [True, False])
def test_a_draw_waits_for_another_of_the_same_images_then_takes_them(tmp_path, monkeypatch, first_finishes):
    """Two processes that need the same images (campaigns side by side, a draw and a prefetch) draw them once: the
    second waits on the draw lock, says for whom, and takes the first's images; if the first dies without them, the
    second draws them itself."""
    task = build_task("pathfinder", data_dir=tmp_path, num_train=12, num_val=4, num_test=4, seed=2)
    held = locks.try_lock(task.store.path.with_name(task.store.path.name + ".lock"), "the first draw")
    said, drawn, told = [], [], threading.Event()
    monkeypatch.setattr(store_module.console, "print", lambda text: (said.append(text), told.set()))
    monkeypatch.setattr(task, "_generate", lambda missing, workers: drawn.append(missing))
    second = threading.Thread(target=task.prepare)
    second.start()
    assert told.wait(30) and "waiting for the first draw (pid" in said[0]
    second.join(0.3)
    assert second.is_alive() and not drawn  # still waiting
    if first_finishes:
        task.store.generate({"train": 12, "val": 4, "test": 4}, workers=1)  # as the first process does, lock held
    os.close(held)  # the first ends (a killed process's lock goes the same way)
    second.join(30)
    assert not second.is_alive()
    assert drawn == ([] if first_finishes else [{"train": 12, "val": 4, "test": 4}])
    if first_finishes:
        want = np.stack([D.draw(32, 14, "test", i, seed=2).image.ravel() for i in range(4)]).astype(np.int64) + 1
        assert np.array_equal(np.asarray(task.load("test").tokens), want)


def test_black_padding_feeds_the_raw_levels_of_the_same_cache(tmp_path):
    """Xiong et al.'s pipeline: raw grey levels, so black pixels are token 0 (padding); the cache is shared."""
    plain = build_task("pathfinder", data_dir=tmp_path, num_train=5, num_val=2, num_test=2, seed=4)
    raw = build_task("pathfinder", data_dir=tmp_path, num_train=5, num_val=2, num_test=2, seed=4, black_padding=True)
    plain.prepare(workers=1)
    assert raw.info()["ready"] and raw.store.path == plain.store.path
    tokens = np.asarray(raw.load("train").tokens)
    first = D.draw(32, 14, "train", 0, seed=4).image.ravel()
    assert np.array_equal(tokens[0], first.astype(np.int64))  # drawn by the generator, not shifted
    assert (tokens[0] == 0).sum() == (first == 0).sum() > 100  # every black pixel is padding
    assert np.array_equal(tokens, np.asarray(plain.load("train").tokens) - 1)
    assert np.array_equal(raw.load("train").tokens[:2][np.arange(2)], tokens[:2])  # slices keep the levels
    assert type(raw).pads_inside({"black_padding": True}) and not type(raw).pads_inside({})
    with pytest.raises(ValueError, match="black_padding must be true or false"):
        build_task("pathfinder", data_dir=tmp_path, black_padding=1)


def test_black_padding_keeps_hashes_and_refuses_right_padded_backends():
    plain = load_config("pathfinder", "fa-paper")
    assert config_hash(load_config("pathfinder", "fa-paper", ["data.black_padding=false"])) == config_hash(plain)
    padded = load_config("pathfinder", "fa-paper", ["data.black_padding=true", "model.pool=mean_all"])
    assert config_hash(padded) != config_hash(plain)
    gate(padded, "sdpa_math", "cpu")
    with pytest.raises(RunSetupError, match="right-padded key masks only"):
        gate(padded, "flash", "cpu")


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
