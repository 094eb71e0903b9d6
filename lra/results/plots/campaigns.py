"""The campaigns figure: every stage's validation accuracy against the device-hours its campaign had spent, beside
the FlashAttention paper's long-sequence results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.results.aggregate import group_by
from lra.results.plots.canvas import colours, grid, pyplot, save
from lra.results.table import Figure
from lra.results.time_to_accuracy import CAMPAIGN_TARGETS, campaign_hours, campaign_key


def campaign_curves(stages: list[dict[str, Any]], plot_dir: Path) -> Figure | None:
    """Validation accuracy against the campaign's device-hours, a panel per campaign, one line per stage, so that
    every stage's curve sits where the campaign had spent its time (the paper's figures as dotted lines)."""
    by_campaign = group_by([r for r in stages if r.get("history")], campaign_key)
    if not by_campaign:
        return None
    plt = pyplot()
    keys = sorted(by_campaign)
    palette = colours(plt, {r.get("task") for recs in by_campaign.values() for r in recs})
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for rec in sorted(by_campaign[key], key=lambda r: r["campaign"].get("stage", 0)):
            hist = [h for h in rec["history"] if h.get("val_acc") is not None]
            hours = [campaign_hours(rec, h["time"]) for h in hist]
            ax.plot(hours, [100 * h["val_acc"] for h in hist], color=palette[rec.get("task")], label=rec.get("task"))
        for target in CAMPAIGN_TARGETS:
            ax.axhline(100 * target, color="grey", linestyle=":", linewidth=0.8)
        ax.set_title(f"{key[0]} ({key[1]})")
        grid(ax, "device-hours, all stages counted", "validation accuracy (%)", legend=True)
    fig.tight_layout()
    caption = (
        "Campaigns: validation accuracy of every stage against the campaign's device-hours (earlier stages' whole"
        " sessions plus this stage's training time); dotted: the FlashAttention paper's 56.0 / 61.4 / 63.1."
    )
    return Figure(save(fig, plot_dir / "campaigns.png"), caption, "time")
