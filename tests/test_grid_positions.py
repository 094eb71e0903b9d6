"""Positions across image sizes. train.init_positions: how init_from fits a smaller grid's learned positions onto a
larger one (`mirror` against a hand-written index table and through a real model; `upsample` keeps the FlashAttention
paper's bilinear recipe). model.pos_emb=sincos2d: fixed row-and-column codes, hand-evaluated, the same at every size."""

from __future__ import annotations

import math

import pytest
import torch

from lra.core.errors import ConfigError, RunSetupError
from lra.model import build_model, load_init
from lra.positions import grid_sinusoidal_positions, mirror_grid_positions, upsample_grid_positions
from lra.train.config import config_hash, load_config


def numbered_grid(side: int, dim: int = 3) -> torch.Tensor:
    """(1, side*side, dim) positions whose features name their cell: (row, column, row * side + column)."""
    r, c = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    return torch.stack([r, c, r * side + c], dim=-1).reshape(1, side * side, dim).double()[..., :dim]


def test_mirror_folds_rows_and_columns_back_and_forth():
    out = mirror_grid_positions(numbered_grid(2), 7 * 7).reshape(7, 7, 3)
    rows = [0, 1, 1, 0, 0, 1, 1]  # 0..s-1, s-1..0, 0..: written out for s = 2, seven rows
    for i in range(7):
        for j in range(7):
            assert out[i, j].tolist() == [rows[i], rows[j], rows[i] * 2 + rows[j]]


def test_mirror_keeps_neighbours_at_the_same_pixel_scale_where_upsample_halves_it():
    torch.manual_seed(0)
    small = torch.randn(1, 64 * 64, 8)
    grid = small.reshape(64, 64, 8)
    mirrored = mirror_grid_positions(small, 128 * 128).reshape(128, 128, 8)
    assert torch.equal(mirrored[:64, :64], grid)  # the first quadrant is the small grid itself
    assert torch.equal(mirrored[64:, :64], grid.flip(0))  # and the next is its reflection
    # a step of one pixel moves as far in position space as it did at 64 px; bilinear 2x moves half as far
    step = (grid[1:] - grid[:-1]).norm(dim=-1).mean()
    up = upsample_grid_positions(small, 128 * 128).reshape(128, 128, 8)
    assert (mirrored[1:64] - mirrored[:63]).norm(dim=-1).mean() == pytest.approx(step.item(), rel=1e-6)
    assert (up[1:] - up[:-1]).norm(dim=-1).mean() < 0.6 * step


def test_mirror_onto_a_smaller_or_non_square_grid_is_refused():
    with pytest.raises(RunSetupError, match="larger one, got 4x4 -> 2x2"):
        mirror_grid_positions(numbered_grid(4), 4)
    with pytest.raises(RunSetupError, match="must be square"):
        mirror_grid_positions(numbered_grid(4), 20)


def tiny_model(task: str, positions: str = "upsample"):
    config = load_config(task, "tiny", ["model.pos_emb=learned", f"train.init_positions={positions}"])
    seq = {"pathfinder": 32 * 32, "path-64": 64 * 64}[task]
    return config, build_model(config, "naive", vocab_size=257, seq_len=seq, num_classes=2, pair=False)


def test_load_init_mirrors_a_real_model_s_positions_and_takes_every_other_weight():
    torch.manual_seed(0)
    _, small = tiny_model("pathfinder")
    config, large = tiny_model("path-64", "mirror")
    state = {k: v.clone() for k, v in small.state_dict().items()}
    adapted = load_init(large, state, positions=config.train.init_positions)
    assert adapted == ["encoder.pos"]
    pos = large.state_dict()["encoder.pos"].reshape(64, 64, -1)
    src = small.state_dict()["encoder.pos"].reshape(32, 32, -1)
    assert torch.equal(pos[:32, :32], src) and torch.equal(pos[32:, 32:], src.flip(0).flip(1))
    for name, value in small.state_dict().items():
        if name != "encoder.pos":
            assert torch.equal(large.state_dict()[name], value)


def test_init_positions_is_checked_and_its_default_leaves_the_config_hash_alone():
    base = load_config("path-x", "curriculum")
    assert base.train.init_positions == "upsample"
    assert config_hash(base) == config_hash(load_config("path-x", "curriculum", ["train.init_positions=upsample"]))
    assert config_hash(base) != config_hash(load_config("path-x", "curriculum", ["train.init_positions=mirror"]))
    with pytest.raises(ConfigError, match="train.init_positions = 'nearest' is not valid: expected one of upsample"):
        load_config("path-x", "curriculum", ["train.init_positions=nearest"])


def test_sincos2d_codes_row_and_column_as_hand_evaluated():
    pos = grid_sinusoidal_positions(4, 4)[0]  # a 2 x 2 image, dim 4: one frequency (1) per axis
    for r in range(2):
        for c in range(2):
            expected = [math.sin(r), math.cos(r), math.sin(c), math.cos(c)]
            assert pos[r * 2 + c].tolist() == pytest.approx(expected, abs=1e-7)


def test_sincos2d_gives_a_pixel_the_same_code_at_every_image_size_and_needs_no_resizing():
    small, large = grid_sinusoidal_positions(16 * 16, 32), grid_sinusoidal_positions(32 * 32, 32)
    assert torch.equal(large.reshape(32, 32, 32)[:16, :16], small.reshape(16, 16, 32))
    shape = dict(vocab_size=257, num_classes=2, pair=False)
    config = load_config("pathfinder", "tiny", ["model.pos_emb=sincos2d", "model.dim=32"])
    a = build_model(config, "naive", seq_len=16 * 16, **shape)
    b = build_model(config, "naive", seq_len=32 * 32, **shape)
    assert "encoder.pos" not in a.state_dict()  # fixed, not a weight: init_from carries nothing to resize
    assert load_init(b, dict(a.state_dict())) == []
    assert torch.equal(b.encoder.pos.reshape(32, 32, 32)[:16, :16], a.encoder.pos.reshape(16, 16, 32))


def test_sincos2d_refuses_a_non_square_sequence_or_a_width_it_cannot_split():
    with pytest.raises(ConfigError, match="needs a square image and model.dim divisible by 4, got 20 tokens"):
        grid_sinusoidal_positions(20, 8)
    with pytest.raises(ConfigError, match="got 16 tokens and dim 6"):
        grid_sinusoidal_positions(16, 6)


def test_freeze_positions_trains_every_weight_but_the_learned_table(tmp_path):
    """train.freeze_positions: after real steps from an init_from checkpoint, the position table is the checkpoint's
    to the bit and out of the optimizer, every other weight has moved; off (the default), the table moves too and
    the config hash is the one it had before the setting existed."""
    from lra.train.checkpoint import BEST, LAST, load_checkpoint
    from lra.train.run import train
    from tests.toy_task import toy_config_path

    path = toy_config_path(tmp_path)
    short = ["model.pos_emb=learned", "train.steps=4", "train.eval_every=4", "train.warmup=1"]
    train(load_config(path, None, short), "naive", device="cpu", out_dir=tmp_path / "start")
    start = load_checkpoint(tmp_path / "start" / BEST)["model"]  # what init_from reads from a run folder
    moved = {}
    for frozen in (True, False):
        sets = [*short, f"train.init_from={tmp_path / 'start'}", f"train.freeze_positions={str(frozen).lower()}"]
        out = tmp_path / f"frozen-{frozen}"
        train(load_config(path, None, sets), "naive", device="cpu", out_dir=out)
        end = load_checkpoint(out / LAST)["model"]
        moved[frozen] = {name for name, value in end.items() if not torch.equal(value, start[name])}
    assert "encoder.pos" not in moved[True] and "encoder.pos" in moved[False]
    assert moved[True] == moved[False] - {"encoder.pos"} and len(moved[True]) > 5
    base = load_config(path, None, short)
    assert config_hash(base) == config_hash(load_config(path, None, [*short, "train.freeze_positions=false"]))
    assert config_hash(base) != config_hash(load_config(path, None, [*short, "train.freeze_positions=true"]))


def test_freeze_positions_without_a_learned_table_is_refused(tmp_path):
    from lra.train.run import train
    from tests.toy_task import toy_config_path

    config = load_config(toy_config_path(tmp_path), None, ["model.pos_emb=sinusoidal", "train.freeze_positions=true"])
    with pytest.raises(RunSetupError, match="freezes learned positions, and this model has none"):
        train(config, "naive", device="cpu", out_dir=tmp_path / "run")
