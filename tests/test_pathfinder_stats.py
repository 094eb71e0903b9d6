"""Pathfinder statistics (tasks/_pathfinder/stats.py) on hand-made images, the reference statistics file, the
generator's trace, `lra data compare`, and our generator against the original's statistics (issue 32)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lra.cli.main import main
from lra.core.errors import ConfigError, DataCorruptError
from tasks._pathfinder import compare as C
from tasks._pathfinder import draw as D
from tasks._pathfinder import stats as S


def _mask(shape: tuple[int, int], *pixels: tuple[int, int]) -> np.ndarray:
    m = np.zeros(shape, bool)
    for y, x in pixels:
        m[y, x] = True
    return m


def _bar(shape, y: int, x0: int, x1: int, value: int = 255) -> np.ndarray:
    img = np.zeros(shape, np.uint8)
    img[y, x0:x1] = value
    return img


# ---------------------------------------------------------------- pixel-set measures
def test_touch_overlap_and_gap_of_hand_made_pixel_sets():
    a = _bar((10, 10), 2, 1, 6) > 0
    below = _bar((10, 10), 3, 1, 6) > 0  # the next row: 8-adjacent
    diagonal = _mask((10, 10), (3, 6))  # touches (2, 5) corner to corner
    apart = _bar((10, 10), 5, 1, 6) > 0  # two empty rows between
    crossing = _mask((10, 10), (1, 3), (2, 3), (3, 3))
    assert S.touch(a, below) and S.touch(a, diagonal) and S.touch(a, crossing)
    assert not S.touch(a, apart)
    assert S.overlap(a, crossing) and not S.overlap(a, below) and not S.overlap(a, diagonal)
    assert S.gap(a, crossing) == 0.0
    assert S.gap(a, below) == 1.0
    assert S.gap(a, diagonal) == pytest.approx(math.sqrt(2))
    assert S.gap(a, apart) == 3.0
    assert S.gap(a, np.zeros_like(a)) == math.inf


def test_components_count_8_connected_blobs_and_bridge_up_to_the_link():
    img = np.zeros((12, 12), np.uint8)
    img[1, 1:4] = 200  # blob 1
    img[2, 4] = 10  # diagonal to blob 1: same component (and > 0 counts, however faint)
    img[6, 1:3] = 90  # blob 2: nearest to blob 1 is (6, 2) to (2, 4), sqrt(20) = 4.47 apart
    img[10, 10] = 255  # blob 3
    assert S.n_components(img) == 3
    assert S.n_components(img, threshold=64) == 3  # the faint pixel was never a component of its own
    near = S.components(img > 0, link=4.4)
    assert near[1, 1] != near[6, 1] and near[1, 1] == near[2, 4]
    far = S.components(img > 0, link=4.5)
    assert far[1, 1] == far[6, 1] != far[10, 10]
    assert far.max() == 1 and near.max() == 2  # labels 0..k-1
    assert (S.components(np.zeros((4, 4), bool)) == -1).all()


def _dashed(shape, y: int, x0: int, x1: int, dash: int = 2, gap: int = 2) -> np.ndarray:
    img = np.zeros(shape, np.uint8)
    for x in range(x0, x1, dash + gap):
        img[y, x : min(x + dash, x1)] = 200
    return img


def test_flood_fill_follows_dashes_and_stops_at_wider_gaps():
    line = _dashed((16, 32), 5, 2, 30)  # dashes 2 px long with 2 empty pixels between (3 px centre to centre)
    assert S.flood_connects(line, [(5, 2), (5, 28)], link=3.0)
    assert not S.flood_connects(line, [(5, 2), (5, 28)], link=2.9)
    two = np.maximum(_dashed((16, 32), 3, 2, 30), _dashed((16, 32), 8, 2, 30))  # 5 rows apart
    assert not S.flood_connects(two, [(3, 2), (8, 28)], link=3.0)
    faint = line // 4  # below the drawn threshold: nothing to fill
    assert not S.flood_connects(faint, [(5, 2), (5, 28)], link=3.0)


def _two_target_sample(label: int, crossing: bool) -> S.Sample:
    """Two horizontal target snakes (rows 3 and 9), markers on the ends, optionally a distractor over marker 1."""
    shape = (12, 20)
    t0, t1 = _bar(shape, 3, 2, 18), _bar(shape, 9, 2, 18)
    snakes = [t0, t1]
    markers = ((3, 2), (3, 17) if label else (9, 17))
    if crossing:  # a brighter distractor across the end of marker 1
        d = np.zeros(shape, np.uint8)
        d[:, markers[1][1]] = 255
        snakes.append(d)
        t0[markers[1]] = 100
    image = np.max(snakes, axis=0)
    return S.Sample(image, label, np.stack(snakes), markers, len(snakes) - 2)


def test_marker_snakes_and_the_statistics_of_hand_made_samples():
    plain1, plain0 = _two_target_sample(1, False), _two_target_sample(0, False)
    crossed = _two_target_sample(1, True)
    assert S.marker_snake(plain1, 0) == S.marker_snake(plain1, 1) == 0
    assert S.marker_snake(plain0, 1) == 1 and S.marker_snake(crossed, 1) == 2
    est = S.measure([plain1, plain0, crossed])
    assert est["markers_agree"].value == pytest.approx(2 / 3)
    assert est["touch_any"].value == pytest.approx(1 / 3) and est["overlap_any"].value == pytest.approx(1 / 3)
    assert est["touch_targets"].value == 0.0
    assert est["target_gap"].value == 6.0  # rows 3 and 9
    assert est["distractors"].value == pytest.approx(1 / 3) and est["distractors_1"].value == pytest.approx(1 / 3)
    assert est["target_peak"].value == 255.0 and est["marker_peak"].n == 6
    assert est["flood_fill"].value == pytest.approx(1.0)  # the crossing also joins the bars: label 1 again
    assert est["components"].value == pytest.approx((2 + 2 + 1) / 3)


def test_estimates_and_their_standard_errors():
    p = S.estimate([1, 0, 0, 1, 1, 1, 0, 1], proportion=True)
    assert p.value == 0.625 and p.se == pytest.approx(math.sqrt(0.625 * 0.375 / 8)) and p.n == 8
    m = S.estimate([1.0, 2.0, 3.0, 4.0, math.inf])  # an infinite gap (an empty snake) is left out
    assert m.value == 2.5 and m.sd == pytest.approx(np.std([1, 2, 3, 4], ddof=1)) and m.n == 4
    assert m.se == pytest.approx(m.sd / 2)
    assert math.isnan(S.estimate([]).value)


def test_image_only_statistics_need_no_trace():
    images = [_bar((8, 8), 2, 0, 8), _bar((8, 8), 4, 0, 4, value=100)]
    est = S.measure(images)
    assert set(est) == set(S.IMAGE_ONLY)
    assert est["pixels_gt0"].value == pytest.approx((8 + 4) / 2 / 64)
    assert est["pixels_255"].value == pytest.approx(8 / 2 / 64)
    with pytest.raises(ValueError, match="needs traced samples"):
        S.measure(images, ["touch_any"])


# ---------------------------------------------------------------- the reference file
def test_reference_statistics_file_schema():
    ref = C.load_reference()
    assert ref["generator"]["commit"].startswith("ab9c130") and "shim" in ref["generator"]
    assert {"32", "64", "128", "256"} <= set(ref["resolutions"])
    for res, entry in ref["resolutions"].items():
        assert entry["n"] >= 300 and str(entry["n"]) in entry["drawn"].replace(",", "")
        assert entry["settings"]["contour_length"] == 14
        assert set(entry["stats"]) == {s.key for s in S.STATS}, res
        for key, e in entry["stats"].items():
            assert e["se"] >= 0 and e["n"] >= entry["n"] * (0.9 if key == "target_gap" else 1), (res, key)
    s32 = ref["resolutions"]["32"]["stats"]
    shares = sum(s32[f"distractors_{k}"]["value"] for k in range(4))
    assert 0.95 < shares <= 1.0 and s32["marker_peak"]["n"] == 2 * ref["resolutions"]["32"]["n"]


def test_a_corrupt_reference_file_is_named(tmp_path):
    bad = tmp_path / "ref.json"
    bad.write_text(json.dumps({"resolutions": {"32": {"stats": {"touch_any": {"value": 1}}}}}))
    with pytest.raises(DataCorruptError, match="ref.json"):
        C.load_reference(bad)
    with pytest.raises(ConfigError, match="has no 64 px sample"):
        C.reference_estimates({"resolutions": {"32": {"stats": {}}}}, 64)
    with pytest.raises(ConfigError, match="path-x"):
        C.resolution_of("pathfinder-x")


# ---------------------------------------------------------------- the generator's trace
@pytest.mark.parametrize("res", [32, 128])
def test_the_trace_splits_the_image_by_snake(res):
    """Each snake's render lies under the image; off the markers the image is their maximum; the markers sit on
    drawn pixels; two targets and then the distractors."""
    for index in range(3):
        s = D.draw(res, 14, "test", index, seed=5, trace=True)
        plain = D.draw(res, 14, "test", index, seed=5)
        assert np.array_equal(s.image, plain.image) and s.label == plain.label
        assert s.snakes.shape == (2 + s.n_distractors, res, res) and s.snakes.dtype == np.uint8
        assert (s.snakes <= s.image).all()
        top = s.snakes.max(0)
        yy, xx = np.mgrid[:res, :res]
        radius = {32: 6, 128: 7}[res]  # marker radius + the resampling filter's reach
        off = np.ones((res, res), bool)
        for y, x in s.markers:
            assert s.image[y, x] >= S.DRAWN
            off &= (yy - y) ** 2 + (xx - x) ** 2 > radius**2
        assert np.array_equal(s.image[off], top[off])
        assert all((s.snakes[k] >= S.DRAWN).any() for k in range(len(s.snakes)))


# ---------------------------------------------------------------- lra data compare
def test_compare_command_prints_the_table_and_json(capsys):
    assert main(["data", "compare", "pathfinder", "--n", "4", "--workers", "1", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["task"] == "pathfinder" and body["resolution"] == 32 and body["n"] == 4
    assert [r["statistic"] for r in body["rows"]] == [s.key for s in S.STATS]
    row = body["rows"][0]
    assert row["ours"]["n"] == 4 and row["reference"]["n"] == C.load_reference()["resolutions"]["32"]["n"]
    d = row["ours"]["value"] - row["reference"]["value"]
    assert row["relative"] == pytest.approx(d / row["reference"]["value"])
    assert main(["data", "compare", "pathfinder", "--n", "2", "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "flood fill" in text and "statistics within 10%" in text and "ab9c130" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pathfinder-x"], "no Pathfinder task 'pathfinder-x'; choose one of pathfinder, path-64"),
        (["pathfinder", "--n", "0"], "--n must be at least 1"),
        (["pathfinder", "--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_compare_command_bad_input(argv, message, capsys):
    assert main(["data", "compare", *argv]) == 2
    assert message in capsys.readouterr().err


def test_compare_command_without_a_reference_for_the_resolution(tmp_path, monkeypatch, capsys):
    ref = C.load_reference()
    ref["resolutions"] = {"32": ref["resolutions"]["32"]}
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(ref))
    monkeypatch.setattr(C, "REFERENCE_PATH", path)
    monkeypatch.setattr(C.load_reference, "__defaults__", (path,))
    assert main(["data", "compare", "path-256", "--n", "1"]) == 2
    assert "the reference has no 256 px sample (it has 32 px)" in capsys.readouterr().err


def test_within_means_ten_percent_or_two_standard_errors():
    ref = S.Estimate(1.0, 0.03, 0.3, 100)
    assert C.Row("k", "k", ref, S.Estimate(1.09, 0.0, 0.0, 10)).within  # 9%
    assert not C.Row("k", "k", ref, S.Estimate(1.11, 0.04, 0.4, 100)).within  # 11% > 2 * 0.05
    assert C.Row("k", "k", ref, S.Estimate(1.11, 0.05, 0.4, 100)).within  # 0.11 <= 2 * hypot(0.03, 0.05)
    zero = S.Estimate(0.0, 0.0, 0.0, 100)
    assert C.Row("k", "k", zero, zero).relative == 0.0 and C.Row("k", "k", zero, ref).relative == math.inf


# ---------------------------------------------------------------- ours against the original
@pytest.mark.xfail(
    D.GENERATOR_VERSION == 1,
    reason="generator v1 keeps snakes apart and clips brightness (issue 32); the faithful generator fixes it",
    strict=True,
)
@pytest.mark.parametrize("res, n", [(32, 200), (128, 40)])
def test_our_generator_matches_the_original_statistics(res, n):
    """Every statistic within 10% of the original's or within 3.5 combined standard errors (3.5 rather than the
    command's 2: 17 statistics are tested at once, so the whole test fails by chance about 1% of the time; a
    proportion's error for ours is taken at the reference's p, as a test of "same p" should)."""
    reference = C.reference_estimates(C.load_reference(), res)
    ours = C.measure_ours(res, n, workers=1, seed=1)
    off = []
    for row in C.compare(reference, ours):
        d = abs(row.ours.value - row.reference.value)
        se = row.ours.se
        if S.BY_KEY[row.key].proportion:  # at small n, judge ours by the reference's p (a 1-in-40 share has se ~0)
            p = row.reference.value
            se = max(se, math.sqrt(p * (1 - p) / row.ours.n))
        if d > 0.1 * abs(row.reference.value) and d > 3.5 * math.hypot(row.reference.se, se):
            off.append(f"{row.key}: original {row.reference.value:.4g}, ours {row.ours.value:.4g}")
    assert not off, "; ".join(off)


def test_compare_with_a_folder_of_pngs(tmp_path, capsys):
    """Our own images of another seed as 'their' PNGs: the image-only statistics agree and a logistic regression
    cannot tell the two apart (its held-out accuracy is near chance)."""
    from PIL import Image

    for i in range(40):
        Image.fromarray(D.draw(32, 14, "train", i, seed=9).image).save(tmp_path / f"sample_{i}.png")
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(tmp_path / "other_size.png")  # not 32 px: left out
    assert main(["data", "compare", "pathfinder", "--images", str(tmp_path), "--workers", "1", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    rows = {r["statistic"]: r for r in body["rows"]}
    assert body["n"] == 40 and set(rows) == {*S.IMAGE_ONLY, "distinguish"}
    assert rows["pixels_gt0"]["reference"]["n"] == 40 and rows["pixels_gt0"]["within"]
    assert abs(rows["distinguish"]["ours"]["value"] - 0.5) < 0.2
    assert main(["data", "compare", "pathfinder", "--images", str(tmp_path / "nothing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["data", "compare", "path-256", "--images", str(tmp_path)]) == 2
    assert "no 256x256 PNG images under" in capsys.readouterr().err


def test_logistic_regression_tells_different_images_apart():
    rng = np.random.default_rng(0)
    dark = [rng.integers(0, 100, (16, 16)).astype(np.uint8) for _ in range(60)]
    bright = [rng.integers(50, 150, (16, 16)).astype(np.uint8) for _ in range(60)]
    more_dark = [rng.integers(0, 100, (16, 16)).astype(np.uint8) for _ in range(60)]
    assert S.distinguishability(dark, bright).value > 0.95
    assert abs(S.distinguishability(dark, more_dark).value - 0.5) < 0.2
    with pytest.raises(ValueError, match="at least 4 images"):
        S.distinguishability(dark[:3], bright)
