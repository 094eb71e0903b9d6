"""The `lra` command line: builds the parser from each subcommand's module and runs the chosen one.

Every subcommand lives in its own module, whose parser-adding function (listed in SUBCOMMANDS) sets `func`.
Errors a user causes and can fix (`lra.core.errors.LraError`) print one red line and exit 2; anything else is a bug
and keeps its traceback (LRA_DEBUG=1 shows the traceback of user errors too). Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from rich.markup import escape

from lra.cli import bench, campaign, data, leaderboard, listing, numerics, results, run, sweep
from lra.cli.args import check_device
from lra.core.errors import LraError
from lra.core.progress import console

EPILOG = """examples:
  lra run listops --attn naive --preset tiny      a CPU-sized run in a couple of minutes
  lra run listops --attn flash                    the LRA config on a GPU
  lra list                                        tasks, backends, presets, what runs here
  lra data info                                   what data is prepared, where, and how to prepare the rest
  lra bench attention --attn flash,sdpa_flash     kernel time, TFLOP/s and memory
  lra leaderboard                                 tables (and plots) from your results store
"""

# Each adds its subcommand to the `lra` sub-parsers; a new subcommand is one module and one entry here.
SUBCOMMANDS = (
    run.add_parser,
    listing.add_parser,
    data.add_parser,
    bench.add_parser,
    numerics.add_numerics_parser,
    leaderboard.add_parser,
    sweep.add_parser,
    results.add_parser,
    campaign.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """The `lra` parser with every subcommand of SUBCOMMANDS."""
    parser = argparse.ArgumentParser(
        prog="lra",
        description="Long Range Arena benchmark suite: exact and approximate attention on long sequences.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    for add_parser in SUBCOMMANDS:
        add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `lra ARGV` (default: the process's arguments); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # multi-process commands start `python -m lra` again with the same arguments
    try:
        check_device(getattr(args, "device", None))
        return args.func(args)
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]{getattr(args, 'on_interrupt', '')}", highlight=False)
        return 130
    except LraError as e:
        if os.environ.get("LRA_DEBUG"):
            raise
        console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2


def run_process() -> NoReturn:
    """`python -m lra`: exit with main()'s status; a launcher's rank leaves through `exit_worker`, skipping the
    interpreter teardown that can abort it (torchrun and `lra run --nproc` start ranks this way)."""
    code = main()
    from lra.train import distributed  # not at import: it loads torch, which `lra --help` never needs

    if distributed.is_worker_process():
        distributed.exit_worker(code)
    raise SystemExit(code)
