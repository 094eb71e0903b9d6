"""Declared types and ranges of every config setting, checked once the YAML, the preset and `--set` are merged.

`model:` and `train:` settings are declared here; a task's `data:` settings take their types from the task
constructor's annotations (or, unannotated, from its defaults), while the task keeps its own checks of values.
Integer settings accept exactly-integral numbers (`train.steps=5e3` is 5000; `model.layers=2.5` is refused); bools
are never numbers. A bad value is a ConfigError naming the key, the value and what is expected.
"""

from __future__ import annotations

import inspect
import math
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lra.core.errors import ConfigError
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

MODEL_SETTINGS: dict[str, Setting] = {
    "layers": POSITIVE_INT,
    "dim": POSITIVE_INT,
    "heads": POSITIVE_INT,
    "mlp_dim": POSITIVE_INT,
    "dropout": FRACTION,
    "attention_dropout": FRACTION,
    "pos_emb": Setting("enum", choices=("learned", "sinusoidal")),
    "pool": Setting("enum", choices=("cls", "mean", "mean_all")),
    "embed_std": Setting("float", low=1e-6),
    "head_dim": Setting("int", low=1, optional=True),
    "classifier_dim": Setting("int", low=1, optional=True),
}

TRAIN_SETTINGS: dict[str, Setting] = {
    "batch_size": POSITIVE_INT,
    "steps": POSITIVE_INT,
    "lr": Setting("float", low=0, low_open=True),  # lr 0 trains nothing: a typo, never a run
    "schedule": Setting("enum", choices=SCHEDULES),  # onecycle also sets beta1: train.betas[0] is then ignored
    "warmup": COUNT,
    "weight_decay": Setting("float", low=0),
    "betas": Setting("list", item=FRACTION, length=2),
    "eps": Setting("float", low=0),
    "grad_clip": Setting("float", low=0),
    "eval_every": POSITIVE_INT,
    "eval_batches": COUNT,
    "checkpoint_every": COUNT,
    "log_every": POSITIVE_INT,
    "amp": Setting("enum", choices=("bf16", "fp16", "none")),
    "seed": COUNT,
    "init_from": Setting("path", optional=True),
    "acc_thresholds": Setting("list", item=Setting("float", low=0, high=1)),
    "compile": Setting("enum", choices=("auto", "none", "default", "max")),
    "eval_batch_size": Setting("int", low=1, optional=True),
    "data_placement": Setting("enum", choices=("auto", "device", "host")),
}

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
    out: dict[str, Setting] = {}
    for klass in reversed(task_cls.__mro__):
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
    """Check (and normalise, 2.0 -> 2) the model, train and data sections of a merged config in place."""
    for section, schema in (("model", MODEL_SETTINGS), ("train", TRAIN_SETTINGS), ("data", data)):
        values = config[section]
        for key, setting in schema.items():
            if key in values:
                values[key] = setting.check(f"{section}.{key}", values[key])
