"""`lra results store RUN_DIR...`: write the record of a finished run whose record could not be stored when it ended
(a read-only or full results store); its summary.json is the record, kept in the run directory."""

from __future__ import annotations

import argparse

from lra.core.progress import console


def add_parser(sub) -> None:
    """Add `results` with its `store` sub-command to the `lra` sub-parsers `sub`."""
    p = sub.add_parser("results", help="the results store: store a finished run's record later")
    rsub = p.add_subparsers(dest="results_cmd", required=True, metavar="{store}")
    st = rsub.add_parser(
        "store",
        help="store the record of finished runs (their summary.json) that is not in the store yet",
        description="Store the record of each finished run directory (its summary.json) in the results store, "
        "unless the store holds it already. For a run whose record could not be written when it ended.",
    )
    st.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a finished run's directory")
    st.add_argument("--results", default=None, metavar="DIR", help="results store (default: $LRA_RESULTS or "
                    "~/.local/share/lra/results)")  # fmt: skip
    st.set_defaults(func=cmd_store)


def cmd_store(args: argparse.Namespace) -> int:
    from lra.results.store import store_run

    for run_dir in args.run_dirs:
        path, written = store_run(run_dir, args.results)
        said = f"record: {path}" if written else f"{run_dir}: already in the store as {path}"
        console.print(said, highlight=False, soft_wrap=True)
    return 0
