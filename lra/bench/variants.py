"""Backend variants for `lra bench attention`: a backend with options beyond the shape, timed beside its peers.

`--set flash.block_m=64` gives every `flash` of `--attn` that option; `--attn flash,flash@block_m=32` times flash twice,
the second with block_m 32 (`@option=value` after a name, repeatable, wins over `--set`). Values are read as
`lra run --set` reads them (YAML: 64, true, null, [1, 2]) and checked as it checks `--set attention.flash.block_m=64`
(lra.train.config.check_attention: a registered backend, an option it takes, of its declared type). A variant is
labelled as tables show it: `flash[block_m=32]` (lra.core.records.backend_label).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lra.core.errors import ConfigError
from lra.core.records import backend_label
from lra.train.config import check_attention, parse_override

SET_USAGE = "give BACKEND.OPTION=VALUE, e.g. --set flash.block_m=64"
ATTN_USAGE = "give NAME or NAME@OPTION=VALUE, e.g. --attn flash,flash@block_m=64"


@dataclass(frozen=True)
class Variant:
    """A backend and the options it is built with (beyond the model shape)."""

    backend: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The backend as tables and records name it: 'flash', 'flash[block_m=64]'."""
        return backend_label({"backend": self.backend, "options": self.options})


def set_options(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """`--set BACKEND.OPTION=VALUE` items as {backend: {option: value}}, checked against the registry."""
    options: dict[str, dict[str, Any]] = {}
    for item in items:
        key = item.partition("=")[0].strip()
        if "=" not in item or key.count(".") != 1 or not all(key.split(".")):
            raise ConfigError(f"--set {item!r}: {SET_USAGE}")
        (backend, option), value = parse_override(item)
        options.setdefault(backend, {})[option] = value
    check_attention(options, where="--set ")
    return options


def attn_variant(item: str) -> Variant:
    """One `--attn` item, `NAME` or `NAME@OPTION=VALUE@...`, checked against the registry."""
    name, *pairs = (part.strip() for part in item.split("@"))
    check_attention({name: {}}, where="--attn ")
    options: dict[str, Any] = {}
    for pair in pairs:
        key = pair.partition("=")[0].strip()
        if "=" not in pair or not key or "." in key:
            raise ConfigError(f"--attn {item!r}: {ATTN_USAGE}")
        options[key] = parse_override(f"{name}.{pair}")[1]
    check_attention({name: options}, where=f"--attn {item}: ")
    return Variant(name, options)


def parse_variants(attn: Sequence[str], overrides: Sequence[str] = ()) -> list[Variant]:
    """The variants of `--attn` items with the `--set` `overrides` applied to their backends (module doc); a
    `--set` for a backend that is not in `--attn`, or one variant named twice, is a ConfigError."""
    shared = set_options(overrides)
    own = [attn_variant(item) for item in attn]
    names = list(dict.fromkeys(v.backend for v in own))
    for backend in shared:
        if backend not in names:
            raise ConfigError(
                f"--set {backend}.{next(iter(shared[backend]))}: backend {backend!r} is not in --attn "
                f"({', '.join(names)}); add it to --attn or drop the --set"
            )
    variants = [Variant(v.backend, {**shared.get(v.backend, {}), **v.options}) for v in own]
    check_unique(variants)
    return variants


def check_unique(variants: Sequence[Variant]) -> None:
    """Refuse a variant listed twice: its rows would be two of one backend at one shape, each the other's peer."""
    labels = [v.label for v in variants]
    twice = next((v for v in variants if labels.count(v.label) > 1), None)
    if twice is not None:
        raise ConfigError(
            f"--attn names {twice.label} twice; drop one, or tell them apart by options: {twice.backend}@OPTION=VALUE"
        )
