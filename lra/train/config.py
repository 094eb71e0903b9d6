"""Run configuration: a task's YAML, a preset overlay, then `--set key=value` overrides, validated and hashed.

A config has the sections `task`, `data` (the task's own settings), `model`, `train`, `attention` (per-backend
options, keyed by backend name) and `presets` (overlays: `tiny`, `fa-paper`). Every key must be known: a typo is an
error that lists the valid keys, never a silently ignored setting. Every model, train and data setting has a declared
type and range (lra.train.settings), checked on the merged config, so YAML and `--set` values are checked alike.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from lra.core.errors import ConfigError
from lra.core.hashing import stable_hash
from lra.train.schedules import check_schedule
from lra.train.settings import check_settings, data_settings

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"

MODEL_DEFAULTS: dict[str, Any] = {
    "layers": 2,
    "dim": 128,
    "heads": 4,
    "mlp_dim": 256,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "pos_emb": "learned",  # learned | sinusoidal
    "pool": "cls",  # cls | mean
    "embed_std": 1.0,  # std of the token embeddings' normal init (1.0: torch's nn.Embedding default)
    "head_dim": None,  # None: dim // heads
    "classifier_dim": None,  # hidden width of the classifier MLP; None: mlp_dim
}

TRAIN_DEFAULTS: dict[str, Any] = {
    "batch_size": 32,
    "steps": 1000,
    "lr": 1e-3,
    "schedule": "rsqrt",  # rsqrt | cosine | linear | constant | onecycle (lra.train.schedules)
    "warmup": 100,
    "weight_decay": 0.0,
    "betas": [0.9, 0.98],  # under schedule onecycle, betas[0] is ignored: beta1 cycles 0.95 -> 0.85 -> 0.95
    "eps": 1e-9,
    "grad_clip": 1.0,  # 0 disables
    "eval_every": 200,
    "eval_batches": 0,  # 0: the whole split
    "checkpoint_every": 0,  # 0: at every evaluation
    "log_every": 10,
    "amp": "bf16",  # bf16 (fp16, loss-scaled) autocast on CUDA; none: fp32. Ignored on CPU (but by the numerics study)
    "seed": 0,
    "init_from": None,  # a run directory or checkpoint to start from (positions upsampled on the 2-D grid)
    "acc_thresholds": [0.5, 0.6, 0.7],  # record wall-clock time when validation accuracy first reaches these
    # How fast, not what: these three change no result (beyond float rounding) and stay out of the config hash.
    "compile": "auto",  # none | default | max (lra.train.compiled); auto: none on the CPU, max on CUDA
    "eval_batch_size": None,  # None: 4 x batch_size (evaluation needs no activations for a backward)
    "data_placement": "auto",  # device | host; auto: splits that fit stay in GPU memory, the rest on the host
}

# Settings that change the speed of a run but not its result: resuming or aggregating across them is the same run.
SPEED_SETTINGS = ("compile", "eval_batch_size", "data_placement")

# Settings added after run records were first stored, with the value every earlier run used: a record without one
# is the same config as a run that sets it to this value (same hash, aggregated together).
LATER_SETTINGS: dict[str, dict[str, Any]] = {"model": {"embed_std": 1.0}}

# Settings added later that stay out of the hash while they hold this value (what every earlier run did): a config
# that leaves them there hashes as it did before they existed, so the hashes stored in existing records still match.
QUIET_DEFAULTS: dict[str, dict[str, Any]] = {"data": {"black_padding": False}}

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
            raise ConfigError(f"unknown setting {where}{key!r}; valid here: {', '.join(sorted(map(str, out)))}")
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


def load_config(task: str, preset: str | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """The resolved config for `task` (a name or a YAML path) with `preset` and `--set` overrides applied."""
    from tasks.registry import TASKS, task_options

    path = config_path(task)
    raw = read_yaml(path)
    unknown = sorted(set(raw) - set(SECTIONS) - {"presets", "description"})
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}; sections: {', '.join(SECTIONS)}, presets")
    task_name = raw.get("task") or path.stem
    config: dict[str, Any] = {
        "task": task_name,
        "data": task_options(task_name),
        "model": copy.deepcopy(MODEL_DEFAULTS),
        "train": copy.deepcopy(TRAIN_DEFAULTS),
        "attention": {},
    }
    config = _overlay(config, {k: v for k, v in raw.items() if k in SECTIONS}, str(path))
    presets = raw.get("presets") or {}
    if preset is not None:
        if preset not in presets:
            raise ConfigError(f"unknown preset {preset!r} for {task_name}; presets: {', '.join(sorted(presets))}")
        config = _overlay(config, presets[preset] or {}, f"preset {preset!r}")
    for item in overrides or []:
        parts, value = parse_override(item)
        config = _overlay(config, _nest(parts, value), f"--set {item}")
    config["preset"] = preset or "default"
    check_settings(config, data_settings(TASKS.get(task_name)))
    validate(config)
    return config


def validate(config: dict[str, Any]) -> None:
    """Checks across settings (each one's type and range is checked by `check_settings` before)."""
    m = config["model"]
    if m["head_dim"] is None and m["dim"] % m["heads"]:
        raise ConfigError(
            f"model.dim ({m['dim']}) must be divisible by model.heads ({m['heads']}), or set model.head_dim"
        )
    t = config["train"]
    check_schedule(t["schedule"], warmup=t["warmup"], total_steps=t["steps"])


def head_dim_of(config: dict[str, Any]) -> int:
    m = config["model"]
    return int(m["head_dim"] or m["dim"] // m["heads"])


def outcome_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without the train settings that change speed only (SPEED_SETTINGS): what decides the result."""
    config = comparable(config)
    train = {k: v for k, v in config["train"].items() if k not in SPEED_SETTINGS}
    return {**config, "train": train}


def with_later_settings(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with each LATER_SETTINGS value it lacks (a record stored before the setting existed)."""
    out = dict(config)
    for section, values in LATER_SETTINGS.items():
        if isinstance(out.get(section), dict):
            out[section] = {**values, **out[section]}
    return out


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as hashes and record comparisons see it: LATER_SETTINGS it lacks filled in, QUIET_DEFAULTS that hold
    their quiet value left out."""
    out = with_later_settings(config)
    for section, values in QUIET_DEFAULTS.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k not in values or v != values[k]}
    return out


def config_hash(config: dict[str, Any]) -> str:
    """A short stable hash of the resolved config's outcome settings: a compiled and an eager run of one config (or
    runs that differ in evaluation batch size or data placement) share it, and so do records from before these
    settings existed."""
    return stable_hash(outcome_config(config))
