"""Argument helpers shared by the `lra` subcommands: list parsing, `--device` checking, the common options.

A leaf of the CLI: it imports nothing of the project but `lra.core`, so every subcommand module can use it.
"""

from __future__ import annotations

import argparse

from lra.core.errors import ConfigError

DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda when available)"


def csv_list(text: str) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']."""
    return [x.strip() for x in text.split(",") if x.strip()]


def int_list(text: str) -> list[int]:
    """'512,1k,4K' -> [512, 1024, 4096]; anything else is a ConfigError naming the bad item."""
    values = []
    for item in csv_list(text):
        digits = item.lower()
        mult = 1024 if digits.endswith("k") else 1
        try:
            values.append(int(digits.removesuffix("k")) * mult)
        except ValueError:
            raise ConfigError(f"{item!r} is not a length; use integers such as 512,1024 or 1k,4k") from None
    return values


def check_device(spec: str | None) -> str | None:
    """Check a `--device` value before anything starts: cpu, cuda or cuda:N (N an existing GPU); None or 'auto' pass.

    Returns `spec` unchanged (a bare 'cuda' stays bare: each process of a multi-GPU run takes its own local GPU).
    """
    if spec is None or spec == "auto":
        return spec
    import torch

    try:
        dev = torch.device(spec)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {spec!r} is not a device; use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index not in (None, 0)):
        raise ConfigError(f"--device {spec!r} is not supported; use cpu, cuda or cuda:N")
    if dev.type == "cpu":
        return spec
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ConfigError(
            f"--device {spec}: CUDA is not available on this machine (torch {torch.__version__}, {build}); "
            "use --device cpu"
        )
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ConfigError(
            f"--device {spec}: there is no such GPU; this machine has {count} (cuda:0 to cuda:{count - 1})"
        )
    return spec


def add_device(parser: argparse.ArgumentParser, default: str | None = None, help: str = DEVICE_HELP) -> None:
    """`--device`; `lra.cli.main` checks it with `check_device` before the command starts."""
    parser.add_argument("--device", default=default, help=help)


def add_overrides(parser: argparse.ArgumentParser, example: str = "train.lr=3e-4") -> None:
    """`--set KEY=VALUE` (repeatable) into `args.overrides`."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a setting, e.g. --set {example} (repeatable; values read as YAML)",
    )


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    """`--data-dir`: the task data cache."""
    parser.add_argument(
        "--data-dir", default=None, metavar="DIR", help="task data cache (default: $LRA_DATA or ~/.cache/lra/data)"
    )


def add_results(parser: argparse.ArgumentParser) -> None:
    """`--results` and `--no-record`: where records go (the user's store unless told otherwise)."""
    parser.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="results store (default: $LRA_RESULTS or ~/.local/share/lra/results; "
        "--results leaderboard/results adds to the curated records)",
    )
    parser.add_argument("--no-record", action="store_true", help="store no result record")


def add_time_limit(parser: argparse.ArgumentParser) -> None:
    """`--time-limit DURATION`: stop cleanly before this much wall clock has passed (lra.train.budget)."""
    parser.add_argument(
        "--time-limit",
        default=None,
        metavar="DURATION",
        help="train until this much wall clock (from the command's start) is nearly spent, then save the full state "
        "and exit 0; --resume continues (e.g. 25m, 90s, 1h30m)",
    )


def check_nproc(nproc: int) -> None:
    """`--nproc N`: at least one process."""
    if nproc < 1:
        raise ConfigError(f"--nproc must be at least 1 (processes to train with), got {nproc}")
