"""`lra data markers pathfinder|path-64|path-x|path-256`: what the two markers' places alone tell on a generated
Pathfinder task (tasks/_pathfinder/markers.py), printed and stored as a record for the leaderboard."""

from __future__ import annotations

import argparse
import math
import os

from lra.cli.args import add_results
from lra.core.errors import ConfigError
from lra.core.progress import console, out

TRAIN_IMAGES = 40_000  # training images the classifiers are fitted on by default (more changes the MLP by < 0.5)


def add_parser(dsub, common: argparse.ArgumentParser) -> None:
    """Add `markers` to the `lra data` sub-parsers `dsub` (`common`: --preset, --set, --data-dir)."""
    p = dsub.add_parser(
        "markers",
        parents=[common],
        help="accuracy of classifiers that see only where the two markers are (no path traced)",
        description="Fit three classifiers that see only the two marker centres of a generated Pathfinder task's "
        "training images (the label's rate per distance, per (|dy|, |dx|) cell, and a small MLP) and score them on "
        "its test images: what a model could reach without tracing a path. Reads the preset's data setting; uses "
        "the cache's target pairs where they are (lra data prepare --targets-only), so Path-X and Path-256 take "
        "minutes, not hours.",
    )
    p.add_argument("task", help="pathfinder, path-64, path-x or path-256")
    p.add_argument("--n-train", type=int, default=None, help=f"training images (default: {TRAIN_IMAGES:,} or fewer)")
    p.add_argument("--n-test", type=int, default=None, help="test images (default: the task's test split)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    add_results(p)
    p.set_defaults(func=cmd_markers)


def cmd_markers(args: argparse.Namespace) -> int:
    from lra.cli.data import task_of
    from lra.core.environment import environment
    from lra.core.records import markers_baseline_record
    from tasks._pathfinder import markers as M
    from tasks.pathfinder import PathfinderTask

    task = task_of(args.task, args)
    if not isinstance(task, PathfinderTask):
        raise ConfigError(f"lra data markers: {task.name} is not a generated Pathfinder task (pathfinder, path-64, "
                          "path-x or path-256): it has no markers")  # fmt: skip
    if task.source is not None:
        raise ConfigError(f"lra data markers: {task.name} reads a release ({task.source}), whose marker places are "
                          "not recorded; leave data.source out to measure the generator's images")  # fmt: skip
    n_train = min(TRAIN_IMAGES, task.counts["train"]) if args.n_train is None else args.n_train
    n_test = task.counts["test"] if args.n_test is None else args.n_test
    for flag, value, least in (("--n-train", n_train, 2), ("--n-test", n_test, 1), ("--workers", args.workers, 1)):
        if value is not None and value < least:
            raise ConfigError(f"lra data markers: {flag} must be at least {least}, got {value}")
    workers = args.workers or os.cpu_count() or 1
    console.print(f"{task.name}: the markers of {n_train:,} training and {n_test:,} test images ({workers} "
                  "workers)...", highlight=False)  # fmt: skip
    train = M.sample(task.store, "train", n_train, workers=workers)
    test = M.sample(task.store, "test", n_test, workers=workers)
    acc = M.accuracies(task.resolution, train, test)
    positive = float(test.labels.mean())
    metrics = {"majority_acc": max(positive, 1 - positive), **{f"{rule}_acc": acc[rule] for rule in M.RULES}}
    se = 100 * math.sqrt(0.25 / n_test)
    out.print(f"{task.name} ({task.resolution} px, {task.store.folder}): {n_train:,} training and {n_test:,} test "
              f"images; one standard error {se:.2f} points", highlight=False, soft_wrap=True)  # fmt: skip
    out.print(f"  majority class: {100 * metrics['majority_acc']:.1f}%", highlight=False)
    for rule, label in zip(M.RULES, ("distance only", "(|dy|, |dx|) only", "MLP on both centres"), strict=True):
        out.print(f"  markers only, {label}: {100 * acc[rule]:.1f}%", highlight=False)
    if not args.no_record:
        from lra.results.store import save_record

        data = {"resolution": task.resolution, "difficulty": task.difficulty, "seed": task.seed}
        data |= {"generator": task.generator, "num_train": n_train, "num_test": n_test}
        record = markers_baseline_record(
            task=task.name, preset=args.preset or "default", data=data, metrics=metrics, env=environment("cpu")
        )
        console.print(f"record: {save_record(record, args.results)}", highlight=False)
    return 0
