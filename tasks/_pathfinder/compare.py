"""Our Pathfinder images against the original generator's: the statistics of `stats.py` for a sample drawn by our
generator (its `trace=True` API), beside those of a reference sample that the original drew once
(`reference_stats.json`, made as docs/pathfinder.md says). `lra data compare pathfinder` prints the result."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lra.core.errors import ConfigError, DataCorruptError, DataMissingError
from lra.core.pools import run_jobs
from tasks._pathfinder import draw as generator
from tasks._pathfinder import stats
from tasks._pathfinder.release import read_grey

REFERENCE_PATH = Path(__file__).with_name("reference_stats.json")
TASK_RESOLUTION = {"pathfinder": 32, "path-64": 64, "path-x": 128, "path-256": 256}
RELATIVE_TOLERANCE = 0.10  # "within 10% (relative) of the original's"
SIGMAS = 2.0  # "or within its sampling error": the difference is within 2 combined standard errors
SPLIT = "test"  # images drawn for a comparison: the test split of `seed` (any split would do)
REFERENCE_FIELDS = ("value", "se", "sd", "n")


@dataclass(frozen=True)
class Row:
    """One statistic of a comparison."""

    key: str
    label: str
    reference: stats.Estimate
    ours: stats.Estimate
    percent: bool = False  # a proportion or share: shown in %

    @property
    def relative(self) -> float:
        """(ours - reference) / |reference|; inf when the reference is 0 and ours is not."""
        d = self.ours.value - self.reference.value
        if self.reference.value == 0:
            return 0.0 if d == 0 else math.copysign(math.inf, d)
        return d / abs(self.reference.value)

    @property
    def within(self) -> bool:
        """Within RELATIVE_TOLERANCE of the reference, or within SIGMAS combined standard errors of it."""
        d = abs(self.ours.value - self.reference.value)
        return d <= RELATIVE_TOLERANCE * abs(self.reference.value) or d <= SIGMAS * math.hypot(
            self.reference.se, self.ours.se
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "statistic": self.key,
            "label": self.label,
            "reference": self.reference.as_dict(),
            "ours": self.ours.as_dict(),
            "relative": self.relative,
            "within": self.within,
        }


def resolution_of(task: str) -> int:
    """The image side of a Pathfinder task name, or a ConfigError naming the valid ones."""
    if task not in TASK_RESOLUTION:
        raise ConfigError(f"lra data compare: no Pathfinder task {task!r}; choose one of {', '.join(TASK_RESOLUTION)}")
    return TASK_RESOLUTION[task]


def load_reference(path: Path = REFERENCE_PATH) -> dict[str, Any]:
    """The reference statistics file, checked: per resolution, every statistic has value, se, sd and n."""
    try:
        ref = json.loads(path.read_text(encoding="utf-8"))
        for res, entry in ref["resolutions"].items():
            int(res)
            for key, est in entry["stats"].items():
                if key not in stats.BY_KEY or any(f not in est for f in REFERENCE_FIELDS):
                    raise KeyError(key)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise DataCorruptError(f"{path}: not a Pathfinder reference statistics file ({err!r}); restore it") from err
    return ref


def reference_estimates(ref: dict[str, Any], resolution: int) -> dict[str, stats.Estimate]:
    """The reference's statistics at `resolution`, or a ConfigError naming the resolutions it has."""
    entry = ref["resolutions"].get(str(resolution))
    if entry is None:
        have = ", ".join(f"{r} px" for r in sorted(ref["resolutions"], key=int))
        raise ConfigError(f"lra data compare: the reference has no {resolution} px sample (it has {have})")
    return {k: stats.Estimate(*(e[f] for f in REFERENCE_FIELDS)) for k, e in entry["stats"].items()}


def read_images(folder: str | Path, resolution: int, limit: int) -> list:
    """Up to `limit` PNGs of side `resolution` under `folder` (recursively, in path order), as uint8 arrays: images
    of another source (LRA's release, the original generator's output) to compare with ours from their pixels."""
    root = Path(folder)
    if not root.is_dir():
        raise DataMissingError(f"lra data compare: --images {folder}: no such folder; give a folder of PNG images")
    images = []
    for path in sorted(root.rglob("*.png")):
        im = read_grey(path)
        if im.shape == (resolution, resolution):
            images.append(im)
            if len(images) == limit:
                break
    if not images:
        raise DataMissingError(f"lra data compare: no {resolution}x{resolution} PNG images under {folder}")
    return images


def image_rows(theirs: list, resolution: int, n: int, workers: int = 1, seed: int = 0) -> list[Row]:
    """Our images' image-only statistics against those of `theirs`, and a row saying how well a logistic
    regression on pixels tells the two apart (held-out accuracy; 50% = indistinguishable)."""
    ours = [im for part in _in_chunks(generator.draw_images, (resolution, 14, SPLIT), n, workers, seed) for im in part]
    rows = compare(stats.measure(theirs), stats.measure(ours))
    if min(len(theirs), len(ours)) >= 4:
        chance = stats.Estimate(0.5, 0.0, 0.0, 0)
        acc = stats.distinguishability(theirs, ours)
        rows.append(Row("distinguish", "pixels tell the two apart", chance, acc, percent=True))
    return rows


def _values(resolution: int, difficulty: int, start: int, stop: int, seed: int) -> dict[str, list[float]]:
    """Worker: statistics' values of images start..stop-1 drawn with their trace (returned instead of the images,
    which are bigger)."""
    samples = [generator.draw(resolution, difficulty, SPLIT, i, seed, trace=True) for i in range(start, stop)]
    return stats.values(samples)


def _in_chunks(fn, head: tuple, n: int, workers: int, seed: int) -> list:
    """fn(*head, start, stop, seed) over about 4 chunks per worker of 0..n-1, in `workers` processes; results in
    order."""
    chunks = max(1, min(n, workers * 4))
    jobs = [(*head, n * c // chunks, n * (c + 1) // chunks, seed) for c in range(chunks)]
    parts: list = [None] * chunks
    run_jobs(fn, jobs, workers, parts.__setitem__, ordered=True)
    return parts


def measure_ours(resolution: int, n: int, workers: int = 1, seed: int = 0, difficulty: int = 14):
    """Our generator's statistics over images 0..n-1 of the comparison split, drawn in `workers` processes."""
    merged: dict[str, list[float]] = {}
    for part in _in_chunks(_values, (resolution, difficulty), n, workers, seed):
        for key, vals in part.items():
            merged.setdefault(key, []).extend(vals)
    return stats.summarise(merged)


def compare(reference: dict[str, stats.Estimate], ours: dict[str, stats.Estimate]) -> list[Row]:
    """Rows for the statistics both sides have, in the order of stats.STATS."""
    return [
        Row(s.key, s.label, reference[s.key], ours[s.key], s.proportion or s.key.startswith("pixels_"))
        for s in stats.STATS
        if s.key in reference and s.key in ours
    ]
