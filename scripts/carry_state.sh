#!/usr/bin/env bash
# A Path-256 stage cut short by a lost machine, carried to the next one (docs/path_x_campaign.md, round 7's call 5).
# Its state (20-50 MB) is kept by scripts/take_back.sh in the git-ignored .device/states/NAME; a call carries the
# work tree and at most 64 MiB in all, so the state travels as untracked files in campaigns/NAME while the other
# campaign folders (the seed chains) wait outside the tree. Run here, in the repository root:
#
#     bash scripts/carry_state.sh put NAME    # before the calls that resume it (NAME: e.g. path-256-via-x-mirror-24k)
#     bash scripts/carry_state.sh back        # once they are done, before anything is committed by hand
#
# put: .device/states/NAME -> campaigns/NAME (untracked), every other campaigns/ folder but the session script's
#      --from source (SOURCE in scripts/h200_session.sh) moved to .device/aside/; the tree's size is printed.
# back: campaigns/NAME removed (take_back.sh has kept its newest copy in .device/states/NAME), the folders put back;
#      the work tree's campaigns/ is then as committed.
# Draw the pairs on the new machine first (a call with CAMPAIGNS=0 and the pairs carried: both do not fit one call).
# take_back.sh stays safe between the calls: it commits only the folders a call brought home.
set -euo pipefail
aside=.device/aside
source_name=$(sed -n 's/^SOURCE=\(\S*\).*/\1/p' "$(dirname "$0")/h200_session.sh")
[ -n "$source_name" ] || { echo "scripts/h200_session.sh names no SOURCE" >&2; exit 2; }
case ${1:-} in
put)
    name=${2:?give the NAME of a folder of .device/states}
    [ -d ".device/states/$name" ] || { echo "no kept state .device/states/$name (take_back.sh keeps them)" >&2; exit 2; }
    [ ! -e "$aside" ] || { echo "$aside exists: a carry is in progress; run \`$0 back\` first" >&2; exit 2; }
    [ ! -e "campaigns/$name" ] || { echo "campaigns/$name exists: nothing moved" >&2; exit 2; }
    mkdir -p "$aside"
    echo "$name" > "$aside/.carried"
    for folder in campaigns/*/; do
        folder=${folder%/}
        [ "$(basename "$folder")" = "$source_name" ] || mv "$folder" "$aside/"
    done
    cp -r ".device/states/$name" "campaigns/$name"
    echo "campaigns/$name in place; set aside: $(cd "$aside" && ls | tr '\n' ' ')" >&2
    bash "$(dirname "$0")/carry_size.sh" || true  # what the resuming calls will carry
    ;;
back)
    [ -f "$aside/.carried" ] || { echo "nothing is being carried ($aside/.carried is missing)" >&2; exit 2; }
    name=$(cat "$aside/.carried")
    rm -rf "campaigns/${name:?}"
    for folder in "$aside"/*/; do
        [ -d "$folder" ] && mv "${folder%/}" campaigns/
    done
    rm -f "$aside/.carried" && rmdir "$aside"
    git status --short -- campaigns
    echo "campaigns/ as before; $name's newest state is in .device/states/$name" >&2
    ;;
*)
    echo "usage: $0 put NAME | back" >&2
    exit 2
    ;;
esac
