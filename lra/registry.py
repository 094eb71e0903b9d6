"""One registry pattern for attention backends and tasks: register by name, build by name, list by name.

A registry discovers its entries by importing every module of its package the first time it is asked for a name,
so adding a backend or a task is one new file with a decorated class: nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the message as written
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to classes. `kind` names what is registered ("attention backend", "task") in messages."""

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, T] = {}
        self._discovered = package is None

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator: `@BACKENDS.register("naive")`. A duplicate name is an error."""

        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered (by {self._entries[name]!r})")
            self._entries[name] = obj
            if isinstance(obj, type) and not getattr(obj, "__dict__", {}).get("name"):
                obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorate

    def unregister(self, name: str) -> None:
        """Remove an entry (tests register throwaway entries)."""
        self._entries.pop(name, None)

    def discover(self) -> None:
        """Import every module of the package once so that their decorators run."""
        if self._discovered:
            return
        self._discovered = True
        pkg = importlib.import_module(self.package)  # type: ignore[arg-type]
        for info in pkgutil.iter_modules(pkg.__path__, prefix=pkg.__name__ + "."):
            if info.name.rsplit(".", 1)[-1].startswith("_"):
                continue
            importlib.import_module(info.name)

    def get(self, name: str) -> T:
        """The entry called `name`; an unknown name fails with the list of known ones."""
        self.discover()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

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
