"""Shared plot helpers: matplotlib on the Agg backend when the `plots` extra is installed, deterministic PNG writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.core.atomic import atomic_path


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


def colours(plt, labels) -> dict[Any, Any]:
    """A fixed colour per label (sorted): tab10 for up to ten, tab20 beyond."""
    labels = sorted(labels)
    cmap = plt.cm.tab10 if len(labels) <= 10 else plt.cm.tab20
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def slug(text: Any) -> str:
    """A file-name-safe form of a device or task name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))
