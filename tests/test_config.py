"""Config loading: presets overlay, --set overrides typed by YAML, unknown keys rejected with the valid ones."""

from __future__ import annotations

import pytest

from lra.core.errors import ConfigError
from lra.train.config import config_hash, load_config, parse_override
from lra.train.schedules import lr_factor
from tests.toy_task import toy_config_path


def test_preset_and_overrides_apply_in_order(tmp_path):
    path = toy_config_path(tmp_path)
    base = load_config(path)
    tiny = load_config(path, "tiny", ["model.layers=3", "train.betas=[0.8, 0.9]", "attention.naive.scale=0.5"])
    assert base["train"]["steps"] == 120 and tiny["train"]["steps"] == 40
    assert tiny["model"]["layers"] == 3 and tiny["train"]["betas"] == [0.8, 0.9]
    assert tiny["attention"] == {"naive": {"scale": 0.5}}
    assert tiny["preset"] == "tiny" and base["preset"] == "default"
    assert config_hash(base) != config_hash(tiny)
    assert config_hash(base) == config_hash(load_config(path))


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.layerz=2", "unknown setting model.'layerz'; valid here: .*layers"),
        ("trian.lr=1", "unknown section"),
        ("data.nope=1", "unknown setting data.'nope'; valid here: .*max_length"),
        ("lr=1", "must name a section"),
        ("model.pool=max", "cls or mean"),
        ("model.dim=31", "divisible"),
        ("train.steps=0", "positive integer"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(toy_config_path(tmp_path), None, [override])


def test_unknown_preset_and_task(tmp_path):
    with pytest.raises(ConfigError, match="presets: tiny"):
        load_config(toy_config_path(tmp_path), "huge")
    with pytest.raises(ConfigError, match="no config for task 'nosuch'"):
        load_config("nosuch")


def test_parse_override_types():
    assert parse_override("train.lr=3e-4") == (["train", "lr"], 3e-4)
    assert parse_override("data.source=null") == (["data", "source"], None)
    assert parse_override("attention.flash.block_m=64") == (["attention", "flash", "block_m"], 64)


def test_schedules_match_their_formulas():
    rsqrt = lr_factor("rsqrt", warmup=100, total_steps=1000)
    assert rsqrt(50) == pytest.approx(0.5 / 10)  # min(1, 50/100) / sqrt(max(50, 100))
    assert rsqrt(400) == pytest.approx(1 / 20)
    cos = lr_factor("cosine", warmup=10, total_steps=110)
    assert cos(5) == pytest.approx(0.5) and cos(10) == pytest.approx(1.0)
    assert cos(60) == pytest.approx(0.5) and cos(110) == pytest.approx(0.0, abs=1e-12)
