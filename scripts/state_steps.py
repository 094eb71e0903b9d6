"""How far a campaign state has trained: the steps done over all its stages, from its ledger (campaign.json).

    python3 scripts/state_steps.py [--done] STATE...

Each STATE is a state folder (campaigns/NAME) or one packed by scripts/take_back.sh (campaigns/NAME.txz, the folder
under its name); one line each, -1 where there is no ledger to read (missing, damaged, cut short). With --done, 1
where the campaign's target stage is done and 0 where it is not (h200_session.sh starts again a chain of this session
that stopped at its time limit with session time left, and never one that has ended). A state never goes
back unless it was started afresh, so the larger count is the later state: take_back.sh refuses to commit an archive's
state behind the committed one, and scripts/h200_session.sh resumes from the committed state where it is ahead of
what the machine holds (a machine that came with an earlier session's files).
Python's tarfile, not `tar -J`: a lent machine is not known to have the xz program.
"""

from __future__ import annotations

import json
import lzma
import sys
import tarfile
import zlib
from pathlib import Path

DAMAGED = (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, tarfile.TarError, lzma.LZMAError,
           zlib.error)  # fmt: skip


def ledger(state: Path) -> dict:
    """The state's campaign.json, read from the folder or from the packed archive's NAME/campaign.json."""
    if state.is_dir():
        return json.loads((state / "campaign.json").read_text())
    with tarfile.open(state, "r:*") as tar:  # take_back.sh packs the ledger before the checkpoints: read it first
        for member in tar:
            if member.isfile() and member.name.count("/") == 1 and member.name.endswith("/campaign.json"):
                return json.load(tar.extractfile(member))
    raise KeyError(f"no NAME/campaign.json in {state}")


def steps(state: Path) -> int:
    """Steps done over all stages of `state`; -1 where its ledger cannot be read."""
    try:
        return sum(stage.get("steps", 0) or 0 for stage in ledger(state)["stages"].values())
    except DAMAGED:
        return -1


def done(state: Path) -> int:
    """1 where the campaign's last stage (its target) is done, 0 where it is not, -1 where the ledger cannot be read."""
    try:
        ledger_ = ledger(state)
        return int(ledger_["stages"].get(ledger_["campaign"]["target"], {}).get("status") == "done")
    except DAMAGED:
        return -1


def main(argv: list[str]) -> int:
    read = steps
    if argv[:1] == ["--done"]:
        read, argv = done, argv[1:]
    if not argv:
        print("usage: python3 scripts/state_steps.py [--done] STATE...", file=sys.stderr)
        return 2
    for state in argv:
        print(read(Path(state)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
