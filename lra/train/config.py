"""Run configuration: a task's YAML, a preset overlay, then `--set key=value` overrides, validated and hashed.

A config has the sections `task`, `data` (the task's own settings), `model`, `train`, `attention` (per-backend
options, keyed by backend name) and `presets` (overlays: `tiny`, `fa-paper`, `fly`). A preset may hold `backends:`,
model and train settings for one backend's runs only (`backends: {local: {model: {pool: mean}}}`), applied after the
preset and before `--set` when the config is loaded for that backend. Every key must be known: a typo is an
error that lists the valid keys, never a silently ignored setting. Every model, train and data setting has a declared
type and range (lra.train.settings), checked on the merged config, so YAML and `--set` values are checked alike;
every `attention:` block names a registered backend and options it takes (a misspelling names the closest).
The result is a frozen `RunConfig` read by attribute; `to_dict()` is the plain dict that records store and hash.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lra.core.errors import ConfigError
from lra.core.hashing import stable_hash
from lra.core.registry import did_you_mean
from lra.train.schedules import check_schedule
from lra.train.settings import (
    ModelSettings,
    TrainSettings,
    check_settings,
    constructor_settings,
    data_settings,
    defaults,
    flagged,
    freeze,
    sections,
    thaw,
)

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def speed_settings() -> tuple[str, ...]:
    """The train settings declared `speed`: they change how fast a run goes, not its result."""
    return tuple(flagged(sections()["train"], "speed"))


SPEED_SETTINGS = speed_settings()  # the same, for readers of stored records (lra.results.aggregate)

# Settings added later that stay out of the hash while they hold this value (what every earlier run did): a config
# that leaves them there hashes as it did before they existed, so the hashes stored in existing records still match.
QUIET_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {"black_padding": False},
    "model": {"pack_tokens": False},
    "train": {
        "init_positions": "upsample",
        "freeze_positions": False,
        "augment": "none",
        "objective": "classify",
        "mask_rate": 0.15,
    },
}

SECTIONS = ("task", "data", "model", "train", "attention")


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 3e-4 as a string; configs mean a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def yaml_load(text):
    return yaml.load(text, Loader=_Loader)


def available_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_path(task: str) -> Path:
    path = Path(task)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    path = CONFIG_DIR / f"{task}.yaml"
    if not path.is_file():
        raise ConfigError(f"no config for task {task!r} (looked for {path}); known: {', '.join(available_configs())}")
    return path


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml_load(f) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return raw


def presets_of(task: str) -> list[str]:
    return sorted((read_yaml(config_path(task)).get("presets") or {}).keys())


def _merge(base: dict[str, Any], overlay: dict[str, Any], where: str) -> dict[str, Any]:
    """Recursively overlay `overlay` on `base`; keys must already exist in `base` (except in free-form sections)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if key not in out:
            valid = sorted(map(str, out))
            hint = did_you_mean(str(key), valid)
            raise ConfigError(f"unknown setting {where}{key}{hint}; valid here: {', '.join(valid)}")
        if isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merge(out[key], value, f"{where}{key}.")
        else:
            out[key] = copy.deepcopy(value)
    return out


def _overlay_attention(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for name, opts in (overlay or {}).items():
        if not isinstance(opts, dict):
            raise ConfigError(f"attention.{name} must be a mapping of options, got {opts!r}")
        out.setdefault(name, {}).update(copy.deepcopy(opts))
    return out


def _overlay(config: dict[str, Any], overlay: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(overlay) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"unknown section(s) {', '.join(unknown)} in {where}; sections: {', '.join(SECTIONS)}")
    out = copy.deepcopy(config)
    for section, values in overlay.items():
        if section == "task":
            out["task"] = values
        elif section == "attention":
            out["attention"] = _overlay_attention(out["attention"], values)
        else:
            if not isinstance(values, dict):
                raise ConfigError(f"{where}: section {section!r} must be a mapping")
            out[section] = _merge(out[section], values, f"{section}.")
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """'train.lr=3e-4' -> (['train', 'lr'], 0.0003); the value is read as YAML (numbers, lists, null, true)."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value (e.g. train.lr=3e-4), got {item!r}")
    key, _, raw = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) < 2:
        raise ConfigError(f"--set key must name a section and a setting (e.g. model.layers=2), got {key!r}")
    try:
        value = yaml_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parts, value


def _nest(parts: list[str], value: Any) -> dict[str, Any]:
    out: Any = value
    for p in reversed(parts):
        out = {p: out}
    return out


@dataclass(frozen=True)
class RunConfig:
    """A validated run config, frozen: `config.model.dim`, `config.train.lr`, `config.data["max_length"]`,
    `config.attention["flash"]["block_m"]` (the data and attention sections are read-only mappings: their keys are
    declared by each task's and each backend's constructor). Build a variant with `with_settings`, never by editing.
    """

    task: str
    data: Mapping[str, Any]
    model: ModelSettings
    train: TrainSettings
    attention: Mapping[str, Mapping[str, Any]]
    preset: str = "default"

    @classmethod
    def from_dict(cls, plain: dict[str, Any]) -> RunConfig:
        """The frozen form of a merged and checked plain config (see `resolve`)."""
        built = {name: section(**freeze(plain[name])) for name, section in sections().items()}
        rest = {"data": freeze(plain["data"]), "attention": freeze(plain["attention"])}
        return cls(task=plain["task"], preset=plain.get("preset", "default"), **rest, **built)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its plain dict (read-only mappings do not pickle): worker processes get configs too."""
        return (RunConfig.from_dict, (self.to_dict(),))

    def to_dict(self) -> dict[str, Any]:
        """The plain config as records store it and as the config hash has always been computed."""
        out: dict[str, Any] = {"task": self.task, "data": thaw(self.data)}
        for name in sections():
            section = getattr(self, name)
            out[name] = {f.name: thaw(getattr(section, f.name)) for f in dataclasses.fields(section)}
        return {**out, "attention": thaw(self.attention), "preset": self.preset}

    def options_of(self, backend: str) -> dict[str, Any]:
        """The `attention: {backend: {...}}` options of `backend` ({} when the config sets none)."""
        return thaw(self.attention.get(backend) or {})

    def for_backend(self, backend: str) -> RunConfig:
        """This config as a run of `backend` sees it: the `attention:` blocks of other backends left out, so a preset
        that sets one backend's options (ListOps' local window, say) leaves every other backend's config hash as it
        was. Every run, sweep cell and campaign stage stores and hashes this form."""
        own = {backend: self.attention[backend]} if backend in self.attention else {}
        return dataclasses.replace(self, attention=freeze(thaw(own)))

    def with_settings(self, overrides: Sequence[str] = (), *, overlay: dict[str, Any] | None = None) -> RunConfig:
        """A variant of this config, built before it is checked as any config is: `--set`-style `overrides`
        ('train.seed=1') and a nested `overlay` ({"attention": {"flash": {"block_m": 64}}}) applied in that order."""
        plain = self.to_dict()
        preset = plain.pop("preset")
        for item in overrides:
            parts, value = parse_override(item)
            plain = _overlay(plain, _nest(parts, value), f"--set {item}")
        if overlay:
            plain = _overlay(plain, overlay, "the variant's settings")
        return resolve({**plain, "preset": preset})


def load_config(
    task: str, preset: str | None = None, overrides: list[str] | None = None, *, backend: str | None = None
) -> RunConfig:
    """The resolved config for `task` (a name or a YAML path) with `preset`, then the preset's settings for `backend`
    (its `backends:` block; none when `backend` is None), then `--set` overrides applied."""
    from tasks.registry import task_options

    path = config_path(task)
    raw = read_yaml(path)
    unknown = sorted(set(raw) - set(SECTIONS) - {"presets", "description"})
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}; sections: {', '.join(SECTIONS)}, presets")
    task_name = raw.get("task") or path.stem
    config: dict[str, Any] = {"task": task_name, "data": task_options(task_name)}
    config.update({name: defaults(section) for name, section in sections().items()})
    config["attention"] = {}
    config = _overlay(config, {k: v for k, v in raw.items() if k in SECTIONS}, str(path))
    presets = raw.get("presets") or {}
    if preset is not None:
        if preset not in presets:
            names = sorted(presets)
            raise ConfigError(f"unknown preset {preset!r}{did_you_mean(preset, names)} for {task_name}; presets: "
                              f"{', '.join(names)}")  # fmt: skip
        overlay = dict(presets[preset] or {})
        own = backend_overlays(overlay.pop("backends", None), f"{path}: preset {preset!r}")
        config = _overlay(config, overlay, f"preset {preset!r}")
        if backend in own:
            config = _overlay(config, own[backend], f"preset {preset!r} backends.{backend}")
    for item in overrides or []:
        parts, value = parse_override(item)
        config = _overlay(config, _nest(parts, value), f"--set {item}")
    config["preset"] = preset or "default"
    return resolve(config)


BACKEND_SECTIONS = ("model", "train")


def backend_overlays(blocks: Any, where: str) -> dict[str, dict[str, Any]]:
    """A preset's `backends:` block checked: registered backend names, each with model and train settings only
    (backend options belong in the preset's `attention:` block, which is per backend already)."""
    from attention_impls.registry import BACKENDS

    if blocks is None:
        return {}
    if not isinstance(blocks, dict):
        raise ConfigError(f"{where}: backends must map backend names to settings, got {blocks!r}")
    for name, overlay in blocks.items():
        if name not in BACKENDS:
            raise ConfigError(
                f"{where}: backends.{name}: no attention backend {name!r}{did_you_mean(name, BACKENDS.names())}; "
                f"backends: {', '.join(BACKENDS.names())}"
            )
        if not isinstance(overlay, dict) or set(overlay) - set(BACKEND_SECTIONS):
            raise ConfigError(
                f"{where}: backends.{name} may set the sections {' and '.join(BACKEND_SECTIONS)} only, got "
                f"{overlay!r}; a backend's own options go in the preset's attention.{name} block"
            )
    return blocks


def resolve(config: dict[str, Any]) -> RunConfig:
    """Check a merged plain config (each setting's type and range, the attention blocks, the checks across
    settings) and freeze it."""
    from tasks.registry import TASKS

    config = copy.deepcopy(config)
    check_settings(config, data_settings(TASKS.get(config["task"])))
    check_attention(config["attention"])
    validate(config)
    return RunConfig.from_dict(config)


def check_attention(blocks: dict[str, Any], where: str = "attention.") -> None:
    """Every `attention:` block names a registered backend, and each of its options is one that backend takes, of
    the type its constructor declares (normalised in place, 64.0 -> 64). `where` starts each key in a message
    (`lra bench attention` names its `--set` and `--attn` items)."""
    from attention_impls.registry import BACKENDS

    for name, options in blocks.items():
        if name not in BACKENDS:
            raise ConfigError(
                f"{where}{name}: no attention backend {name!r}{did_you_mean(name, BACKENDS.names())}; "
                f"backends: {', '.join(BACKENDS.names())}"
            )
        valid = sorted(BACKENDS.options(name))
        types = constructor_settings(BACKENDS.get(name))
        for option, value in options.items():
            if option not in valid:
                raise ConfigError(
                    f"{where}{name}.{option}: {name!r} has no option {option!r}{did_you_mean(option, valid)}; "
                    f"its options: {', '.join(valid) or '(none)'}"
                )
            if option in types:
                options[option] = types[option].check(f"{where}{name}.{option}", value)


def validate(config: dict[str, Any]) -> None:
    """Checks across settings (each one's type and range is checked by `check_settings` before)."""
    m = config["model"]
    if m["head_dim"] is None and m["dim"] % m["heads"]:
        raise ConfigError(
            f"model.dim ({m['dim']}) must be divisible by model.heads ({m['heads']}), or set model.head_dim"
        )
    t = config["train"]
    check_schedule(t["schedule"], warmup=t["warmup"], total_steps=t["steps"])


def plain(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """A config as a plain dict: a RunConfig's `to_dict()`, a stored record's config as it is."""
    return config.to_dict() if isinstance(config, RunConfig) else config


def outcome_config(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """`config` without the train settings that change speed only (SPEED_SETTINGS): what decides the result."""
    config = comparable(config)
    train = {k: v for k, v in config["train"].items() if k not in speed_settings()}
    return {**config, "train": train}


def with_later_settings(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """`config` with each setting declared `since` that it lacks, at its default (a record stored before the setting
    existed ran with it)."""
    out = dict(plain(config))
    for name, section in sections().items():
        if isinstance(out.get(name), dict):
            out[name] = {**flagged(section, "since"), **out[name]}
    return out


def comparable(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """`config` as hashes and record comparisons see it: `since` settings it lacks filled in, QUIET_DEFAULTS that
    hold their quiet value left out."""
    out = with_later_settings(config)
    for section, values in QUIET_DEFAULTS.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k not in values or v != values[k]}
    return out


def config_hash(config: RunConfig | dict[str, Any]) -> str:
    """A short stable hash of the resolved config's outcome settings: a compiled and an eager run of one config (or
    runs that differ in evaluation batch size or data placement) share it, and so do records from before these
    settings existed."""
    return stable_hash(outcome_config(config))
