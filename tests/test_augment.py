"""train.augment=dihedral: the eight poses against hand-written grids, poses as a function of (seed, step, rank),
a resumed run that poses as an uninterrupted one, and the refusal for tasks whose label a flip would change."""

from __future__ import annotations

import pytest
import torch

from lra.core.errors import RunSetupError
from lra.train.augment import dihedral, poses_for
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import config_hash, load_config
from lra.train.run import train

GRID = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
# Each pose of GRID written out by hand: bit 2 transposes, then bit 1 flips the rows, then bit 0 the columns.
POSED = {
    0: [[0, 1, 2], [3, 4, 5], [6, 7, 8]],
    1: [[2, 1, 0], [5, 4, 3], [8, 7, 6]],
    2: [[6, 7, 8], [3, 4, 5], [0, 1, 2]],
    3: [[8, 7, 6], [5, 4, 3], [2, 1, 0]],  # a half turn
    4: [[0, 3, 6], [1, 4, 7], [2, 5, 8]],
    5: [[6, 3, 0], [7, 4, 1], [8, 5, 2]],  # a quarter turn clockwise
    6: [[2, 5, 8], [1, 4, 7], [0, 3, 6]],  # a quarter turn anticlockwise
    7: [[8, 5, 2], [7, 4, 1], [6, 3, 0]],  # the anti-diagonal reflection
}


def test_each_pose_of_a_numbered_grid_is_the_hand_written_one():
    tokens = torch.tensor(GRID).reshape(1, 9).repeat(8, 1)
    out = dihedral(tokens, torch.arange(8))
    for pose, expected in POSED.items():
        assert out[pose].reshape(3, 3).tolist() == expected, pose
    assert len({tuple(row.tolist()) for row in out}) == 8  # eight distinct images: the whole group


def test_poses_depend_on_seed_step_and_rank_only():
    cpu = torch.device("cpu")
    a = poses_for(seed=0, step=5, rank=0, batch=512, device=cpu)
    assert torch.equal(a, poses_for(seed=0, step=5, rank=0, batch=512, device=cpu))
    for other in (
        {"seed": 1, "step": 5, "rank": 0},
        {"seed": 0, "step": 6, "rank": 0},
        {"seed": 0, "step": 5, "rank": 1},
    ):
        assert not torch.equal(a, poses_for(**other, batch=512, device=cpu))
    counts = torch.bincount(a, minlength=8)
    assert counts.min() > 30  # all eight poses drawn, none rare (64 expected of each)


def tiny(tmp_path, *sets: str):
    base = ["data.num_train=48", "data.num_val=16", "data.num_test=16", "train.batch_size=8", "train.steps=6",
            "train.eval_every=3", "train.log_every=3", "train.warmup=1", *sets]  # fmt: skip
    return load_config("pathfinder", "tiny", base)


def test_a_posed_run_resumes_as_it_would_have_gone_on_and_differs_from_an_unposed_one(tmp_path):
    data = tmp_path / "data"
    posed = tiny(tmp_path, "train.augment=dihedral")
    train(posed, "naive", device="cpu", out_dir=tmp_path / "whole", data_dir=data)
    stopped = train(posed, "naive", device="cpu", out_dir=tmp_path / "parts", data_dir=data, stop_after=4)
    assert stopped["stopped_at"] == 4
    train(posed, "naive", device="cpu", out_dir=tmp_path / "parts", data_dir=data, resume=True)
    train(tiny(tmp_path), "naive", device="cpu", out_dir=tmp_path / "plain", data_dir=data)
    whole, parts, plain = (load_checkpoint(tmp_path / n / LAST)["model"] for n in ("whole", "parts", "plain"))
    assert all(torch.equal(whole[k], parts[k]) for k in whole)
    assert not all(torch.equal(whole[k], plain[k]) for k in whole)
    assert (tmp_path / "whole" / BEST).is_file()


def test_augment_is_refused_where_a_flip_changes_the_label_and_its_default_keeps_the_hash():
    with pytest.raises(RunSetupError, match="keeps the label of Pathfinder's tasks only .* not image's"):
        train(load_config("image", "tiny", ["train.augment=dihedral"]), "naive", device="cpu")
    plain = load_config("path-x", "curriculum")
    assert config_hash(plain) == config_hash(load_config("path-x", "curriculum", ["train.augment=none"]))
    assert config_hash(plain) != config_hash(load_config("path-x", "curriculum", ["train.augment=dihedral"]))
