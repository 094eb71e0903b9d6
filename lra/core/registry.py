"""One registry pattern for attention backends, tasks and layout patterns: register by name, build by name with
validated options, list by name.

A registry with a `package` discovers its entries by importing every module of that package the first time it is
asked for a name, so adding a backend or a task is one new file with a decorated class: nothing else changes.

An entry's options are the keyword parameters of its constructor (for a class, of `__init__` along its bases) minus
the ones the caller supplies itself (`fixed`: the model shape for a backend, the data folder for a task); their
defaults are the parameter defaults. `build` refuses an unknown option with the list of valid ones.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from lra.core.errors import ConfigError, UnknownNameError

T = TypeVar("T")


def signature_options(obj: Any, fixed: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword options `obj` (a class or a function) takes beyond `fixed`, with their defaults (None if required).

    For a class, the parameters of `__init__` of every class in its MRO that defines one, base classes first, so a
    subclass passing `**options` up still lists its bases' options.
    """
    skip = {"self", *fixed}
    funcs = (
        [k.__dict__["__init__"] for k in reversed(obj.__mro__) if "__init__" in k.__dict__]
        if isinstance(obj, type)
        else [obj]
    )
    out: dict[str, Any] = {}
    for fn in funcs:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # builtins such as object.__init__
            continue
        for p in params:
            if p.name in skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            out[p.name] = None if p.default is inspect.Parameter.empty else p.default
    return out


def did_you_mean(name: str, valid: list[str]) -> str:
    """' (did you mean 'X'?)' for the valid name closest to a misspelt `name` (difflib), or '' when none is close."""
    match = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


class Registry(Generic[T]):
    """Maps names to classes (or functions). `kind` names what is registered ("attention backend") in messages;
    `fixed` names the constructor arguments that are not options; `option_noun` what an option is called in messages
    ("data setting" for tasks)."""

    def __init__(
        self, kind: str, package: str | None = None, fixed: tuple[str, ...] = (), option_noun: str = "option"
    ) -> None:
        self.kind = kind
        self.option_noun = option_noun
        self.package = package
        self.fixed = tuple(fixed)
        self._entries: dict[str, T] = {}
        self._discovered = package is None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@BACKENDS.register("naive")`. A duplicate name is an error."""

        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered (by {self._entries[name]!r})")
            self._entries[name] = obj
            if isinstance(obj, type) and not obj.__dict__.get("name"):
                obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorate

    def unregister(self, name: str) -> None:
        """Remove an entry (tests register throwaway entries)."""
        self._entries.pop(name, None)

    def discover(self) -> None:
        """Import every public module of the package once so that their decorators run.

        A module that fails to import raises here, and the registry stays undiscovered, so the next lookup tries
        again and fails the same way instead of reporting an empty registry.
        """
        if self._discovered:
            return
        pkg = importlib.import_module(self.package)  # type: ignore[arg-type]
        for info in pkgutil.iter_modules(pkg.__path__, prefix=pkg.__name__ + "."):
            if not info.name.rsplit(".", 1)[-1].startswith("_"):
                importlib.import_module(info.name)
        self._discovered = True

    def get(self, name: str) -> T:
        """The entry called `name`; an unknown name fails with the list of known ones."""
        self.discover()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            hint = did_you_mean(str(name), sorted(self._entries))
            raise UnknownNameError(f"unknown {self.kind} {name!r}{hint}; known: {known}") from None

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        self.discover()
        for name in sorted(self._entries):
            yield name, self._entries[name]

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._entries

    def options(self, name: str) -> dict[str, Any]:
        """The options entry `name` takes, with their defaults."""
        return signature_options(self.get(name), self.fixed)

    def check_options(self, name: str, options: dict[str, Any]) -> None:
        """Refuse options entry `name` does not take, naming the valid ones."""
        valid = self.options(name)
        unknown = sorted(set(options) - set(valid))
        if unknown:
            hint = did_you_mean(unknown[0], sorted(valid)) if len(unknown) == 1 else ""
            raise ConfigError(
                f"{self.kind} {name!r} has no {self.option_noun}(s) {', '.join(unknown)}{hint}; "
                f"valid {self.option_noun}s: {', '.join(sorted(valid)) or '(none)'}"
            )

    def build(self, name: str, options: dict[str, Any] | None = None, **fixed: Any) -> Any:
        """Construct entry `name` with the caller's `fixed` arguments and validated `options`.

        A ValueError raised by the constructor (its own check of an option's value) becomes a ConfigError naming
        the entry, so the command line shows it as one line.
        """
        options = dict(options or {})
        self.check_options(name, options)
        try:
            return self.get(name)(**fixed, **options)
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(f"{self.kind} {name!r}: {e}") from e
