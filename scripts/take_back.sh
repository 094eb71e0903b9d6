#!/usr/bin/env bash
# Between two device calls of scripts/h200_session.sh: bring the campaigns' state home and commit it, so that the
# next call resumes from it even if it lands on a new, bare machine. Run here, in the repository root:
#
#     bash scripts/take_back.sh FILES_AT [CARRY...]
#
# FILES_AT  the call's files_at folder (it holds back.txz, or its parts back.txz.part0, back.txz.part1, ...; calls
#           made before 2026-12-06 wrote back.tgz, which is read the same way)
# CARRY     the paths the next call will name in its `carry` (e.g. .device/cifar10_jpeg.tar.gz): the closing size check
#           counts them beside the tree, which now holds what this call brought home
# Every campaign state folder in the archive is committed packed, as campaigns/NAME.txz (scripts/pack_xz.py: a Path-X
# state's 12 MiB pack to ~7, its best.pt and last.pt share the position table), replacing the state committed before
# (a folder campaigns/NAME, as states were committed until 2026-12-06, is removed); a state behind the committed one is
# refused. Nothing else is touched (curate the records in its results/ by hand once a stage is done). Packed, three
# Path-X chains leave room in a call for Path-X's pairs (.device/data.txz, 15.7 MiB), so that a call that lands on a
# bare machine draws Path-X's images from them in ~2 minutes, not from scratch in ~8 (session 24 lost a machine
# between two calls: its third call drew for 7.5 of its 9 minutes). h200_session.sh unpacks campaigns/NAME.txz.
# Takes ~8 s with three chains on a 2-core machine (the packs run side by side): the next call must still come within
# 30 s of the last one's end.
# Path-256's state folders (path-256-*) are not committed: 35-50 MB with their 65,536-position tables, too big to add
# to the history after every call; a Path-256 stage ends within its session where it can, and its record is what
# comes home (the archive's results/). Each is kept in the git-ignored .device/states/NAME instead: for a stage cut
# short by a lost machine, `bash scripts/carry_state.sh pack NAME` at the session's end commits it packed (~7 MB).
# The `baselines` phase's unfinished sweep runs (sweeps/ in the archive) are committed as
# leaderboard/in_flight/sweeps.txz, which the next `baselines` call's tree brings to resume them on whatever machine it
# gets (none left after a call that ran a sweep: it is removed; a call that ran none leaves it as it is).
set -euo pipefail
files_at=${1:?give the call\'s files_at folder}
shift
here=$(dirname "$0")
# The tree travels with every call, 64 MiB at most with the carries: new chains' states, or the sweeps' in-flight
# runs (five Image runs packed: 13-21 MB), can take it over, and an over-size call is refused
check_size() {  # the state is home and committed by now: a miss here is said, not an error
    command -v numfmt > /dev/null || return 0
    local over=0
    bash "$here/carry_size.sh" "$@" || over=$?  # 2: a CARRY path that does not exist, said by carry_size.sh
    [ "$over" -ne 1 ] || echo "the next call would be refused: remove what it does not need (a --from source whose" \
        "line's own state is now committed, an ended chain whose record is curated), or carry less, and commit" >&2
}
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
archive=
for kind in txz tgz; do
    if [ -f "$files_at/back.$kind" ]; then
        archive=$files_at/back.$kind
    elif compgen -G "$files_at/back.$kind.part*" > /dev/null; then
        # the parts h200_session.sh split it into; part0 ... part7 sort in order
        cat "$files_at/back.$kind".part* > "$unpacked/back.$kind"
        archive=$unpacked/back.$kind
    fi
    [ -z "$archive" ] || break
done
[ -n "$archive" ] || { echo "no back.txz, back.tgz or their .part* in $files_at: was the call's OUT written?" >&2; exit 2; }
# The records' commits: COMMIT is typed into each call by hand (the machine's copy of .git is stale), and a mistyped
# one names no commit on the leaderboard (2026-12-06: 835d8b7c for 835d8b7). Said here, before anything is curated.
# One extraction for both (tar tells xz from gzip by the archive's first bytes; a member missing from it is skipped).
tar -xf "$archive" -C "$unpacked" results campaigns sweeps logs 2> /dev/null || true
if [ -d "$unpacked/results" ]; then
    python3 - "$unpacked/results" <<'PY' | while read -r record commit; do
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    try:  # a record it cannot read is for the curating to find; the campaigns' state must still come home
        commit = (json.loads(path.read_text()).get("git_commit") or "").split("+")[0]  # "+dirty": a tree with edits
    except (OSError, ValueError, AttributeError):
        continue
    if commit:
        print(path.name, commit)
PY
        git rev-parse --verify --quiet "$commit^{commit}" > /dev/null ||
            echo "WARNING: results/$record names commit $commit, which this repository does not have (a mistyped" \
                "COMMIT?): give its git_commit the commit the call ran when curating it" >&2
    done
fi
# The `baselines` sweeps' unfinished runs are committed packed as leaderboard/in_flight/sweeps.txz, which every later
# call's tree brings, so that a new machine, or a new session on a new VM, resumes them; none left after a call that
# ran a sweep (its logs/sweep-*.log), it goes (also committed), so that a run done since is not resumed from a stale
# checkpoint into a second record. A call of another phase (kernel, speed, a campaign's) neither unpacks nor brings
# back the pack's runs: the pack stays as it is.
kept=leaderboard/in_flight/sweeps.txz
if [ -n "$(ls -A "$unpacked/sweeps" 2> /dev/null)" ]; then
    mkdir -p "$(dirname "$kept")" && python3 "$here/pack_xz.py" "$kept" "$unpacked/sweeps=sweeps"
    git add "$kept"
    echo "$kept: $(find "$unpacked/sweeps" -name last.pt | wc -l) unfinished runs, $(du -h "$kept" | cut -f1)" >&2
elif compgen -G "$unpacked/logs/sweep-*.log" > /dev/null; then
    git rm -q --ignore-unmatch -- "$kept" && rm -f "$kept"
elif [ -f "$kept" ]; then
    echo "$kept stays as it is: no sweep ran in this call" >&2
fi
if ! git diff --cached --quiet -- "$kept"; then
    git commit -q -m "sweeps' unfinished runs after a device call ($(basename "$files_at"))" -- "$kept"
fi
[ -d "$unpacked/campaigns" ] || { echo "no campaigns/ in $archive: nothing to commit"; check_size "$@"; exit 0; }
mkdir -p campaigns
taken=() packing=()  # the states this call brought home, and their packing jobs
for state in "$unpacked"/campaigns/*/; do
    name=$(basename "$state")
    [ -f "$state/campaign.json" ] || { echo "skipping $name: no campaign.json" >&2; continue; }
    case $name in
    path-256-*)
        rm -rf ".device/states/$name" && mkdir -p .device/states && cp -r "$state" ".device/states/$name"
        echo "not committing $name: a Path-256 state is too big to commit as it is (see the header); kept in" \
            ".device/states/$name (if its stage is cut short: bash scripts/carry_state.sh pack $name)" >&2
        continue
        ;;
    esac
    committed=campaigns/$name.txz
    [ -f "$committed" ] || committed=campaigns/$name  # a state committed as a folder before 2026-12-06
    if [ -e "$committed" ] &&
        [ "$(python3 "$here/state_steps.py" "$state")" -lt "$(python3 "$here/state_steps.py" "$committed")" ]; then
        echo "skipping $name: the archive's state is behind the committed one (a call that started it afresh?)" >&2
        continue
    fi
    python3 "$here/pack_xz.py" "campaigns/$name.txz" "$state=$name" & packing+=($!)  # ~3 s a state: side by side
    taken+=("$name")
done
for pid in ${packing[@]+"${packing[@]}"}; do wait "$pid"; done
paths=()  # what the commit names, and nothing else
for name in ${taken[@]+"${taken[@]}"}; do
    if [ -n "$(git ls-files "campaigns/$name/")" ]; then  # packed from now on: the folder goes
        git rm -rq "campaigns/$name/" && paths+=("campaigns/$name")
    fi
    rm -rf "campaigns/$name"
    git add "campaigns/$name.txz" && paths+=("campaigns/$name.txz")
done
if [ ${#paths[@]} -gt 0 ] && ! git diff --cached --quiet -- "${paths[@]}"; then
    git commit -q -m "campaign state after a device call ($(basename "$files_at"))" -- "${paths[@]}"
fi
git log --oneline -1
check_size "$@"
