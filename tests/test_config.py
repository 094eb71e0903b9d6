"""Config loading: presets overlay, --set overrides, unknown keys and ill-typed values rejected in one clear line;
learning-rate schedules against hand values, onecycle against torch's OneCycleLR."""

from __future__ import annotations

from pathlib import Path

import pytest

from lra.core.errors import ConfigError
from lra.train.config import config_hash, load_config, parse_override
from lra.train.schedules import beta1_at, lr_factor
from tests.reference import onecycle_reference
from tests.toy_task import toy_config_path


def test_preset_and_overrides_apply_in_order(tmp_path):
    path = toy_config_path(tmp_path)
    base = load_config(path)
    tiny = load_config(path, "tiny", ["model.layers=3", "train.betas=[0.8, 0.9]", "attention.naive.scale=0.5"])
    assert base.train.steps == 120 and tiny.train.steps == 40
    assert tiny.model.layers == 3 and tiny.train.betas == (0.8, 0.9) and tiny.to_dict()["train"]["betas"] == [0.8, 0.9]
    assert tiny.to_dict()["attention"] == {"naive": {"scale": 0.5}} and tiny.options_of("naive") == {"scale": 0.5}
    assert tiny.preset == "tiny" and base.preset == "default"
    assert config_hash(base) != config_hash(tiny)
    assert config_hash(base) == config_hash(load_config(path))


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.layerz=2", r"unknown setting model.layerz \(did you mean 'layers'\?\); valid here: .*layers"),
        ("trian.lr=1", "unknown section"),
        ("data.nope=1", "unknown setting data.nope; valid here: .*max_length"),
        ("lr=1", "must name a section"),
        ("model.dim=31", "divisible"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(toy_config_path(tmp_path), None, [override])


def test_a_misspelt_preset_names_the_closest():
    with pytest.raises(ConfigError, match=r"unknown preset 'tinyy' \(did you mean 'tiny'\?\) for listops; presets: "):
        load_config("listops", "tinyy")


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=fast", "train.lr = 'fast' is not valid: expected a number > 0"),
        ("model.layers=2.5", "model.layers = 2.5 is not valid: expected an integer >= 1"),
        ("model.dim=abc", "model.dim = 'abc' is not valid: expected an integer >= 1"),
        ("data.num_train=abc", "data.num_train = 'abc' is not valid: expected an integer"),
        ("train.steps=0", "train.steps = 0 is not valid: expected an integer >= 1"),
        ("model.layers=true", "model.layers = True is not valid: expected an integer >= 1"),
        ("model.pool=max", "model.pool = 'max' is not valid: expected one of cls, mean, mean_all"),
        (
            "train.schedule=exp",
            "train.schedule = 'exp' is not valid: expected one of rsqrt, cosine, linear, constant, onecycle",
        ),
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
    with pytest.raises(ConfigError, match="^train.lr = 'fast' is not valid: expected a number > 0$"):
        load_config(str(path))


def test_integral_numbers_are_accepted_as_integers(tmp_path):
    cfg = load_config(toy_config_path(tmp_path), None, ["train.steps=5e3", "model.layers=2.0", "train.lr=1"])
    assert cfg.train.steps == 5000 and type(cfg.train.steps) is int
    assert cfg.model.layers == 2 and type(cfg.model.layers) is int
    # an int is a valid number (kept as written: the config hash stays put)
    assert cfg.train.lr == 1 and type(cfg.to_dict()["train"]["lr"]) is int


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


def test_every_default_passes_its_declared_rule_and_has_a_doc():
    from lra.train.settings import declared, defaults, rules, sections

    assert set(sections()) == {"model", "train"}
    for section in sections().values():
        schema = rules(section)
        for key, value in defaults(section).items():
            assert schema[key].check(key, value) == value, key
        assert all(f.metadata["doc"] for f in declared(section).values())


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
    with pytest.raises(ConfigError, match="unknown schedule 'exp'; known: rsqrt, cosine, linear, constant, onecycle$"):
        lr_factor("exp", warmup=0, total_steps=1)


@pytest.mark.parametrize("lr, warmup, steps", [(1e-3, 7, 50), (1e-4, 175, 1000), (0.05, 2, 3)])
def test_onecycle_lr_and_beta1_match_torch_onecyclelr_at_every_step(lr, warmup, steps):
    """Our 1-based step s is OneCycleLR's step_num s - 1. The last steps' lr (down to lr / 2.5e5) is, in both, a
    difference of numbers near lr, so it is compared to within 1e-14 lr besides 1e-12 relative."""
    factor = lr_factor("onecycle", warmup=warmup, total_steps=steps)
    beta1 = beta1_at("onecycle", warmup=warmup, total_steps=steps)
    want = onecycle_reference(lr, warmup, steps)
    got = [(lr * factor(s), beta1(s)) for s in range(1, steps + 1)]
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], rel=1e-12, abs=1e-14 * lr)
    assert [g[1] for g in got] == pytest.approx([w[1] for w in want], rel=1e-12, abs=0)
    assert (factor(1), factor(warmup), factor(steps)) == pytest.approx((1 / 25, 1.0, 1 / 25 / 1e4), rel=1e-12)
    assert (beta1(1), beta1(warmup), beta1(steps)) == pytest.approx((0.95, 0.85, 0.95), rel=1e-12)


def test_only_onecycle_sets_beta1():
    for schedule in ("rsqrt", "cosine", "linear", "constant"):
        assert beta1_at(schedule, warmup=10, total_steps=100) is None


@pytest.mark.parametrize(
    "warmup, message",
    [
        (0, "train.warmup = 0 is too short for train.schedule = onecycle: .* must be at least 2$"),
        (1, "train.warmup = 1 is too short for train.schedule = onecycle: .* must be at least 2$"),
        (120, "train.warmup = 120 leaves no decay for train.schedule = onecycle: it must be below train.steps = 120$"),
        (500, "train.warmup = 500 leaves no decay for train.schedule = onecycle: it must be below train.steps = 120$"),
    ],
)
def test_onecycle_refuses_a_warmup_outside_2_to_steps_minus_1(tmp_path, warmup, message):
    """OneCycleLR divides by zero there (warmup 1, or steps: its last phase is empty; warmup 0 has no rise)."""
    sets = ["train.schedule=onecycle", f"train.warmup={warmup}"]
    with pytest.raises(ConfigError, match=f"^{message}"):
        load_config(toy_config_path(tmp_path), None, sets)  # the toy config has 120 steps
    for schedule_of in (lr_factor, beta1_at):
        with pytest.raises(ConfigError, match=message):
            schedule_of("onecycle", warmup=warmup, total_steps=120)
    assert load_config(toy_config_path(tmp_path), None, ["train.schedule=cosine", f"train.warmup={warmup}"])
    for ok in (2, 119):
        assert load_config(toy_config_path(tmp_path), None, ["train.schedule=onecycle", f"train.warmup={ok}"])


def test_a_record_from_before_a_setting_existed_is_the_same_config(tmp_path):
    """A stored config without `model.embed_std` ran with the default: same hash, same seed-free key."""
    from lra.results.aggregate import config_key

    config = load_config(toy_config_path(tmp_path)).to_dict()
    old = {**config, "model": {k: v for k, v in config["model"].items() if k != "embed_std"}}
    assert config["model"]["embed_std"] == 1.0 and "embed_std" not in old["model"]
    assert config_hash(old) == config_hash(config)
    assert config_key({"config": old}) == config_key({"config": config})
    other = load_config(toy_config_path(tmp_path), overrides=["model.embed_std=0.02"]).to_dict()
    assert config_key({"config": other}) != config_key({"config": config})


@pytest.mark.parametrize("std", [0.02, 1.0])
def test_embed_std_sets_the_token_embeddings_init(tmp_path, std):
    import torch

    from lra.model import Encoder

    config = load_config(toy_config_path(tmp_path), overrides=[f"model.embed_std={std}", "model.dim=64"])
    torch.manual_seed(0)
    encoder = Encoder(config.model, "naive", vocab_size=2000, seq_len=8, attn_options={})
    weight = encoder.embed.weight.detach()
    assert torch.all(weight[0] == 0)  # the padding token stays zero
    assert weight[1:].std().item() == pytest.approx(std, rel=0.02)  # 127,936 draws: std within ~0.4%


def test_a_run_sees_and_hashes_only_its_own_backends_attention_block(tmp_path):
    """A preset or --set that gives one backend options (ListOps' local window) leaves every other backend's run
    config, and so its hash and its place in the leaderboard, as it was."""
    path = toy_config_path(tmp_path)
    plain = load_config(path)
    both = load_config(path, None, ["attention.local.window=8", "attention.naive.scale=0.5"])
    assert both.for_backend("local").to_dict()["attention"] == {"local": {"window": 8}}
    assert both.for_backend("flash").to_dict()["attention"] == {}
    assert config_hash(both.for_backend("flash")) == config_hash(plain.for_backend("flash")) == config_hash(plain)
    assert config_hash(both.for_backend("local")) != config_hash(plain.for_backend("local"))
    assert config_hash(both.for_backend("naive")) != config_hash(both.for_backend("local"))


def test_a_sweep_cell_and_its_run_record_share_the_backend_only_hash(tmp_path):
    from lra.sweep.grid import build_grid
    from lra.train.run import train

    sets = ["attention.local.window=8", "train.steps=2", "train.eval_every=2"]
    (cell,) = build_grid(tasks=[toy_config_path(tmp_path)], attns=["naive"], seeds=[0], presets=["default"],
                         overrides=sets, root=tmp_path / "sweeps")  # fmt: skip
    summary = train(load_config(toy_config_path(tmp_path), None, sets), "naive", device="cpu", out_dir=tmp_path / "r")
    assert summary["config"]["attention"] == {}
    assert (
        summary["config_hash"]
        == cell.config_hash
        == config_hash(load_config(toy_config_path(tmp_path), None, sets[1:]))
    )
