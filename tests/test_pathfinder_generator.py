"""Pathfinder's generator (tasks._pathfinder): the original's pieces hand-checked, growth rules on hand-made masks,
determinism, labels and what the images hold, and the look of the original's images."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks._pathfinder import draw as D
from tasks._pathfinder.grow import Canvases, Heads, extend
from tasks._pathfinder.release import read_grey
from tasks._pathfinder.settings import FOREGROUND, SPECS
from tasks._pathfinder.stamps import bytescale
from tasks._pathfinder.store import GeneratedStore
from tasks._pathfinder.tables import _struct_leaves_image, tables
from tests.test_pathfinder import REFERENCE


# ---------------------------------------------------------------- the original's pieces, hand-checked
def test_bytescale_maps_the_image_min_to_0_and_max_to_255():
    """SciPy <= 1.1 bytescale: (x - min) * 255 / (max - min), rounded half up; a flat image scales by 1."""
    data = np.array([[0.5, 0.75, 1.0], [1.25, 1.5, 2.5]])
    assert bytescale(data).tolist() == [[0, 32, 64], [96, 128, 255]]  # 0.25 * 127.5 = 31.875 -> 32
    assert bytescale(np.full((2, 2), 0.3)).tolist() == [[0, 0], [0, 0]]
    assert bytescale(data, 0.0, 2.0).tolist() == [[64, 96, 128], [159, 191, 255]]  # 1.25 * 127.5 = 159.4
    assert bytescale(np.array([7, 9], np.uint8)).tolist() == [7, 9]  # 8-bit input passes through
    for res in (32, 128):
        image = D.draw(res, 14, "val", 3).image
        assert image.min() == 0 and image.max() == 255


def test_marker_is_a_quarter_pixel_up_left_and_not_symmetric():
    """draw_circle: a disk of radius r * 2 around the 2x pixel (2y, 2x), brought down 2x: its centre is at 2y + 0.5
    in 2x pixel centres, i.e. y + 0.25 against the pixel centre y + 0.5."""
    for res in (32, 128, 256):
        t = tables(res, SPECS[res].margins[0])
        y0, x0, win = t.marker_at(res // 2, res // 2)
        ys, xs = np.mgrid[0 : win.shape[0], 0 : win.shape[1]]
        w = win.astype(float)
        cy, cx = (w * (ys + y0)).sum() / w.sum(), (w * (xs + x0)).sum() / w.sum()
        assert abs(cy - (res // 2 - 0.25)) < 0.05 and abs(cx - (res // 2 - 0.25)) < 0.05, (res, cy, cx)
        assert not np.array_equal(win, win[::-1, ::-1])
        assert win.max() == 255 if res > 32 else win.max() > 200
    t = tables(32, 1)  # at the image's edge the window is cut where the image ends
    y0, x0, win = t.marker_at(0, 31)
    assert (y0, x0 + win.shape[1]) == (0, 32) and win.shape[0] == t.marker_reach + 1


def test_level_tables_are_the_original_float_comparisons():
    """mask + m_im >= 1.8 on values stored as float32(level / 255); a seed pixel is free where ceil(mask - 0.3)
    is 0; get_coords_cmf weighs 1 - the dilated mask."""
    t = tables(32, 1)
    assert t.hit_level[255] == 204 and t.hit_level[204] == 255 and t.hit_level[203] == 256  # 0.796 + 1 < 1.8
    assert t.free_level == 76  # 76 / 255 = 0.298; 77 / 255 = 0.302
    assert t.inverted[0] == 1.0 and t.inverted[255] == 0.0
    want = sorted({(math.floor(3 * math.sin(a)), math.floor(3 * math.cos(a))) for a in _arc(3)})
    assert [tuple(c) for c in t.cand.tolist()] == want


def _arc(step: int) -> list[float]:
    """get_coords_cmf's angles: one pixel of arc apart on a circle of radius `step`."""
    deg = 360.0 / (2 * step * math.pi)
    return [k * deg * math.pi / 180 for k in range(int(math.ceil(360 / deg)))]


def test_a_struct_that_leaves_the_image_fails_every_seed():
    """OpenCV's dilate gives -DBL_MAX where the whole struct is outside the image; find_available_coordinates then
    sees a negative value and reports no free pixel at all."""
    leaves = lambda offs: _struct_leaves_image((np.array([o[0] for o in offs]), np.array([o[1] for o in offs])), 8)  # noqa: E731
    assert leaves([(1, 1), (1, 2)])  # row 7's pixels look below the image
    assert leaves([(1, -1), (-1, 1)])  # the corner (7, 7) looks at (8, 6) and (6, 8)
    assert not leaves([(0, 0)]) and not leaves([(-1, 0), (1, 0), (0, 1), (0, -1)])
    assert not leaves([(1, -1), (-1, 1), (0, 0)])


# ---------------------------------------------------------------- growth rules on hand-made masks
def _one_snake(t, stamp: int, y: int, x: int, py: int, px: int) -> tuple[Canvases, Heads]:
    cv = Canvases(t, 1, "test")
    cv.init(np.zeros(1, np.int64), t.base_mask)
    return cv, Heads(np.array([stamp]), t.flat(np.array([y]), np.array([x])), np.array([py]), np.array([px]))


def test_candidates_weighted_by_continuity_and_by_the_free_mask():
    """The next head is drawn among the candidates with continuity weight, each weighted by 1 - the mask's maximum
    within the margin around it: with mask 255 on the candidates 2+ px from the straightest one, only it and its
    neighbours are drawn; with every candidate covered the snake is at a dead end."""
    t = tables(64, 1)
    o = 180  # a seed paddle pointing along +x (0 degrees)
    py, px = int(np.ceil(32 + t.next_dy[o])), int(np.ceil(17 + t.next_dx[o]))
    weights = t.step_w[o]
    allowed = t.step_idx[o][weights > 0]
    keep = t.cand[allowed[np.argmax(weights[weights > 0])]]
    heads = t.cand[allowed] + [py, px]
    far = np.hypot(*(t.cand[allowed] - keep).T) >= 2
    chosen = set()
    for seed in range(30):
        cv, h = _one_snake(t, o, 32, 20, 32, 17)
        cv.mask[0, t.flat(heads[far, 0], heads[far, 1])] = 255
        assert extend(t, cv, h, np.array([0]), np.random.default_rng(seed))[0]
        chosen.add(divmod(int(h.start[0]), t.width))
        assert cv.mask[0].reshape(t.width, t.width)[t.pad + 32, t.pad + 20] > 200  # the seed's mask joined
    near = {(int(y) + t.pad, int(x) + t.pad) for y, x in heads[~far]}
    assert chosen <= near and (keep[0] + py + t.pad, keep[1] + px + t.pad) in chosen
    cv, h = _one_snake(t, o, 32, 20, 32, 17)
    cv.mask[0, t.flat(heads[:, 0], heads[:, 1])] = 255
    assert not extend(t, cv, h, np.array([0]), np.random.default_rng(0))[0]


def test_a_paddle_over_a_full_mask_is_rejected_after_three_draws():
    """extend_snake: a draw whose mask (>= 0.8 there) meets mask >= 0.8 (1.8 in sum) is drawn again, three times."""
    t = tables(32, 1)
    o = 180
    cv, h = _one_snake(t, o, 16, 10, 16, 8)
    py, px = int(np.ceil(16 + t.next_dy[o])), int(np.ceil(8 + t.next_dx[o]))
    # ring the candidates' heads at distance ~1.5-2 px inside with mask 255: weights stay (the disk of radius 1
    # around each head is clear) but every paddle's core (drawn back towards the pivot) is hit
    ys, xs = np.mgrid[0:32, 0:32]
    d = np.hypot(ys - py, xs - px)
    cv.mask[0, t.flat(ys[(d <= 1.0)], xs[(d <= 1.0)])] = 255
    assert not extend(t, cv, h, np.array([0]), np.random.default_rng(1))[0]


# ---------------------------------------------------------------- determinism, labels, what the images hold
def test_images_are_deterministic_in_their_key():
    a = D.draw(128, 14, "train", 5, seed=3)
    b = D.draw(128, 14, "train", 5, seed=3)
    assert np.array_equal(a.image, b.image) and a.label == b.label
    assert not np.array_equal(a.image, D.draw(128, 14, "train", 5, seed=4).image)
    assert not np.array_equal(a.image, D.draw(128, 14, "val", 5, seed=3).image)
    assert not np.array_equal(a.image, D.draw(128, 14, "train", 6, seed=3).image)
    assert a.image.dtype == np.uint8 and a.image.shape == (128, 128)


def test_labels_are_a_fair_coin_per_image():
    labels = D.labels_for(32, 14, "train", 0, 0, 4000)
    assert 1850 < labels.sum() < 2150  # binomial(4000, 1/2): sd 32
    assert 0.45 < (labels[1:] == labels[:-1]).mean() < 0.55  # no pairing, no alternation
    assert np.array_equal(D.labels_for(32, 14, "train", 0, 600, 700), labels[600:700])
    assert not np.array_equal(D.labels_for(32, 14, "train", 1, 0, 4000), labels)
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


@pytest.mark.parametrize("res", [32, 128, 256])
def test_markers_sit_on_the_snakes_the_label_names(res):
    """Label 1: both markers on one target snake (its tail and its last head); label 0: one on each. Checked in the
    trace: each marker's centre is inked by the target it was put on (its first or last paddle starts there)."""
    stats = pytest.importorskip("tasks._pathfinder.stats", reason="the trace type lives in the statistics module")
    seen = set()
    for index in range(6 if res < 256 else 3):
        d = D.draw(res, 14, "test", index, seed=11, trace=True)
        assert isinstance(d, stats.Sample) and len(d.snakes) == 2 + d.n_distractors
        assert np.array_equal(np.maximum(d.snakes.max(0), d.image), d.image)  # the image holds every snake
        on = [{s for s in (0, 1) if d.snakes[s][y, x] > 0} for y, x in d.markers]
        assert on[0] and on[1], (res, index)
        if d.label == 1:
            assert on[0] & on[1]
        else:
            assert on[0] | on[1] == {0, 1}
        seen.add(d.label)
    assert seen == {0, 1}


def test_distractors_as_many_as_the_tries_allow():
    """make_many_snakes places at most num_distractors, as many as its tries allow: nearly all at 256 px, about
    1.2 of 5 at 32 px (the original: 1.15 +- 0.03 over 1,000 images), none that overlap the mask > 0.3 at its seed."""
    n32 = [D.draw(32, 14, "val", i).n_distractors for i in range(60)]
    assert max(n32) <= 5 and 0.8 < np.mean(n32) < 1.6
    n256 = [D.draw(256, 14, "val", i).n_distractors for i in range(3)]
    assert min(n256) >= 5 and max(n256) <= 7


def test_shorter_contours_draw_too():
    for diff in (6, 9):
        d = D.draw(128, diff, "train", 1)
        assert d.image.shape == (128, 128) and d.n_distractors <= SPECS[128].num_distractors(diff)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared/data/pathfinder_reference not present")
@pytest.mark.parametrize("res", [32, 128, 256])
def test_same_look_as_the_original_images(res):
    """Image-only statistics of the original's images at the same resolution: ink coverage, the brightest pixel,
    the target dashes' brightness after the bytescale (0.9 x 255 at 128 px: no distractor brighter)."""
    refs = [read_grey(p) for p in sorted(REFERENCE.glob(f"pf{res}_*.png"))]
    mine = [D.draw(res, 14, "train", i).image for i in range(6)]
    assert all(im.shape == (res, res) for im in refs + mine)
    for threshold in (1, FOREGROUND):
        ref_cover = np.mean([(r >= threshold).mean() for r in refs])
        my_cover = np.mean([(m >= threshold).mean() for m in mine])
        assert 0.8 < my_cover / ref_cover < 1.25, (threshold, my_cover, ref_cover)
    assert max(r.max() for r in refs) == max(m.max() for m in mine) == 255
    if res == 128:
        assert np.median([np.bincount(r.ravel(), minlength=256)[200:].argmax() + 200 for r in refs]) == 229
        assert np.median([np.bincount(m.ravel(), minlength=256)[200:].argmax() + 200 for m in mine]) == 229
