#!/usr/bin/env bash
# One device call of the open issues' H200 work (32, 34, 37), run from the repository root on the lent machine:
#
#     bash scripts/h200_session.sh PHASE LIMIT_S COMMIT
#
# PHASE  a: ListOps baselines (issue 34) while Pathfinder's data is drawn, then the in-flight Pathfinder runs (32)
#        b: the in-flight Pathfinder runs to their end beside issue 37's Image lines (docs/image_fidelity.md)
#        c: seeds 1-2 of the ListOps baselines that trained (issue 34)
#        d: issue 34's speed table: `lra bench train --preset fa-paper --compile max --synthetic`, every baseline
#           beside compiled naive, task by task while time is left (nystrom once more without its convolution)
#        e: issue 36: the packed step's GPU tests, the packed curriculum's step times (`lra bench train TASK
#           --preset curriculum`, flash and block_sparse_flash, on 4,096 real images of each size), then `lra campaign
#           path-x` (block_sparse_flash) from campaigns/path-x-bsf2 (or a new one) with the time left; its state comes
#           back too
#        f, g, h: one session's three calls for issues 32 and 36, made back to back (the next within 30 s):
#           f: phase e's step times, then the in-flight Pathfinder runs detached (they outlive the call), then the
#              packed GPU tests beside them
#           g (and h, the same): wait for those runs to end, then `lra campaign path-x` detached (once), stopping
#              CAMPAIGN_END seconds after this call's start (from `status`'s budget_left_s, less the last call's tar
#              and a margin), and wait for it; its state comes back. EXTRA (words) starts more beside it, detached:
#              image / image2: issue 37's Image lines, first / second round, ending before it (carry [".device"]);
#              path-256: `lra campaign path-256` from this one's Path-64 stage (campaigns/path-256-bsf); gpu-tests:
#              the SDPA padding column's GPU tests (before the others)
#        i: issue 36's Path-X pilots, the same command on every call of a session (CAMPAIGN_END as for g): Path-X's
#           data drawn detached on 12 cores and Pathfinder-32's on 4 (once); a Pathfinder-32 pilot with
#           model.pos_emb=sincos2d (9,360 steps) once its data is there; once Path-X's is, five pilots side by side, each
#           1,560 steps from path-x-bsf2's Path-64 stage (docs/path_x_campaign.md says why these five); PILOTS=0
#           skips them. FOLLOW="--set path-x:KEY=VALUE ..." FOLLOW_NAME=NAME (on the calls after a pilot left chance):
#           once no pilot runs, `lra campaign path-x --from path-x-bsf2` into campaigns/path-x-NAME with those settings
# LIMIT_S  wall seconds this call may use (keep it 40 s under the call's timeout: the archives are written after)
# COMMIT   the commit being run (the copied .git is stale): goes into every record
# PRESET=tiny in the environment (with DEVICE=cpu) dry-runs phases c and d on a CPU, to check the script itself;
# phase e with DEVICE=cpu ATTN=naive BENCH=naive SMALL="--set train.batch_size=8 --set data.num_train=32 ...";
# phase i with DEVICE=cpu PILOT_ATTN=naive WORKERS=2 SMALL_DATA="--set data.num_train=32 ..." SMALL="--set ..."
# PILOT_STEPS=4.
#
# Image needs the CIFAR-10 archive: `mkdir -p .device && cp ../shared/data/cifar10_jpeg.tar.gz .device/` here, and
# carry [".device"]. Runs live in /tmp/lra (kept while the machine stays warm; the next call must come within 30 s);
# a bare machine restores the Pathfinder runs from leaderboard/in_flight. Everything comes back as $OUT/back.tgz.part*:
# the records (results/), the logs, the campaigns' state (after a call, before the next: `bash scripts/take_back.sh
# FILES_AT` commits it) and the state of every unfinished Pathfinder run (unpack it and replace the run folders under
# leaderboard/in_flight/pathfinder, then commit, before the next call copies the tree).
set -uo pipefail
PHASE=$1 LIMIT=$2
export LRA_GIT_COMMIT=$3 PYTHONPATH=$PWD LRA_DATA=/tmp/lra/data LRA_RESULTS=/tmp/lra/results LRA_RUNS=/tmp/lra/runs
export TORCHINDUCTOR_CACHE_DIR=/tmp/lra/inductor TRITON_CACHE_DIR=/tmp/lra/triton
PRESET=${PRESET:-fa-paper} DEVICE=${DEVICE:-cuda} OUT=${OUT:?set OUT to the folder that comes back}
START=$(date +%s)
LOGS=/tmp/lra/logs
mkdir -p "$LOGS" "$LRA_RESULTS" "$LRA_RUNS/pathfinder"
left() { echo $((LIMIT - ($(date +%s) - START))); }
lra() { python3 -m lra "$@"; }
PIDS=()
bg() {  # bg NAME ARGS...: an `lra` command in the background, its output in $LOGS/NAME.log
    local name=$1; shift
    lra "$@" > "$LOGS/$name.log" 2>&1 & PIDS+=($!)
}

detach() {  # detach NAME ARGS...: an `lra` command in its own session (it outlives this call), its pid in /tmp/lra/pids
    local name=$1; shift
    mkdir -p /tmp/lra/pids
    setsid nohup python3 -m lra "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "/tmp/lra/pids/$name.pid"
}

wait_detached() {  # wait_detached PATTERN: until every detached command named PATTERN has ended, or 30 s are left
    local f
    for f in /tmp/lra/pids/$1.pid; do
        [ -f "$f" ] || continue
        while kill -0 "$(cat "$f")" 2> /dev/null && [ "$(left)" -gt 30 ]; do sleep 5; done
    done
}

alive() {  # alive PATTERN: whether a detached command named PATTERN is still running
    local f
    for f in /tmp/lra/pids/$1.pid; do
        [ -f "$f" ] && kill -0 "$(cat "$f")" 2> /dev/null && return 0
    done
    return 1
}

run_limit() {  # run_limit RUN: --time-limit seconds of a run started by RUN (detach: RUN_S; else the time left)
    if [ "$1" = detach ]; then echo "${RUN_S:-1500}"; else left; fi
}

listops_run() {  # listops_run NAME BACKEND SEED [--set ...]
    local name=$1 attn=$2 seed=$3; shift 3
    bg "$name" run listops --attn "$attn" --preset "$PRESET" --device "$DEVICE" --seed "$seed" --time-limit "$(left)s" "$@"
}

pathfinder_resume() {  # every unfinished in-flight run, with the time left (RUN=detach: detached, RUN_S seconds)
    local run=${RUN:-bg} limit
    for dir in leaderboard/in_flight/pathfinder/*/; do
        [ -d "$dir" ] || continue
        local name; name=$(basename "$dir")
        [ -d "$LRA_RUNS/pathfinder/$name" ] || cp -r "$dir" "$LRA_RUNS/pathfinder/"
        [ -f "$LRA_RUNS/pathfinder/$name/summary.json" ] && continue
        local seed=${name#*-s}; seed=${seed%%-*}
        local attn=${name%%-fa-paper*}
        limit=$(run_limit "$run")
        $run "pf-$name" run pathfinder --attn "$attn" --preset fa-paper --seed "$seed" --resume \
            --set data.black_padding=true --set model.pool=mean_all --set "attention.$attn.compact_padding=true" \
            --out "$LRA_RUNS/pathfinder/$name" --time-limit "${limit}s"
    done
}

image_lines() {  # docs/image_fidelity.md's run plan, 12,000 steps each (RUN=detach: detached, RUN_S seconds)
    local run=${RUN:-bg} limit
    limit=$(run_limit "$run")
    lra data prepare image --from .device/cifar10_jpeg.tar.gz > "$LOGS/prep-image.log" 2>&1
    local s=(--preset fa-paper --seed 0 --set train.steps=12000 --time-limit "${limit}s")
    local pad=(--set data.black_padding=true --set model.pool=mean_all)
    $run img-l1 run image --attn sdpa_flash "${s[@]}" "${pad[@]}" --set train.schedule=onecycle --set train.amp=fp16
    $run img-l2 run image --attn sdpa_flash "${s[@]}" "${pad[@]}"
    $run img-l3 run image --attn flash "${s[@]}" --set train.amp=none --set attention.flash.allow_tf32=true
    $run img-l4 run image --attn flash "${s[@]}" --set model.attention_dropout=0
    $run img-l0 run image --attn sdpa_flash "${s[@]}"
}

image_lines2() {  # docs/image_fidelity.md's second round: the black-pixel drop and the fp16 NaN, seed 1, the exact
    # reference backend and flash's compact path (RUN=detach: detached, RUN_S seconds)
    local run=${RUN:-bg} limit
    limit=$(run_limit "$run")
    lra data prepare image --from .device/cifar10_jpeg.tar.gz > "$LOGS/prep-image.log" 2>&1
    local s=(--preset fa-paper --set train.steps=12000 --time-limit "${limit}s")
    local pad=(--set data.black_padding=true --set model.pool=mean_all)
    $run img2-l1 run image --attn sdpa_flash "${s[@]}" --seed 0 "${pad[@]}" --set train.schedule=onecycle --set train.amp=fp16
    $run img2-l2s1 run image --attn sdpa_flash "${s[@]}" --seed 1 "${pad[@]}"
    $run img2-l0s1 run image --attn sdpa_flash "${s[@]}" --seed 1
    $run img2-l5 run image --attn naive "${s[@]}" --seed 0 "${pad[@]}"
    $run img2-l6 run image --attn flash "${s[@]}" --seed 0 "${pad[@]}" --set attention.flash.compact_padding=true
}

packed_tests() {  # the packed step's GPU tests (compile max with CUDA graphs against eager)
    [ "$DEVICE" = cpu ] || timeout 240 python3 -m pytest -q -m gpu tests/test_compiled_gpu.py -k packed \
        > "$LOGS/gpu-tests-packed.log" 2>&1
}

packed_bench() {  # the packed curriculum's step times, flash and block_sparse_flash, on 4,096 real images a size
    # shellcheck disable=SC2206
    local small=(--set data.num_train=4096 --set data.num_val=512 --set data.num_test=512 ${SMALL:-})
    for task in ${BENCH_TASKS:-path-x path-256 path-64}; do
        [ "$(left)" -gt 240 ] || break
        lra data prepare "$task" --preset curriculum "${small[@]}" --workers 16 > "$LOGS/prep-$task-small.log" 2>&1
        timeout "$(left)" python3 -m lra bench train "$task" --preset curriculum --device "$DEVICE" --compile max \
            --attn "${BENCH:-flash,block_sparse_flash}" --steps 10 --warmup 3 "${small[@]}" > "$LOGS/bench-packed-$task.log" 2>&1
    done
}

# shellcheck disable=SC2206
CAMPAIGN=(path-x --attn "${ATTN:-block_sparse_flash}" --state /tmp/lra/campaigns/path-x-bsf2 --device "$DEVICE" --workers 16 ${SMALL:-})

case $PHASE in
a)
    lra data prepare listops --preset fa-paper --workers 16 > "$LOGS/prep-listops.log" 2>&1
    for seed in 0 1 2; do listops_run "listops-reformer-s$seed" reformer "$seed"; done
    listops_run listops-linear-unnormalised-s0 linear 0 --set attention.linear.normalize=false
    listops_run listops-performer-zeroed-s0 performer 0 \
        --set attention.performer.pad_keys=zeroed --set attention.performer.scale=0.03125
    lra data prepare pathfinder --preset fa-paper --workers 12 > "$LOGS/prep-pathfinder.log" 2>&1
    pathfinder_resume
    ;;
b)
    lra data prepare pathfinder --preset fa-paper --workers 16 > "$LOGS/prep-pathfinder.log" 2>&1
    pathfinder_resume
    image_lines
    ;;
c)
    lra data prepare listops --preset "$PRESET" --workers 16 > "$LOGS/prep-listops.log" 2>&1
    for attn in smyrf bigbird sinkhorn longformer sparse_transformer local; do
        for seed in 1 2; do listops_run "listops-$attn-s$seed" "$attn" "$seed"; done
    done
    listops_run listops-linformer-s2 linformer 2
    ;;
d)
    baselines=naive,linformer,linear,performer,local,reformer,smyrf,sparse_transformer,longformer,sinkhorn
    baselines=$baselines,synthesizer,bigbird,nystrom
    for task in listops text retrieval image pathfinder; do
        [ "$(left)" -gt 120 ] || break
        timeout "$(left)" python3 -m lra bench train "$task" --preset "$PRESET" --device "$DEVICE" --synthetic --compile max \
            --attn "$baselines" > "$LOGS/bench-$task.log" 2>&1
    done
    [ "$(left)" -gt 60 ] && timeout "$(left)" python3 -m lra bench train listops --preset fa-paper --synthetic \
        --compile max --attn linformer,nystrom --set attention.nystrom.conv_kernel_size=null \
        > "$LOGS/bench-listops-nystrom-noconv.log" 2>&1
    ;;
e)
    packed_tests
    packed_bench
    mkdir -p /tmp/lra/campaigns
    [ -d /tmp/lra/campaigns/path-x-bsf2 ] || { [ -d campaigns/path-x-bsf2 ] && cp -r campaigns/path-x-bsf2 /tmp/lra/campaigns/; }
    [ "$(left)" -gt 120 ] && lra campaign "${CAMPAIGN[@]}" --time-limit "$(($(left) - 30))s" > "$LOGS/campaign-path-x-bsf2.log" 2>&1
    ;;
f)
    lra data prepare pathfinder --preset fa-paper --workers 10 > "$LOGS/prep-pathfinder.log" 2>&1 & PIDS+=($!)
    packed_bench
    for pid in "${PIDS[@]}"; do wait "$pid"; done
    PIDS=()
    RUN=detach pathfinder_resume
    packed_tests
    ;;
g | h)
    wait_detached 'pf-*'
    mkdir -p /tmp/lra/campaigns
    [ -d /tmp/lra/campaigns/path-x-bsf2 ] || { [ -d campaigns/path-x-bsf2 ] && cp -r campaigns/path-x-bsf2 /tmp/lra/campaigns/; }
    until_end=$((${CAMPAIGN_END:?set CAMPAIGN_END} - ($(date +%s) - START)))
    if ! [ -f /tmp/lra/pids/campaign-path-x-bsf2.pid ] && [ "$until_end" -gt 150 ]; then
        detach campaign-path-x-bsf2 campaign "${CAMPAIGN[@]}" --time-limit "${until_end}s"
        for extra in ${EXTRA:-}; do  # beside it, on the GPU that the campaign leaves idle while it draws data
            case $extra in
            image) RUN=detach RUN_S=$((until_end - 90)) image_lines ;;     # issue 37, first round
            image2) RUN=detach RUN_S=$((until_end - 90)) image_lines2 ;;   # issue 37, second round
            path-256)  # issue 36's second target: Path-256 from this campaign's Path-64 stage, on 8 of the cores
                [ -d /tmp/lra/campaigns/path-256-bsf ] || { [ -d campaigns/path-256-bsf ] && cp -r campaigns/path-256-bsf /tmp/lra/campaigns/; }
                detach campaign-path-256-bsf campaign path-256 --attn "${ATTN:-block_sparse_flash}" \
                    --state /tmp/lra/campaigns/path-256-bsf --from /tmp/lra/campaigns/path-x-bsf2 --device "$DEVICE" \
                    --workers 8 --time-limit "${until_end}s" ;;
            gpu-tests) timeout 180 python3 -m pytest -q -m gpu tests/test_sdpa_bias_column.py > "$LOGS/gpu-tests-sdpa.log" 2>&1 ;;
            *) echo "unknown EXTRA item $extra (image, image2, path-256, gpu-tests)" >&2 ;;
            esac
        done
    fi
    wait_detached 'campaign-*'
    ;;
i)
    : "${CAMPAIGN_END:?set CAMPAIGN_END}"
    session_left() { echo $((CAMPAIGN_END - ($(date +%s) - START))); }  # seconds to the session's end, now
    [ -f /tmp/lra/pids/prep-path-x.pid ] || detach prep-path-x data prepare path-x --preset curriculum \
        --workers "${WORKERS:-12}" ${SMALL_DATA:-}
    [ -f /tmp/lra/pids/prep-pathfinder.pid ] || detach prep-pathfinder data prepare pathfinder --preset curriculum \
        --workers "${PF_WORKERS:-4}" ${SMALL_DATA:-}
    wait_detached prep-pathfinder
    # on the GPU while Path-X's data is drawn: does the model learn Pathfinder-32 with fixed 2-D positions?
    if grep -q prepared "$LOGS/prep-pathfinder.log" && ! [ -f /tmp/lra/pids/pf32-sincos2d.pid ]; then
        detach pf32-sincos2d run pathfinder --attn "${PILOT_ATTN:-block_sparse_flash}" --preset curriculum --seed 0 \
            --device "$DEVICE" --time-limit "$(($(session_left) - 60))s" ${SMALL_DATA:-} ${SMALL:-} \
            --set train.steps="${PF_STEPS:-9360}" --set model.pos_emb=sincos2d
    fi
    wait_detached prep-path-x
    if [ "${PILOTS:-1}" = 1 ] && grep -q prepared "$LOGS/prep-path-x.log" && ! compgen -G "/tmp/lra/pids/pilot-*.pid" > /dev/null; then
        base=(--preset curriculum --seed 0 --device "$DEVICE" --time-limit "$(($(session_left) - 60))s" ${SMALL_DATA:-} ${SMALL:-}
              --set train.steps="${PILOT_STEPS:-1560}" --set train.init_from=campaigns/path-x-bsf2/path-64)
        mirror=(--set train.init_positions=mirror) mean=(--set model.pool=mean)
        bsf=${PILOT_ATTN:-block_sparse_flash} flash=${PILOT_ATTN:-flash}
        detach pilot-mirror run path-x --attn "$bsf" "${base[@]}" "${mirror[@]}"
        detach pilot-mean run path-x --attn "$bsf" "${base[@]}" "${mean[@]}"
        detach pilot-flash run path-x --attn "$flash" "${base[@]}"
        detach pilot-all run path-x --attn "$flash" "${base[@]}" "${mirror[@]}" "${mean[@]}"
        detach pilot-posed run path-x --attn "$bsf" "${base[@]}" "${mirror[@]}" --set train.augment=dihedral
    fi
    wait_detached 'pilot-*'
    wait_detached 'pf32-*'
    # FOLLOW (a later call, once a pilot left chance): its --set words, e.g. "--set path-x:train.init_positions=mirror",
    # become the Path-X stage of campaign path-x-$FOLLOW_NAME, --from path-x-bsf2 (its first two stages, whatever ATTN)
    if [ -n "${FOLLOW:-}" ] && ! alive 'pilot-*'; then
        follow=path-x-${FOLLOW_NAME:?name the follow-up campaign}
        mkdir -p /tmp/lra/campaigns
        [ -d "/tmp/lra/campaigns/$follow" ] || { [ -d "campaigns/$follow" ] && cp -r "campaigns/$follow" /tmp/lra/campaigns/; }
        [ -d /tmp/lra/campaigns/path-x-bsf2 ] || cp -r campaigns/path-x-bsf2 /tmp/lra/campaigns/
        [ -f "/tmp/lra/pids/campaign-$follow.pid" ] || detach "campaign-$follow" campaign path-x \
            --attn "${ATTN:-block_sparse_flash}" --state "/tmp/lra/campaigns/$follow" --from /tmp/lra/campaigns/path-x-bsf2 \
            --device "$DEVICE" --workers 15 --time-limit "$(session_left)s" ${FOLLOW}
        wait_detached "campaign-$follow"
    fi
    ;;
*)
    echo "unknown phase $PHASE (a to i)" >&2
    exit 2
    ;;
esac

for pid in "${PIDS[@]}"; do wait "$pid"; done
nvidia-smi --query-gpu=name --format=csv,noheader
grep -H -E "record:|resume with|rror" "$LOGS"/*.log | tail -n 40
find "$LRA_RUNS/pathfinder" -name summary.json -printf '%h\n' | xargs -r -I{} rm -f {}/last.pt
# A call brings back at most 8 files of 16 MiB, 64 MiB in all: the archive comes back in 15 MiB parts
# (back.tgz.part0, ...; take_back.sh joins them). Over 60 MiB, Path-256's state is left out (its stage checkpoints
# are 17-67 MiB: the resumable one holds Adam's moments of 4.2 M learned positions), with a warning.
back() { tar -czf /tmp/lra/back.tgz --exclude='*.lock' -C /tmp/lra "$@" results logs runs/pathfinder \
    $(cd /tmp/lra && ls -d campaigns 2>/dev/null); }
back
if [ "$(stat -c %s /tmp/lra/back.tgz)" -gt $((60 * 1024 * 1024)) ]; then
    echo "WARNING: the archive is over 60 MiB; Path-256's campaign state stays on this machine" >&2
    back --exclude='campaigns/path-256-*'
fi
split -b 15M -d -a 1 /tmp/lra/back.tgz "$OUT/back.tgz.part"
ls -la "$OUT"
