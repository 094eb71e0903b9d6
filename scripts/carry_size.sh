#!/usr/bin/env bash
# What a device call would carry: the work tree (tracked files present and untracked ones git does not ignore) and
# each PATH named in its `carry`, against the call's 64 MiB. Run in the repository root before a call:
#
#     bash scripts/carry_size.sh [PATH...]     # e.g. .device/data64.txz .device/data.txz
#
# Exits 1 when the sum is over: the call would be refused, so carry less (docs/path_x_campaign.md says what fits).
# Each file counts its size rounded up to a 4 KiB block: on 2026-12-06 the tool refused a call whose bytes summed to
# 63.2 MiB (its 1,100 files, most of them small records, cost more than their bytes); counted so, it was 65.8.
set -euo pipefail
blocks() {  # the NUL-separated files on stdin, each rounded up to 4 KiB, summed in bytes
    (du -b --apparent-size --files0-from=- 2> /dev/null || true) | awk '{s += int(($1 + 4095) / 4096) * 4096} END {print s + 0}'
}
bytes() { find "$1" -type f -print0 | blocks; }
mib() { numfmt --to=iec-i --suffix=B --format=%.1f --round=nearest "$1"; }
# du skips the tracked files missing from the tree (deleted, not yet committed: they do not travel either)
tree=$(git ls-files -co --exclude-standard -z | blocks)
total=$tree
line="the tree $(mib "$tree")"
for path in "$@"; do
    [ -e "$path" ] || { echo "carry_size: $path does not exist" >&2; exit 2; }
    size=$(bytes "$path")
    total=$((total + size))
    line+=" + $path $(mib "$size")"
done
limit=$((64 * 1024 * 1024))
echo "$line = $(mib "$total") of a call's 64MiB" >&2
[ "$total" -le "$limit" ] || { echo "over by $(mib $((total - limit))): carry less" >&2; exit 1; }
