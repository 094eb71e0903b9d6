#!/usr/bin/env bash
# A Path-256 stage cut short by a lost machine, carried to the next one (docs/path_x_campaign.md, round 9). Its state
# (35-50 MB: the 65,536-position table in best.pt and last.pt) is kept by scripts/take_back.sh in the git-ignored
# .device/states/NAME, which a new session on a new VM would not have. Packed with xz at its largest window it is
# ~7 MB (the frozen table is the Path-X table tiled, and best.pt and last.pt share it), small enough to commit and to
# travel in the tree beside the stage's pairs. Run here, in the repository root:
#
#     bash scripts/carry_state.sh pack NAME   # at a session's end, a stage not done (NAME: e.g. path-256-via-x-mirror-24k)
#     bash scripts/carry_state.sh drop NAME   # once the stage has ended and its record is curated
#
# pack: .device/states/NAME -> campaigns/NAME.txz, committed; scripts/h200_session.sh unpacks it where the machine has
#       no state of NAME, so the next session resumes in one call (`carry: [".device/data256.txz"]`).
# drop: campaigns/NAME.txz removed and the removal committed.
set -euo pipefail
name=${2:-}
[ -n "$name" ] && [ "$name" = "$(basename "$name")" ] || { echo "usage: $0 pack NAME | drop NAME" >&2; exit 2; }
packed=campaigns/$name.txz
case ${1:-} in
pack)
    [ -f ".device/states/$name/campaign.json" ] || {
        echo "no kept state .device/states/$name (take_back.sh keeps a Path-256 state there)" >&2; exit 2; }
    mkdir -p campaigns
    python3 "$(dirname "$0")/pack_xz.py" "$packed" ".device/states/$name=$name"
    git add "$packed"
    git commit -q -m "packed state of $name (a stage cut short; scripts/carry_state.sh)" -- "$packed"
    echo "$packed: $(du -h "$packed" | cut -f1), committed" >&2
    bash "$(dirname "$0")/carry_size.sh" .device/data256.txz || true  # what the resuming call carries
    ;;
drop)
    [ -f "$packed" ] || { echo "no $packed to drop" >&2; exit 2; }
    git rm -q "$packed"
    git commit -q -m "drop the packed state of $name (its stage has ended)" -- "$packed"
    echo "$packed removed" >&2
    ;;
*)
    echo "usage: $0 pack NAME | drop NAME" >&2
    exit 2
    ;;
esac
