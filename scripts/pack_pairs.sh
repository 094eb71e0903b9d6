#!/usr/bin/env bash
# Draw a generated Pathfinder task's target pairs on this machine and pack them to carry to a lent one, where
# scripts/h200_session.sh unpacks them (scripts/unpack_carry.py) and the draw of the images takes ~3.5x less time.
# Run in the repository root, with the project's environment active:
#
#     bash scripts/pack_pairs.sh TASK      # path-64, path-x, path-256 or pathfinder:
#                                          # .device/data64.txz, data.txz, data256.txz, data32.txz
#
# The pairs (`lra data prepare TASK --preset curriculum --targets-only`, Pathfinder's with the baselines' fa-paper
# preset, kept in .device/DIR; a second run finds them drawn) are packed with xz: 13 / 16.5 / 18.4 MB for Path-64 /
# Path-X / Path-256 where gzip made 19.5 / 24 / 25.6, so Path-64's and Path-X's fit one call beside the tree.
# Prints what a call carrying the archive would hold.
set -euo pipefail
preset=curriculum
case ${1:-} in
path-64) dir=.device/data64 ;;
path-x) dir=.device/data ;;
path-256) dir=.device/data256 ;;
pathfinder) dir=.device/data32 preset=fa-paper ;;
*) echo "usage: $0 path-64|path-x|path-256|pathfinder" >&2; exit 2 ;;
esac
LRA_DATA=$dir python3 -m lra data prepare "$1" --preset "$preset" --targets-only --workers "${WORKERS:-$(nproc)}"
tar -cf - -C "$dir" . | xz -9 -T0 > "$dir.txz.part"  # written aside, then renamed: a cut run leaves no half archive
mv "$dir.txz.part" "$dir.txz"
rm -f "$dir.tgz"  # the gzip archive of before: h200_session.sh would unpack both
bash "$(dirname "$0")/carry_size.sh" "$dir.txz" || true
