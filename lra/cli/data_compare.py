"""`lra data compare pathfinder|path-64|path-x|path-256`: our generator's image statistics against the original's."""

from __future__ import annotations

import argparse
import json
import math
import os

from lra.core.errors import ConfigError
from lra.core.progress import console, out

COLUMNS = ("statistic", "reference", "ours", "difference", "within")


def add_parser(dsub) -> None:
    """Add `compare` to the `lra data` sub-parsers `dsub`."""
    p = dsub.add_parser(
        "compare",
        help="statistics of our Pathfinder images against the original generator's (issue 32's table)",
        description="Draw N images with this project's Pathfinder generator and compare their statistics with a "
        "sample drawn once by the original generator (tasks/_pathfinder/reference_stats.json).",
    )
    p.add_argument("task", help="pathfinder, path-64, path-x or path-256")
    p.add_argument("--n", type=int, default=None, help="images to draw (default: as many as the reference has)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (images of its test split)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    p.add_argument(
        "--images",
        default=None,
        metavar="DIR",
        help="compare with the PNGs under DIR (e.g. LRA's release) instead: image-only statistics, and whether a "
        "logistic regression on pixels tells the two apart",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from tasks._pathfinder import compare as C

    res = C.resolution_of(args.task)
    for name, value in (("--n", args.n), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise ConfigError(f"lra data compare: {name} must be at least 1, got {value}")
    workers = args.workers or os.cpu_count() or 1
    if args.images is not None:
        theirs = C.read_images(args.images, res, args.n or 1000)
        n = args.n or len(theirs)
        source = f"{len(theirs):,} PNGs under {args.images} (image-only statistics)"
        console.print(f"drawing {n:,} {res} px images ({workers} workers)...", highlight=False)
        rows = C.image_rows(theirs, res, n, workers=min(workers, n), seed=args.seed)
    else:
        ref = C.load_reference()
        reference = C.reference_estimates(ref, res)
        n = args.n or ref["resolutions"][str(res)]["n"]
        source = ref["resolutions"][str(res)]["drawn"]
        console.print(f"drawing {n:,} {res} px images with their trace ({workers} workers)...", highlight=False)
        rows = C.compare(reference, C.measure_ours(res, n, workers=min(workers, n), seed=args.seed))
    if args.json:
        body = {"task": args.task, "resolution": res, "n": n, "reference": source, "rows": [r.as_dict() for r in rows]}
        out.print_json(json.dumps(body))
    else:
        out.print(compare_table(rows, title=f"{args.task}: ours (n={n:,}) against the reference"))
        within = sum(r.within for r in rows)
        out.print(
            f"{within} of {len(rows)} statistics within {C.RELATIVE_TOLERANCE:.0%} (relative) or "
            f"{C.SIGMAS:g} standard errors of the reference's; reference: {source}",
            highlight=False,
        )
    return 0


def fmt(value: float, se: float, percent: bool) -> str:
    """'83.0% ± 1.3' for a proportion, '1.42 ± 0.044' for a mean: 3 significant digits, the error 2."""
    if not math.isfinite(value):
        return "-"
    scale, unit = (100, "%") if percent else (1, "")
    v, e = scale * value, scale * se
    return f"{v:.{_decimals(v, 3)}f}{unit} ± {e:.{_decimals(e, 2)}f}"


def _decimals(x: float, digits: int) -> int:
    """Decimals that show `digits` significant digits of `x` (0 to 4)."""
    if x == 0 or not math.isfinite(x):
        return 1
    return max(0, min(4, digits - 1 - math.floor(math.log10(abs(x)))))


def compare_table(rows, title: str):
    """A rich table of comparison rows (statistic, reference ± se, ours ± se, relative difference, within)."""
    from rich.table import Table

    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, overflow="fold", justify="left" if col == "statistic" else "right")
    for r in rows:
        diff = "-" if not math.isfinite(r.relative) else f"{100 * r.relative:+.1f}%"
        table.add_row(
            r.label,
            fmt(r.reference.value, r.reference.se, r.percent),
            fmt(r.ours.value, r.ours.se, r.percent),
            diff,
            "[green]yes[/]" if r.within else "[red]no[/]",
        )
    return table
