"""Unpack archives a device call carried onto the lent machine, keeping what is already there.

    python3 scripts/unpack_carry.py DEST ARCHIVE...

scripts/h200_session.sh runs it at the start of every call on the target pairs the call carried into the data cache
(scripts/pack_pairs.sh writes them: xz, `.txz`; gzip `.tgz` archives from before are read the same way), and on a
Path-256 campaign's packed state (campaigns/NAME.txz, scripts/carry_state.sh) into its campaigns folder. A file
already in DEST stays as it is, whether the machine wrote it or an earlier call unpacked it, so a second call of a
warm machine costs nothing.
Python's tarfile, not `tar -J`: a lent machine is not known to have the xz program, and its Python reads xz itself.
"""

from __future__ import annotations

import lzma
import shutil
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

# Python 3.12 (and 3.11.4 on) refuses members that would land outside DEST; older ones have no filters
SAFE = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
DAMAGED = (OSError, EOFError, tarfile.TarError, lzma.LZMAError, zlib.error)


def unpack(archive: Path, dest: Path) -> int:
    """Move the files of `archive` (gzip or xz, told by its content) that `dest` lacks into it; return how many.
    The archive is read whole into a folder beside them first: a damaged one leaves nothing half-written."""
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=dest))
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(staging, **SAFE)
        moved = 0
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            target = dest / path.relative_to(staging)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                path.replace(target)
                moved += 1
        return moved
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python3 scripts/unpack_carry.py DEST ARCHIVE...", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    if dest.exists() and not dest.is_dir():
        print(
            f"unpack_carry: DEST {dest} is a file, not a folder: the folder comes first "
            "(python3 scripts/unpack_carry.py DEST ARCHIVE...); nothing unpacked",
            file=sys.stderr,
        )
        return 2
    dest.mkdir(parents=True, exist_ok=True)
    for archive in map(Path, argv[1:]):
        try:
            count = unpack(archive, dest)
        except DAMAGED as e:  # a damaged carry: what it held is then drawn (pairs) or trained (a state) afresh
            print(f"unpack_carry: {archive}: {e}; nothing unpacked from it", file=sys.stderr)
            continue
        print(f"unpack_carry: {archive}: {count} files into {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
