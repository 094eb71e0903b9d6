"""`lra leaderboard`: regenerate the leaderboard tables (and plots) from stored result records."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    """Add `leaderboard` to the `lra` sub-parsers `sub`."""
    p = sub.add_parser("leaderboard", help="regenerate the leaderboard tables (and plots) from stored results")
    p.add_argument(
        "--results",
        action="append",
        default=None,
        metavar="DIR",
        help="results store to read, repeatable: exactly these (default: the curated leaderboard/results and your "
        "store, $LRA_RESULTS or ~/.local/share/lra/results)",
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="where to write (default: the first store's parent folder)"
    )
    p.add_argument("--format", choices=("md", "html", "both"), default="both", help="LEADERBOARD.md, the HTML page")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 2) when a store holds an unreadable record (default: skip it with a warning naming it)",
    )
    p.add_argument("--open", action="store_true", help="print the page's path and open it in a browser if one exists")
    p.set_defaults(func=cmd_leaderboard)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from lra.core.errors import WriteError, write_reason
    from lra.core.progress import console
    from lra.results.leaderboard import write_leaderboard

    formats = ("md", "html") if args.format == "both" else (args.format,)
    try:
        written = write_leaderboard(args.results, args.out, formats, plots=not args.no_plots, strict=args.strict)
    except OSError as e:
        reason = write_reason(e)
        if reason is None:
            raise
        where = e.filename or args.out
        raise WriteError(f"lra leaderboard: cannot write {where}: {reason}; choose a writable --out") from None
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    if args.open:
        from lra.results.page import open_page

        page = written[formats.index("html") if "html" in formats else 0]
        opened = "html" in formats and open_page(page)
        console.print(f"{'opened' if opened else 'page'}: {page.resolve()}", highlight=False)
    return 0
