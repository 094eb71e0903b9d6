"""Target pairs drawn ahead (tasks/_pathfinder/targets.py): images drawn from them are the images drawn from
scratch, the store uses a targets cache only after checking it, and `lra data prepare --targets-only` draws one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lra.cli.main import main
from tasks._pathfinder import draw as D
from tasks._pathfinder.store import GeneratedStore
from tasks._pathfinder.targets import draw_targets, images_from_targets


@pytest.mark.parametrize(("res", "difficulty", "n"), [(32, 9, 6), (64, 14, 4), (128, 14, 8), (256, 14, 2)])
def test_images_from_target_pairs_are_the_images_drawn_from_scratch(res, difficulty, n):
    targets = draw_targets(res, difficulty, "val", 0, n, seed=5)
    fast = images_from_targets(res, difficulty, "val", 0, n, 5, targets)
    assert all(np.array_equal(fast[i], D.draw(res, difficulty, "val", i, seed=5).image) for i in range(n))
    if res == 128:  # both of Path-X's margins, and a stream stopped with a 32-bit word buffered, come back exactly
        assert set(targets["margin"].tolist()) == {2, 3}
        assert targets["buffered"][:, 0].any()


def test_a_targets_slice_is_the_same_as_the_whole_drawn_at_once():
    whole = draw_targets(32, 14, "train", 0, 5, seed=1)
    part = draw_targets(32, 14, "train", 3, 5, seed=1)
    assert all(np.array_equal(whole[name][3:], part[name]) for name in whole)


def _store(root, name):
    return GeneratedStore(root / name, "pathfinder", 32, 9, seed=7)


def test_the_store_draws_from_a_targets_cache_and_the_images_are_unchanged(tmp_path):
    counts = {"train": 12, "val": 5}
    fast, slow = _store(tmp_path, "fast"), _store(tmp_path, "slow")
    fast.generate_targets({"train": 20, "val": 5})  # a larger cache serves the first 12 too
    fast.generate(counts)
    slow.generate(counts)
    for split, n in counts.items():
        assert (
            fast.covering(split, n)
            .meta()["drawn_from_targets"][split]
            .endswith(f"targets-{split}-{20 if split == 'train' else 5}")
        )
        (a, la), (b, lb) = fast.open(split, n), slow.open(split, n)
        assert np.array_equal(a, b) and np.array_equal(la, lb)
    assert "drawn_from_targets" not in slow.covering("train", 12).meta()
    assert fast.covering("train", 21, targets=True) is None and fast.covering("test", 1, targets=True) is None


def test_a_targets_cache_that_draws_other_images_is_named_and_left_unused(tmp_path):
    store = _store(tmp_path, "s")
    store.generate_targets({"train": 6})
    stamps = np.load(store.targets("train", 6).path / "stamps.npy", mmap_mode="r+")
    stamps[5, 0, 0] = (int(stamps[5, 0, 0]) + 90) % 360  # the last image's first paddle turned: another image
    stamps.flush()
    del stamps
    with pytest.warns(UserWarning, match=r"targets-train-6: image 5 drawn from these target pairs differs"):
        store.generate({"train": 6})
    images, _ = store.open("train", 6)
    assert all(np.array_equal(images[i], D.draw(32, 9, "train", i, seed=7).image) for i in range(6))
    assert "drawn_from_targets" not in store.covering("train", 6).meta()


def test_prepare_targets_only_from_the_command_line(tmp_path, capsys):
    common = ["--preset", "tiny", "--data-dir", str(tmp_path), "--workers", "1"]
    assert main(["data", "prepare", "pathfinder", "--targets-only", *common]) == 0
    assert "target pairs" in capsys.readouterr().err
    found = sorted(p.name for p in tmp_path.glob("pathfinder/*/targets-*"))
    assert [name.split("-")[1] for name in found] == ["test", "train", "val"]
    assert not list(tmp_path.glob("pathfinder/*/train-*"))  # no images drawn yet
    assert main(["data", "info", "pathfinder", "--preset", "tiny", "--data-dir", str(tmp_path), "--json"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["source"].endswith("; target pairs drawn ahead: train, val, test") and not info["ready"]
    assert main(["data", "prepare", "listops", "--targets-only", *common]) == 2
    assert "--targets-only: listops is not a generated Pathfinder task" in capsys.readouterr().err
    assert main(["data", "prepare", "pathfinder", "--targets-only", "--from", str(tmp_path), *common]) == 2
    assert "--targets-only draws target pairs; --from imports a release" in capsys.readouterr().err
