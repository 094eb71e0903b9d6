"""Pack folders into one xz tar at its largest window, the counterpart of scripts/unpack_carry.py: a device call's
archive (scripts/h200_session.sh) and a Path-256 state carried to the next session (scripts/carry_state.sh).

    python3 scripts/pack_xz.py OUT [--leave-out NAME]... FOLDER=ARCNAME...

Each FOLDER goes in as ARCNAME (a missing one is skipped); lock files (*.lock) and the members at or under each
--leave-out NAME (an archive name, e.g. campaigns/path-x-bsf-local-frozen) stay out. xz preset 9 has a 64 MB window,
wide enough to find a Path-256 state's 65,536-position table twice (best.pt and last.pt share it): 40 MB pack to
~7.5 MB where gzip makes 31. Python's tarfile, not `tar -J`: a lent machine is not known to have the xz program.
OUT is written aside and renamed, so a cut run leaves no half archive.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path


def main(argv: list[str]) -> int:
    out, rest = Path(argv[0]) if argv else None, argv[1:]
    leave_out, folders = [], []
    while rest:
        word = rest.pop(0)
        if word == "--leave-out" and rest:
            leave_out.append(rest.pop(0))
        elif "=" in word:
            folders.append(word.split("=", 1))
        else:
            out = None
            break
    if out is None or not folders:
        print("usage: python3 scripts/pack_xz.py OUT [--leave-out NAME]... FOLDER=ARCNAME...", file=sys.stderr)
        return 2

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = member.name
        left = name.endswith(".lock") or any(name == n or name.startswith(n + "/") for n in leave_out)
        return None if left else member

    part = out.with_name(out.name + ".part")
    with tarfile.open(part, "w:xz", preset=9) as tar:
        for folder, arcname in folders:
            if Path(folder).exists():
                tar.add(folder, arcname=arcname, filter=keep)
    part.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
