"""Config loading: presets overlay, --set overrides, unknown keys and ill-typed values rejected in one clear line;
learning-rate schedules against hand values."""

from __future__ import annotations

from pathlib import Path

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
        ("model.dim=31", "divisible"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(toy_config_path(tmp_path), None, [override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=fast", "train.lr = 'fast' is not valid: expected a number >= 0"),
        ("model.layers=2.5", "model.layers = 2.5 is not valid: expected an integer >= 1"),
        ("model.dim=abc", "model.dim = 'abc' is not valid: expected an integer >= 1"),
        ("data.num_train=abc", "data.num_train = 'abc' is not valid: expected an integer"),
        ("train.steps=0", "train.steps = 0 is not valid: expected an integer >= 1"),
        ("model.layers=true", "model.layers = True is not valid: expected an integer >= 1"),
        ("model.pool=max", "model.pool = 'max' is not valid: expected one of cls, mean, mean_all"),
        ("train.schedule=exp", "train.schedule = 'exp' is not valid: expected one of rsqrt, cosine, linear, constant"),
        ("train.betas=[0.9]", r"train.betas = \[0.9\] is not valid: expected a list of 2 numbers in \[0, 1\)"),
        ("model.dropout=1", r"model.dropout = 1 is not valid: expected a number in \[0, 1\)"),
        ("model.head_dim=x", "model.head_dim = 'x' is not valid: expected an integer >= 1 or null"),
        ("train.init_from=7", "train.init_from = 7 is not valid: expected a path or null"),
    ],
)
def test_typed_settings_name_key_value_and_expected_type(tmp_path, override, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        load_config(toy_config_path(tmp_path), None, [override])


def test_yaml_values_are_checked_like_set_values(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(Path(toy_config_path(tmp_path)).read_text().replace("lr: 0.01", "lr: fast"))
    with pytest.raises(ConfigError, match="^train.lr = 'fast' is not valid: expected a number >= 0$"):
        load_config(str(path))


def test_integral_numbers_are_accepted_as_integers(tmp_path):
    cfg = load_config(toy_config_path(tmp_path), None, ["train.steps=5e3", "model.layers=2.0", "train.lr=1"])
    assert cfg["train"]["steps"] == 5000 and type(cfg["train"]["steps"]) is int
    assert cfg["model"]["layers"] == 2 and type(cfg["model"]["layers"]) is int
    assert cfg["train"]["lr"] == 1  # an int is a valid number (kept as written: the config hash stays put)


def test_data_settings_take_their_types_from_the_task_constructor():
    from lra.train.settings import data_settings
    from tasks.registry import TASKS

    listops = data_settings(TASKS.get("listops"))
    assert (listops["num_train"].kind, listops["num_train"].optional) == ("int", False)
    assert (listops["source"].kind, listops["source"].optional) == ("path", True)  # str | os.PathLike | None
    text = data_settings(TASKS.get("text"))
    assert (text["num_train"].kind, text["num_train"].optional) == ("int", True)  # int | None
    with pytest.raises(ConfigError, match="^data.source = 5 is not valid: expected a path or null$"):
        load_config("listops", "tiny", ["data.source=5"])


def test_every_default_has_a_declared_type_that_it_passes():
    from lra.train.config import MODEL_DEFAULTS, TRAIN_DEFAULTS
    from lra.train.settings import MODEL_SETTINGS, TRAIN_SETTINGS

    assert set(MODEL_SETTINGS) == set(MODEL_DEFAULTS) and set(TRAIN_SETTINGS) == set(TRAIN_DEFAULTS)
    for schema, defaults in ((MODEL_SETTINGS, MODEL_DEFAULTS), (TRAIN_SETTINGS, TRAIN_DEFAULTS)):
        for key, value in defaults.items():
            assert schema[key].check(key, value) == value, key


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


def test_linear_schedule_warms_up_then_decays_to_zero_at_the_last_step():
    lin = lr_factor("linear", warmup=10, total_steps=110)
    assert [lin(s) for s in (1, 5, 10)] == pytest.approx([0.1, 0.5, 1.0])  # step / warmup
    assert [lin(s) for s in (35, 60, 85, 110)] == pytest.approx([0.75, 0.5, 0.25, 0.0])  # 1 - (s - 10) / 100
    assert lin(200) == 0.0
    flat = lr_factor("linear", warmup=0, total_steps=4)
    assert [flat(s) for s in (1, 2, 3, 4)] == pytest.approx([0.75, 0.5, 0.25, 0.0])
    with pytest.raises(ConfigError, match="unknown schedule 'exp'; known: rsqrt, cosine, linear, constant"):
        lr_factor("exp", warmup=0, total_steps=1)


def test_a_record_from_before_a_setting_existed_is_the_same_config(tmp_path):
    """A stored config without `model.embed_std` ran with the default: same hash, same seed-free key."""
    from lra.results.aggregate import config_key

    config = load_config(toy_config_path(tmp_path))
    old = {**config, "model": {k: v for k, v in config["model"].items() if k != "embed_std"}}
    assert config["model"]["embed_std"] == 1.0 and "embed_std" not in old["model"]
    assert config_hash(old) == config_hash(config)
    assert config_key({"config": old}) == config_key({"config": config})
    other = load_config(toy_config_path(tmp_path), overrides=["model.embed_std=0.02"])
    assert config_key({"config": other}) != config_key({"config": config})


@pytest.mark.parametrize("std", [0.02, 1.0])
def test_embed_std_sets_the_token_embeddings_init(tmp_path, std):
    import torch

    from lra.model import Encoder

    config = load_config(toy_config_path(tmp_path), overrides=[f"model.embed_std={std}", "model.dim=64"])
    torch.manual_seed(0)
    encoder = Encoder(config["model"], "naive", vocab_size=2000, seq_len=8, attn_options={})
    weight = encoder.embed.weight.detach()
    assert torch.all(weight[0] == 0)  # the padding token stays zero
    assert weight[1:].std().item() == pytest.approx(std, rel=0.02)  # 127,936 draws: std within ~0.4%
