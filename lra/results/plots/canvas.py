"""What every figure shares: matplotlib on the Agg backend when the `plots` extra is installed, deterministic PNG
writes, fixed colours per label, axis labelling, and the newest record per key (a study run twice plots once)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from lra.core.atomic import atomic_path
from lra.results.aggregate import group_by


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None without the `plots` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(fig, path: Path) -> Path:
    """Write `fig` as PNG atomically, without the matplotlib version in the file (same records, same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def grid(ax, xlabel: str, ylabel: str, legend: bool = False) -> None:
    """Label an axis pair and draw a light grid (and the legend)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7)


def colours(plt, labels: Iterable[Any]) -> dict[Any, Any]:
    """A fixed colour per label (sorted): tab10 for up to ten, tab20 beyond."""
    labels = sorted(labels)
    cmap = plt.cm.tab10 if len(labels) <= 10 else plt.cm.tab20
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def slug(text: Any) -> str:
    """A file-name-safe form of a device or task name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


def series(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Runs by (series label, task): the backend, with the store when several stores hold runs."""
    stores = {r["_store"] for r in runs}
    label = (lambda r: r["backend"]) if len(stores) == 1 else (lambda r: f"{r['backend']} ({r['_store']})")
    return group_by(runs, lambda r: (label(r), r.get("task")))


def newest_by(records: list[dict[str, Any]], kind: str, key: Callable[[dict[str, Any]], Hashable]) -> dict:
    """The newest record of `kind` (by date, then file) per `key(record)`, keys in order of their first record."""
    newest: dict[Hashable, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.get("date", ""), r.get("_file", ""))):
        if r.get("kind") == kind:
            newest[key(r)] = r
    return newest


def by_str_key(items: dict) -> list[tuple[Any, Any]]:
    """A dict's items sorted by their tuple key as strings (keys may hold None beside strings)."""
    return sorted(items.items(), key=lambda kv: tuple(map(str, kv[0])))
