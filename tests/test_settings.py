"""One declaration per setting, one check per attention block, one gate per backend (issue 35).

The frozen config hashes every curated record as the plain dicts always did; a misspelt backend block or option is
refused at load time naming the closest valid name; `--nproc` runs are refused before any worker starts; and a
throwaway backend and a throwaway setting, each declared in one temporary file, run end to end.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pickle
import re
import sys
from pathlib import Path

import pytest

from attention_impls.registry import BACKENDS
from lra.cli.main import main
from lra.core.errors import ConfigError
from lra.core.hashing import stable_hash
from lra.train import settings
from lra.train.config import config_hash, load_config, resolve
from tests.toy_task import toy_config_path

ROOT = Path(__file__).resolve().parent.parent
TINY_RUN = ["--device", "cpu", "--preset", "tiny", "--set", "train.steps=4", "--set", "train.eval_every=4"]


def old_config_hash(config: dict) -> str:
    """The config hash as computed before the frozen config (a copy of the old code, the independent reference):
    model.embed_std filled in at 1.0 where missing, data.black_padding and model.pack_tokens (added later) left out at
    False, the train settings added later left out at their first values, the speed-only train settings left out."""
    config = dict(config)
    config["model"] = {"embed_std": 1.0, **config["model"]}
    if config["model"].get("pack_tokens") is False:
        config["model"] = {k: v for k, v in config["model"].items() if k != "pack_tokens"}
    if config["data"].get("black_padding") is False:
        config["data"] = {k: v for k, v in config["data"].items() if k != "black_padding"}
    speed = ("compile", "eval_batch_size", "data_placement")
    config["train"] = {k: v for k, v in config["train"].items() if k not in speed}
    later = {
        "init_positions": "upsample",
        "augment": "none",
        "objective": "classify",
        "mask_rate": 0.15,
        "freeze_positions": False,
    }
    config["train"] = {k: v for k, v in config["train"].items() if k not in later or v != later[k]}
    return stable_hash(config)


def curated_records() -> list[dict]:
    paths = sorted((ROOT / "leaderboard" / "results").glob("run__*.json"))
    records = [json.loads(p.read_text()) for p in paths]
    return [r for r in records if isinstance(r.get("config"), dict)]


def test_every_curated_record_hashes_the_same_through_the_frozen_config():
    records = curated_records()
    assert len(records) > 20
    same_as_stored = 0
    for rec in records:
        frozen = resolve(rec["config"])  # the stored dict, checked and frozen as a fresh config is
        assert config_hash(frozen) == old_config_hash(rec["config"]) == config_hash(rec["config"]), rec["task"]
        same_as_stored += config_hash(frozen) == rec["config_hash"]
    assert same_as_stored > 0  # records written since the hash took its present form keep theirs exactly


def test_the_config_is_frozen_and_variants_are_checked_like_any_config(tmp_path):
    config = load_config(toy_config_path(tmp_path), "tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.train.lr = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.data["max_length"] = 7  # type: ignore[index]
    variant = config.with_settings(["train.seed=3"], overlay={"attention": {"naive": {"scale": 0.5}}})
    assert (variant.train.seed, config.train.seed) == (3, 0) and variant.options_of("naive") == {"scale": 0.5}
    assert variant.to_dict() == {**config.to_dict(), "train": {**config.to_dict()["train"], "seed": 3},
                                 "attention": {"naive": {"scale": 0.5}}}  # fmt: skip
    with pytest.raises(ConfigError, match="^train.lr = 0 is not valid"):
        config.with_settings(["train.lr=0"])
    assert pickle.loads(pickle.dumps(variant)) == variant  # worker processes receive configs


@pytest.mark.parametrize(
    "override, message",
    [
        ("attention.flsh.block_m=64", "attention.flsh: no attention backend 'flsh' (did you mean 'flash'?)"),
        (
            "attention.flash.blok_m=64",
            "attention.flash.blok_m: 'flash' has no option 'blok_m' (did you mean 'block_m'?)",
        ),
        ("attention.naive.window=8", "attention.naive.window: 'naive' has no option 'window'"),
    ],
)
def test_a_misspelt_attention_block_is_refused_at_load_naming_the_closest(tmp_path, override, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        load_config(toy_config_path(tmp_path), None, [override])


def test_attention_blocks_in_yaml_and_presets_are_checked_too(tmp_path, capsys):
    good = Path(toy_config_path(tmp_path)).read_text()
    in_yaml = tmp_path / "yaml.yaml"
    in_yaml.write_text(good + "attention: {sdpa_mth: {}}\n")
    in_preset = tmp_path / "preset.yaml"
    in_preset.write_text(good.replace("tiny: {train: {steps: 40}}", "tiny: {attention: {local: {windw: 8}}}"))
    with pytest.raises(ConfigError, match=r"did you mean 'sdpa_math'\?"):
        load_config(str(in_yaml))
    load_config(str(in_preset))  # the preset is not applied
    with pytest.raises(ConfigError, match=r"'local' has no option 'windw' \(did you mean 'window'\?\)"):
        load_config(str(in_preset), "tiny")
    assert main(["run", str(in_yaml), "--attn", "naive", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'sdpa_math'" in err


def test_a_misspelt_attn_name_names_the_closest(tmp_path, capsys):
    assert main(["run", toy_config_path(tmp_path), "--attn", "flsh", "--device", "cpu"]) == 2
    assert "unknown attention backend 'flsh' (did you mean 'flash'?)" in capsys.readouterr().err


def test_nproc_batch_split_is_refused_in_one_line_before_any_worker_starts(monkeypatch, capsys):
    import lra.train.launch as launch

    def no_workers(*args, **kwargs):
        raise AssertionError("workers started before the gate refused the run")

    monkeypatch.setattr(launch, "launch_local", no_workers)
    assert main(["run", "listops", "--attn", "naive", "--preset", "tiny", "--device", "cpu", "--nproc", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "does not divide among 3 processes" in err and "train.batch_size" in err


def test_triton_interpret_is_read_in_one_place():
    readers = []
    for folder in ("lra", "attention_impls", "tasks"):
        for path in (ROOT / folder).rglob("*.py"):
            if re.search(r"environ(\.get)?\(?\[?[\"']TRITON_INTERPRET", path.read_text(encoding="utf-8")):
                readers.append(path.relative_to(ROOT).as_posix())
    assert readers == ["lra/core/environment.py"]


THROWAWAY_BACKEND = '''
from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.registry import register_backend

CALLS = []


@register_backend("throwaway")
class Throwaway(AttentionBackend):
    """Softmax attention at a temperature: a test's backend."""

    capabilities = Capabilities(devices=("cpu",), notes="a test's backend")

    def __init__(self, *args, temperature: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.temperature = temperature

    def forward(self, q, k, v, key_padding_mask=None):
        CALLS.append(self.temperature)
        logits = (q @ k.transpose(-1, -2)) * (self.scale / self.temperature)
        return self.softmax_attend(logits, v, key_padding_mask)
'''

THROWAWAY_SETTING = '''
from dataclasses import dataclass

from lra.train.settings import ModelSettings, Setting, setting


@dataclass(frozen=True)
class ModelSettingsPlusOne(ModelSettings):
    """ModelSettings with one more line, as adding a setting to lra/train/settings.py is."""

    throwaway_width: int = setting(3, Setting("int", low=1), "a throwaway setting of a test")
'''


@pytest.fixture
def throwaways(tmp_path, monkeypatch):
    """The throwaway backend (registered) and setting (declared), each from its own temporary file."""
    (tmp_path / "throwaway_backend.py").write_text(THROWAWAY_BACKEND)
    (tmp_path / "throwaway_setting.py").write_text(THROWAWAY_SETTING)
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = importlib.import_module("throwaway_backend")
    monkeypatch.setattr(settings, "ModelSettings", importlib.import_module("throwaway_setting").ModelSettingsPlusOne)
    yield backend
    BACKENDS.unregister("throwaway")
    for name in ("throwaway_backend", "throwaway_setting"):
        sys.modules.pop(name, None)


def test_a_throwaway_backend_and_setting_run_end_to_end(throwaways, tmp_path, capsys):
    cfg = toy_config_path(tmp_path)
    run = ["run", cfg, "--attn", "throwaway", *TINY_RUN, "--results", str(tmp_path / "store")]
    sets = ["--set", "model.throwaway_width=5", "--set", "attention.throwaway.temperature=2"]
    assert main([*run, *sets, "--out", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"] == "throwaway" and summary["steps"] == 4
    assert summary["config"]["model"]["throwaway_width"] == 5
    assert summary["config"]["attention"] == {"throwaway": {"temperature": 2}}
    assert throwaways.CALLS and set(throwaways.CALLS) == {2}  # the kernel call got the option
    default = load_config(cfg, "tiny", ["train.steps=4", "train.eval_every=4", "attention.throwaway.temperature=2"])
    assert default.model.throwaway_width == 3 and config_hash(default) != summary["config_hash"]
    capsys.readouterr()
    assert main([*run, "--set", "model.throwaway_width=0"]) == 2
    assert "model.throwaway_width = 0 is not valid: expected an integer >= 1" in capsys.readouterr().err
    assert main([*run, "--set", "attention.throwaway.temperatur=2"]) == 2
    assert "(did you mean 'temperature'?)" in capsys.readouterr().err


def test_list_settings_shows_every_declared_setting(throwaways, capsys):
    from lra.cli.listing import settings_rows

    want = [
        (f"{section_name}.{name}", f.metadata["rule"].describe(), f.metadata["doc"])
        for section_name, section in settings.sections().items()
        for name, f in settings.declared(section).items()
    ]
    rows = settings_rows()
    assert [(key, values, doc.split(" (speed only")[0]) for key, values, _, doc in rows] == want
    assert ("model.throwaway_width", "an integer >= 1", "3", "a throwaway setting of a test") in rows
    betas = next(row for row in rows if row[0] == "train.betas")
    assert betas[1:3] == ("a list of 2 numbers in [0, 1)", "[0.9, 0.98]")  # a list default shown as a list
    assert main(["list", "settings"]) == 0
    text = capsys.readouterr().out
    assert all(f"│ {key} " in text for key, *_ in rows)  # the key column does not wrap
