"""The layers import one way: every module's imports (at any depth, lazy ones too) stay within what its package
may use. `lra.core` is the bottom; `tasks/` and `attention_impls/` use only it; the CLI sits on top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ("lra.core", "tasks", "attention_impls", "lra.positions", "lra.model", "lra.train", "lra.results")
ALLOWED: dict[str, set[str]] = {
    "lra.core": {"lra.core"},
    "tasks": {"lra.core", "tasks"},
    "attention_impls": {"lra.core", "attention_impls"},
    "lra.positions": {"lra.core", "lra.positions"},
    "lra.model": {"lra.core", "attention_impls", "lra.positions", "lra.model"},
    "lra.train": {"lra.core", "attention_impls", "tasks", "lra.positions", "lra.model", "lra.train", "configs"},
    "lra.results": {*HARNESS, "configs"},
    "lra.bench": {*HARNESS, "lra.bench", "configs"},
    "lra.numerics": {*HARNESS, "lra.numerics", "configs"},
    "lra.sweep": {*HARNESS, "lra.sweep", "configs"},
    "lra.campaign": {*HARNESS, "lra.campaign", "configs"},
    "lra.cli": {*HARNESS, "lra.bench", "lra.numerics", "lra.sweep", "lra.campaign", "lra.cli", "lra", "configs"},
    "lra": {"lra.cli", "lra"},  # lra/__init__.py and lra/__main__.py
}
PROJECT = ("lra", "tasks", "attention_impls", "configs")


def package_of(module: str) -> str | None:
    """The ALLOWED key a dotted module name belongs to (longest prefix), None for outside modules."""
    if module.split(".")[0] not in PROJECT:
        return None
    best = None
    for key in [*ALLOWED, "configs"]:
        if (module == key or module.startswith(key + ".")) and (best is None or len(key) > len(best)):
            best = key
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
    return out


def project_modules() -> list[Path]:
    files = []
    for top in ("lra", "tasks", "attention_impls"):
        files += sorted((ROOT / top).rglob("*.py"))
    return files


def test_every_package_is_known():
    for path in project_modules():
        assert package_of(module_name(path)) is not None, f"{path} belongs to no layer in ALLOWED"


def test_imports_point_down_the_layers():
    bad = []
    for path in project_modules():
        own = package_of(module_name(path))
        for line, mod in imports_of(path):
            target = package_of(mod)
            if target is not None and target not in ALLOWED[own]:
                bad.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {mod} ({target})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_check_catches_an_upward_import(tmp_path):
    """The checker itself: an attention backend importing the trainer is reported."""
    assert package_of("lra.train.run") == "lra.train"
    assert "lra.train" not in ALLOWED[package_of("attention_impls.naive")]
    assert package_of("numpy") is None
