"""Every config setting, declared once: name, type, range, default and one line of doc, checked once the YAML, the
preset and `--set` are merged.

`model:` and `train:` settings are the fields of `ModelSettings` and `TrainSettings` below: adding a setting is one
line in one of them (nothing else keeps a list of settings). The validated config holds instances of these frozen
classes, read by attribute (lra.train.config.RunConfig). A task's `data:` settings take their types from the task
constructor's annotations (or, unannotated, from its defaults), while the task keeps its own checks of values.
Integer settings accept exactly-integral numbers (`train.steps=5e3` is 5000; `model.layers=2.5` is refused); bools
are never numbers. A bad value is a ConfigError naming the key, the value and what is expected.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lra.core.errors import ConfigError
from lra.train.augment import AUGMENTS
from lra.train.schedules import SCHEDULES


@dataclass(frozen=True)
class Setting:
    """One setting's type: kind is int, float, bool, str, path, enum or list (of `item`, `length` long if set).

    `low`/`high` bound numbers (`low_open`/`high_open`: the bound itself is excluded); `optional` allows null."""

    kind: str
    low: float | None = None
    high: float | None = None
    high_open: bool = False
    low_open: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False
    item: Setting | None = None
    length: int | None = None

    def describe(self) -> str:
        """What is expected, in words: 'an integer >= 1', 'one of cls, mean', 'a list of 2 numbers in [0, 1)'."""
        words = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
        if self.kind == "enum":
            text = f"one of {', '.join(self.choices)}"
        elif self.kind == "path":
            text = "a path"
        elif self.kind == "list":
            count = f"{self.length} " if self.length else ""
            text = f"a list of {count}{self.item.describe().removeprefix('a ').removeprefix('an ')}"
            text = text.replace("integer", "integers").replace("number", "numbers")
        else:
            text = words[self.kind] + self._range()
        return text + (" or null" if self.optional else "")

    def _range(self) -> str:
        if self.low is not None and self.high is not None:
            return f" in [{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f" {'>' if self.low_open else '>='} {self.low:g}"
        return ""

    def check(self, key: str, value: Any) -> Any:
        """`value` as this setting stores it (2.0 -> 2 for an int), or a ConfigError naming `key`."""
        if value is None and self.optional:
            return None
        ok, out = self._convert(value)
        if not ok:
            raise ConfigError(f"{key} = {value!r} is not valid: expected {self.describe()}")
        return out

    def _convert(self, value: Any) -> tuple[bool, Any]:
        if self.kind == "list":
            if not isinstance(value, list) or (self.length is not None and len(value) != self.length):
                return False, value
            items = [self.item._convert(v) for v in value]
            return all(ok for ok, _ in items), [v for _, v in items]
        if self.kind in ("int", "float"):
            return self._number(value)
        if self.kind == "bool":
            return isinstance(value, bool), value
        if self.kind == "enum":
            return value in self.choices, value
        return isinstance(value, str) and (self.kind == "str" or bool(value)), value

    def _number(self, value: Any) -> tuple[bool, Any]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False, value
        if self.kind == "int":
            if value != int(value):
                return False, value
            value = int(value)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        return not (too_low or too_high), value


POSITIVE_INT = Setting("int", low=1)
COUNT = Setting("int", low=0)
FRACTION = Setting("float", low=0, high=1, high_open=True)


def setting(default: Any, rule: Setting, doc: str, *, speed: bool = False, since: bool = False) -> Any:
    """One setting of a section class: its `default`, the `rule` its values pass, one line of `doc`.

    `speed`: it changes how fast a run goes, never its result (left out of the config hash). `since`: added after
    run records were first stored, and every earlier run used `default` (a record without it gets it).
    A list default is stored as a tuple (the section is frozen); `RunConfig.to_dict` gives it back as a list.
    """
    frozen = tuple(default) if isinstance(default, list) else default
    meta = {"rule": rule, "doc": doc, "speed": speed, "since": since}
    return field(default=frozen, metadata=meta)


@dataclass(frozen=True)
class ModelSettings:
    """The `model:` section: the encoder's shape and regularisation."""

    layers: int = setting(2, POSITIVE_INT, "encoder blocks")
    dim: int = setting(128, POSITIVE_INT, "model width (embedding and residual stream)")
    heads: int = setting(4, POSITIVE_INT, "attention heads per block")
    mlp_dim: int = setting(256, POSITIVE_INT, "hidden width of each block's MLP")
    dropout: float = setting(0.1, FRACTION, "dropout on embeddings, MLPs and residual branches")
    attention_dropout: float = setting(0.0, FRACTION, "dropout on the attention probabilities (the backend's own)")
    pos_emb: str = setting(
        "learned", Setting("enum", choices=("learned", "sinusoidal", "sincos2d", "rope2d")),
        "positions: learned, fixed 1-D sinusoidal, fixed 2-D (row and column) or 2-D rotary (rope2d) for square images",
    )  # fmt: skip
    pool: str = setting(
        "cls", Setting("enum", choices=("cls", "mean", "mean_all")),
        "pooling: [CLS], mean over real tokens, or mean over all positions (padding as zeros)",
    )  # fmt: skip
    embed_std: float = setting(
        1.0, Setting("float", low=1e-6), "std of the token embeddings' normal init (1.0: torch's default)", since=True
    )
    head_dim: int | None = setting(None, Setting("int", low=1, optional=True), "per-head width; null: dim // heads")
    classifier_dim: int | None = setting(
        None, Setting("int", low=1, optional=True), "hidden width of the classifier MLP; null: mlp_dim"
    )
    pack_tokens: bool = setting(
        False, Setting("bool"), "run the encoder on each sequence's real tokens only (exact; lra/model.py)", since=True
    )

    @property
    def resolved_head_dim(self) -> int:
        """The attention head width: head_dim, or dim // heads when it is null."""
        return int(self.head_dim or self.dim // self.heads)


@dataclass(frozen=True)
class TrainSettings:
    """The `train:` section: optimisation, evaluation, checkpoints, precision and speed."""

    batch_size: int = setting(32, POSITIVE_INT, "global training batch (split evenly over --nproc ranks)")
    steps: int = setting(1000, POSITIVE_INT, "optimizer steps")
    lr: float = setting(1e-3, Setting("float", low=0, low_open=True), "peak learning rate (0 trains nothing)")
    schedule: str = setting(
        "rsqrt", Setting("enum", choices=SCHEDULES), "learning-rate schedule (onecycle also cycles beta1)"
    )
    warmup: int = setting(100, COUNT, "warm-up steps of the schedule")
    weight_decay: float = setting(0.0, Setting("float", low=0), "AdamW weight decay (matrices only)")
    betas: tuple[float, float] = setting(
        [0.9, 0.98], Setting("list", item=FRACTION, length=2), "Adam betas (betas[0] ignored under onecycle)"
    )
    eps: float = setting(1e-9, Setting("float", low=0), "Adam epsilon")
    grad_clip: float = setting(1.0, Setting("float", low=0), "gradient-norm clip; 0 disables")
    eval_every: int = setting(200, POSITIVE_INT, "steps between validations")
    eval_batches: int = setting(0, COUNT, "validation batches (of batch_size examples); 0: the whole split")
    checkpoint_every: int = setting(0, COUNT, "steps between checkpoints; 0: at every validation")
    log_every: int = setting(10, POSITIVE_INT, "steps between log lines")
    amp: str = setting(
        "bf16", Setting("enum", choices=("bf16", "fp16", "none")),
        "autocast on CUDA (fp16 loss-scaled); none: fp32. Ignored on the CPU but by the numerics study",
    )  # fmt: skip
    seed: int = setting(0, COUNT, "seed of the initial weights, data order and dropout draws")
    init_from: str | None = setting(
        None, Setting("path", optional=True), "a run directory or checkpoint to start from (positions upsampled)"
    )
    init_positions: str = setting(
        "upsample", Setting("enum", choices=("upsample", "mirror")),
        "init_from's positions onto a larger grid: upsample (bilinear, same picture) or mirror (same pixel scale)",
        since=True,
    )  # fmt: skip
    freeze_positions: bool = setting(
        False, Setting("bool"),
        "keep the learned position table as initialised (e.g. by init_from): no gradient, no update",
        since=True,
    )  # fmt: skip
    augment: str = setting(
        "none", Setting("enum", choices=AUGMENTS),
        "training images shown in a random pose of eight (flips, quarter turns): Pathfinder's tasks only",
        since=True,
    )  # fmt: skip
    objective: str = setting(
        "classify", Setting("enum", choices=("classify", "masked")),
        "classify (the labels) or masked: self-pretraining, hidden tokens named from the rest (lra/train/objective.py)",
        since=True,
    )  # fmt: skip
    mask_rate: float = setting(
        0.15, Setting("float", low=0, high=1, low_open=True, high_open=True),
        "train.objective=masked: the share of each sequence's real tokens hidden (BERT's 0.15)", since=True,
    )  # fmt: skip
    acc_thresholds: tuple[float, ...] = setting(
        [0.5, 0.6, 0.7], Setting("list", item=Setting("float", low=0, high=1)),
        "validation accuracies whose first wall-clock time is recorded",
    )  # fmt: skip
    compile: str = setting(
        "auto", Setting("enum", choices=("auto", "none", "default", "max")),
        "torch.compile mode; auto: none on the CPU, max on CUDA", speed=True,
    )  # fmt: skip
    eval_batch_size: int | None = setting(
        None, Setting("int", low=1, optional=True), "evaluation batch; null: 4 x batch_size", speed=True
    )
    data_placement: str = setting(
        "auto", Setting("enum", choices=("auto", "device", "host")),
        "where splits live; auto: in GPU memory when they fit", speed=True,
    )  # fmt: skip


def sections() -> dict[str, type]:
    """The declared sections by config name. Looked up at call time, so nothing else keeps a copy of them."""
    return {"model": ModelSettings, "train": TrainSettings}


def declared(section: type) -> dict[str, dataclasses.Field]:
    """A section class's settings by name, in declaration order."""
    return {f.name: f for f in dataclasses.fields(section)}


def defaults(section: type) -> dict[str, Any]:
    """A section's defaults as a plain config dict (lists as lists)."""
    return {name: thaw(f.default) for name, f in declared(section).items()}


def rules(section: type) -> dict[str, Setting]:
    """A section's value rules by setting name."""
    return {name: f.metadata["rule"] for name, f in declared(section).items()}


def flagged(section: type, flag: str) -> dict[str, Any]:
    """The settings of `section` declared with `flag` (speed, since), with their defaults."""
    return {name: thaw(f.default) for name, f in declared(section).items() if f.metadata[flag]}


def freeze(value: Any) -> Any:
    """A config value as a frozen object stores it: lists as tuples, mappings read-only (deeply)."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    return value


def thaw(value: Any) -> Any:
    """The plain (JSON, YAML) form of a frozen value: tuples as lists, mappings as dicts (deeply)."""
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value


_PLAIN = {int: "int", float: "float", bool: "bool", str: "str"}


def _is_path(hint: Any) -> bool:
    return hint in (Path, os.PathLike) or typing.get_origin(hint) is os.PathLike


def _from_type(hint: Any, default: Any) -> Setting | None:
    """The Setting of a constructor parameter from its annotation (int, float, bool, str, str | PathLike, Literal,
    X | None); None when the annotation says nothing checkable."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if any(map(_is_path, inner)) and all(a is str or _is_path(a) for a in inner):
            return Setting("path", optional=type(None) in args)
        base = _from_type(inner[0], default) if len(inner) == 1 else None
        return Setting(base.kind, choices=base.choices, optional=True) if base else None
    if typing.get_origin(hint) is typing.Literal:
        return Setting("enum", choices=tuple(args), optional=default is None)
    if hint is inspect.Parameter.empty:
        hint = type(default)
    return Setting(_PLAIN[hint], optional=default is None) if hint in _PLAIN else None


def data_settings(task_cls: type) -> dict[str, Setting]:
    """The declared types of a task's `data:` settings, from its constructors (base classes first)."""
    return constructor_settings(task_cls)


def constructor_settings(cls: type) -> dict[str, Setting]:
    """The declared types of the parameters of `cls`'s constructors (base classes first): a task's `data:`
    settings, an attention backend's options."""
    out: dict[str, Setting] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            hints = typing.get_type_hints(init)
        except (NameError, TypeError):  # an annotation that does not resolve: fall back to the defaults' types
            hints = {}
        for p in inspect.signature(init).parameters.values():
            default = None if p.default is inspect.Parameter.empty else p.default
            setting = _from_type(hints.get(p.name, inspect.Parameter.empty), default)
            if setting is not None:
                out[p.name] = setting
    return out


def check_settings(config: dict[str, Any], data: dict[str, Setting]) -> None:
    """Check (and normalise, 2.0 -> 2) the declared sections and the data section of a merged config in place."""
    schemas = [(name, rules(cls)) for name, cls in sections().items()]
    for section, schema in [*schemas, ("data", data)]:
        values = config[section]
        for key, setting in schema.items():
            if key in values:
                values[key] = setting.check(f"{section}.{key}", values[key])
