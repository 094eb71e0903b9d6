#!/usr/bin/env bash
# One device call of the open issues' H200 work (34, 36), run from the repository root on the lent machine:
#
#     bash scripts/h200_session.sh PHASE LIMIT_S COMMIT
#
# PHASE  listops-reruns: issue 34's ListOps runs that wait on a fix (docs/baselines.md): reformer seeds 0-2 with its
#            scale fixed, local seeds 0-2 at the paper's window 128, linear unnormalised and performer with zeroed keys
#        listops-seeds: seeds 1-2 of the ListOps baselines that trained (issue 34)
#        listops-performer: issue 34, the CPU pilot's performer at ListOps' full length (docs/baselines.md): under
#            fa-paper for 30,000 steps with 64 features in fp32, drawn once, redrawn every step, and the relu kernel,
#            side by side. (`--preset fly` runs go through `baselines`: PRESET=fly with a group of one run at a time,
#            BASELINE_GROUPS="linear,local,reformer,performer:0:listops:1", which resumes them on a warm machine's
#            later calls; a ListOps fly run's state, ~145 MB, never comes back: see MAX_RUN_MB below)
#        baselines: issue 34's accuracy rows, `lra sweep` of every baseline (BASELINES) over SEEDS (0-2) on
#            BASELINE_TASKS (default text; image, pathfinder), four runs a GPU (PER_GPU), until LIMIT, less the runs
#            leaderboard/results already holds a record of (`--skip-recorded`); the same command on the next calls of
#            a warm machine resumes the unfinished runs.
#            BASELINE_GROUPS="ATTNS:SEEDS[:TASKS[:PER_GPU]] ..." instead runs one such sweep a group, side by side.
#            Text and Image read their archives from .device/ (copy aclImdb_v1.tar.gz and cifar10_jpeg.tar.gz there
#            from ../shared/data; carry the task's archive, not all of .device: with .device/data it is over a call's
#            64 MiB)
#        kernel: issue 33's table, `lra bench attention` of flash, flash@deterministic=false and the SDPA peers at
#            head dims 8 and 16 (HEAD_DIMS), 1K-16K tokens (SEQS), dropout 0.1 then 0, bf16, 131,072 tokens a batch;
#            at 0.1 also flash with the forward's registers left to the compiler (maxnreg=0; the default caps them at
#            head dim 8 under dropout); KERNEL_TRAIN=1 then times the issue's training steps (`lra bench train
#            --synthetic --compile max`: Path-X's fa-paper step with block_sparse_flash at batch 512 and flash beside
#            sdpa_flash at 64, Pathfinder's with flash beside sdpa_flash)
#        speed: issue 34's speed table: `lra bench train --preset fa-paper --compile max --synthetic`, every baseline
#            beside compiled naive, task by task while time is left (SPEED_TASKS, default all five; nystrom once more
#            without its convolution)
#        path-x: issue 36, the same command on every call of a session (docs/path_x_campaign.md, "Round 9 (next)"):
#            Path-X's data drawn detached on 16 cores (once), then the pilots of PILOT_FILE (default
#            scripts/path_x_pilots.txt: one `NAME BACKEND [--set ...]` a line) side by side, each `lra run path-x
#            --preset curriculum` for PILOT_STEPS (2,496) steps from path-x-bsf-local-frozen's Path-64 stage.
#            PILOTS=0 skips them.
#            Once no pilot runs, the campaigns of CAMPAIGN_FILE (default scripts/path_x_campaigns.txt, the same kind
#            of lines) side by side, each `lra campaign path-x --attn BACKEND` with its settings into
#            campaigns/path-x-NAME (resumed from the committed state where there is one: packed, NAME.txz, as
#            take_back.sh commits it, or a folder; this machine's copy where it is as far on), --from
#            path-x-bsf-local-frozen (the stages it shares: a campaign's config hash leaves the backend out, so a line
#            must change the Path-X stage, e.g. --set path-x:train.steps=6240), detached, until CAMPAIGN_END; every
#            call waits for them.
#            CAMPAIGNS=0 skips them; with CAMPAIGN_FROM=none each is a chain of its own from Pathfinder-32, started
#            before the pilots (with PILOTS=0, a session for the chains alone; DRAW=0 leaves the target's own draw out);
#            with CAMPAIGN_FROM=own each line NAME runs --from its own Path-X chain, campaigns/path-x-NAME (the seeds'
#            Path-256 stages, scripts/path_256_seeds.txt), this machine's copy where the chain ended in this session.
#            A line whose settings begin `--from FOLDER` runs from campaigns/FOLDER whatever CAMPAIGN_FROM says (the
#            moonshot's flash seeds, from the block_sparse_flash seeds' chains); a source is read only when its
#            campaign starts, so it may be removed once the line's own state is committed.
#            SERIAL=1 runs the lines one at a time in the file's order, each from the end of the one before (a call
#            that ends while one runs leaves the next to the next call): three `flash` chains side by side made ~17
#            training steps/s together (each ~5.8, the GPU at 100%: logs/gpu.log) where one alone made 19.5, both on
#            an H100 (sessions 23-24); serially the first line also ends first.
#            BESIDE_SPEED="TASK ..." (first call): the draw on cores 4-15 (12 workers) while the `speed` phase's bench
#            runs on cores 0-3 for those tasks, one after another while the draw lasts (the GPU is idle till then).
#            BESIDE_KERNEL=1 (first call): the same for the `kernel` phase's dropout run (SEQS=1k,16k keeps it to about
#            the draw's time); the pilots and campaigns start once both have ended, so nothing shares the GPU with it
#            Carry .device/data.txz (Path-X's target pairs, 16.5 MB: `bash scripts/pack_pairs.sh path-x` on any
#            machine) and the draw takes ~3.5x less time; chains of their own (CAMPAIGN_FROM=none) also
#            .device/data64.txz (Path-64's, `pack_pairs.sh path-64`: both fit one call beside the tree)
#        path-256: the same for Path-256 (issue 36's second target): its draw, then the campaigns of
#            scripts/path_256_campaigns.txt as campaigns/path-256-NAME (no pilots); carry .device/data256.txz
# LIMIT_S  wall seconds this call may use (keep it 40 s under the call's timeout: the archive is written after)
# COMMIT   the commit being run (the copied .git is stale): goes into every record
# CAMPAIGN_END (path-x): seconds from this call's start to the session's end, less ~100 s for the last archive: the
# last lease's budget_left_s less 100, 1,620 on a fresh session's first call (its ~35 s start is counted before it;
# session 25 ended with 234 s left at 1,540). Detached runs take their time limits from it when they start; one that
# stops at it with session time left starts again on a later call. A call whose CAMPAIGN_END is at most a minute
# past its LIMIT_S is the session's last: a minute before its end it asks the campaigns and pilots still running to
# stop (SIGTERM), so that their state is in the archive.
#
# Dry runs on a CPU: PRESET=tiny DEVICE=cpu for listops-seeds, listops-performer, speed and baselines; for path-x,
# DEVICE=cpu PILOT_ATTN=naive CAMPAIGN_ATTN=naive WORKERS=1 SMALL_DATA="--set data.num_train=32 --set
# data.num_val=16 --set data.num_test=16 --set data.downsample=2" SMALL="--set train.batch_size=8" PILOT_STEPS=4, and
# OUT a scratch folder (the campaigns then stop at once: SMALL changes their stages' hashes, so --from finds none);
# for kernel, also TRITON_INTERPRET=1 SEQS=128 HEAD_DIMS=8 PEERS=naive KERNEL_ARGS="--batch-tokens 256 --heads 1".
#
# Runs live in /tmp/lra (kept while the machine stays warm; the next call must come within 30 s). Everything comes
# back as $OUT/back.txz.part* (a call returns 8 files of at most 16 MiB): the records (results/), the logs, the
# campaigns' state and the sweeps' unfinished runs (sweeps/). After a call, before the next: `bash scripts/take_back.sh
# FILES_AT` commits the campaigns' state and the sweeps' unfinished runs (leaderboard/in_flight/sweeps.txz).
set -uo pipefail
PHASE=$1 LIMIT=$2
export LRA_GIT_COMMIT=$3 PYTHONPATH=$PWD LRA_DATA=/tmp/lra/data LRA_RESULTS=/tmp/lra/results LRA_RUNS=/tmp/lra/runs
export TORCHINDUCTOR_CACHE_DIR=/tmp/lra/inductor TRITON_CACHE_DIR=/tmp/lra/triton
PRESET=${PRESET:-fa-paper} DEVICE=${DEVICE:-cuda} OUT=${OUT:?set OUT to the folder that comes back}
START=$(date +%s)
LOGS=/tmp/lra/logs
# The campaigns' default --from source (CAMPAIGN_FROM): stages 1-3 of Path-X's 63.0% chain, read and never written
SOURCE=path-x-bsf-local-frozen
# issue 34's baselines (the FlashAttention paper's Table 3, the LRA paper's rows, nystrom), for `speed` and `baselines`
paper_rows=linformer,linear,performer,local,reformer,smyrf,sparse_transformer,longformer,sinkhorn,synthesizer,bigbird
BASELINES=${BASELINES:-$paper_rows,nystrom}
# A machine can come with an earlier session's /tmp/lra (seen 2026-12-05: a day-old chain's logs and records; on
# 2026-12-06 files 1-5 hours old came back in the archives, though this check should have set them aside; how is not
# known): its pid files would make this session skip what they name, and its records would come back as this
# session's. Files 35 minutes old cannot be this session's on this machine (a machine is held 30 minutes at most, and
# a new one starts bare): set them aside; data and caches stay. (bring_state also sets aside a campaign state behind
# the committed one, whatever its age.)
if [ -n "$(find /tmp/lra/pids /tmp/lra/logs -maxdepth 1 -type f -mmin +35 2> /dev/null | head -n 1)" ]; then
    earlier=/tmp/lra-earlier-$START
    mkdir -p "$earlier"
    for d in pids logs results runs campaigns; do [ -e "/tmp/lra/$d" ] && mv "/tmp/lra/$d" "$earlier/"; done
    echo "set aside an earlier session's files: $earlier" >&2
fi
mkdir -p "$LOGS" "$LRA_RESULTS" "$LRA_RUNS" /tmp/lra/pids "$LRA_DATA"
# Target pairs drawn ahead on another machine (`bash scripts/pack_pairs.sh TASK`: .device/data.txz for Path-X's,
# data64.txz for Path-64's, data256.txz for Path-256's, data32.txz for Pathfinder's): the draws take them and skip the
# costly part of each image (tasks/_pathfinder/targets.py; Path-X's draw 3.5x faster). Kept in $LRA_DATA while the
# machine stays warm. A call carries 64 MiB with the tree (`bash scripts/carry_size.sh PATH...` says what a call would
# hold); a drawn folder (.device/data) is taken as well, and gzip archives (.tgz) of before.
for pairs in .device/data .device/data32 .device/data64 .device/data256; do
    if [ -d "$pairs" ]; then cp -rn "$pairs"/. "$LRA_DATA"/; fi
    for archive in "$pairs.txz" "$pairs.tgz"; do
        [ ! -f "$archive" ] || python3 scripts/unpack_carry.py "$LRA_DATA" "$archive"
    done
done
left() { echo $((LIMIT - ($(date +%s) - START))); }
lra() { python3 -m lra "$@"; }
PIDS=()
bg() {  # bg NAME ARGS...: an `lra` command in the background, its output in $LOGS/NAME.log
    local name=$1; shift
    lra "$@" > "$LOGS/$name.log" 2>&1 & PIDS+=($!)
}

detach() {  # detach NAME ARGS...: an `lra` command in its own session (it outlives this call), its pid in /tmp/lra/pids
    local name=$1; shift
    # shellcheck disable=SC2086
    setsid nohup ${PIN:-} python3 -m lra "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "/tmp/lra/pids/$name.pid"
}

wait_detached() {  # wait_detached PATTERN: until every detached command named PATTERN has ended, or FLOOR (30) s are left
    local f
    for f in /tmp/lra/pids/$1.pid; do
        [ -f "$f" ] || continue
        while kill -0 "$(cat "$f")" 2> /dev/null && [ "$(left)" -gt "${FLOOR:-30}" ]; do sleep 5; done
    done
}

stop_detached() {  # stop_detached PATTERN: ask each detached command named PATTERN still running to stop (SIGTERM:
    # `lra run` and `lra campaign` save their full state at their next logging point and leave; lra.core.signals),
    # then wait for them until 15 s are left
    local f
    for f in /tmp/lra/pids/$1.pid; do
        [ -f "$f" ] && kill -TERM "$(cat "$f")" 2> /dev/null && echo "asked $(basename "$f" .pid) to stop" >&2
    done
    FLOOR=15 wait_detached "$1"
}

alive() {  # alive PATTERN: whether a detached command named PATTERN is still running
    local f
    for f in /tmp/lra/pids/$1.pid; do
        [ -f "$f" ] && kill -0 "$(cat "$f")" 2> /dev/null && return 0
    done
    return 1
}

started() { [ -f "/tmp/lra/pids/$1.pid" ]; }  # started NAME: whether this machine has started NAME already

# How busy the GPU is, every 15 s for the machine's life (logs/gpu.log comes back with every call): whether the
# chains side by side leave it room for more work beside them
[ "$DEVICE" = cpu ] || started gpu-log || {
    setsid nohup nvidia-smi --query-gpu=timestamp,utilization.gpu,power.draw,memory.used --format=csv,noheader -l 15 \
        > "$LOGS/gpu.log" 2>&1 < /dev/null &
    echo $! > /tmp/lra/pids/gpu-log.pid
}

listops_run() {  # listops_run NAME BACKEND SEED [--set ...]
    local name=$1 attn=$2 seed=$3; shift 3
    bg "$name" run listops --attn "$attn" --preset "$PRESET" --device "$DEVICE" --seed "$seed" --time-limit "$(left)s" "$@"
}

path_x() {  # issue 36's pilots, then the campaigns (see the header); TARGET path-x or path-256
    : "${CAMPAIGN_END:?set CAMPAIGN_END}"
    # shellcheck disable=SC2206
    local small=(${SMALL_DATA:-} ${SMALL:-}) name attn settings
    # The draw on all cores but 4, a bench of the idle GPU on those (BESIDE_KERNEL, BESIDE_SPEED)
    if [ -n "${BESIDE_SPEED:-}${BESIDE_KERNEL:-}" ] && ! started "prep-$TARGET"; then
        local cores draw_pin="" bench_pin=""; cores=$(nproc)
        if [ "$cores" -ge 8 ]; then draw_pin="taskset -c 4-$((cores - 1))" bench_pin="taskset -c 0-3"; fi
        PIN=$draw_pin detach "prep-$TARGET" data prepare "$TARGET" --preset curriculum --workers "${WORKERS:-$((cores - 4))}" \
            ${SMALL_DATA:-}
        [ -z "${BESIDE_KERNEL:-}" ] || PIN=$bench_pin DROPOUTS=0.1 kernel_table
        for task in ${BESIDE_SPEED:-}; do
            alive "prep-$TARGET" && [ "$(left)" -gt 120 ] || break
            PIN=$bench_pin bench_speed "$task"
        done
    fi
    # DRAW=0: no draw of the target's data here (chains of their own that will not reach it this session)
    [ "${DRAW:-1}" = 0 ] || started "prep-$TARGET" || detach "prep-$TARGET" data prepare "$TARGET" --preset curriculum \
        --workers "${WORKERS:-16}" ${SMALL_DATA:-}
    [ "${CAMPAIGN_FROM:-}" = none ] && campaigns  # a chain of its own draws its own data, stage by stage
    wait_detached "prep-$TARGET"
    if [ "$TARGET" = path-x ] && [ "${PILOTS:-1}" = 1 ] && grep -q prepared "$LOGS/prep-path-x.log"; then
        set -f  # a pilot's settings are words, never file patterns
        while read -r name attn settings; do
            [ -z "$name" ] || [ "${name:0:1}" = "#" ] || started "pilot-$name" && continue
            # shellcheck disable=SC2086
            detach "pilot-$name" run path-x --attn "${PILOT_ATTN:-$attn}" --preset curriculum --seed 0 \
                --device "$DEVICE" "${small[@]}" --set train.steps="${PILOT_STEPS:-2496}" --set train.eval_batch_size=512 \
                --time-limit "$(($(session_left) - 60))s" --set train.init_from="campaigns/$SOURCE/path-64" $settings
        done < "${PILOT_FILE:-scripts/path_x_pilots.txt}"
        set +f
    fi
    wait_detached 'pilot-*'
    alive 'pilot-*' || campaigns
    if [ "$(session_left)" -le $(($(left) + 60)) ]; then
        # the session's last call: what still runs would save after the archive is written (2026-12-05: 20 s of two
        # chains lost so), so it is asked to stop a minute before the end and the archive takes what it saved
        FLOOR=60 wait_detached 'campaign-*'
        stop_detached 'campaign-*'
        stop_detached 'pilot-*'
    fi
    wait_detached 'campaign-*'
}

bench_speed() {  # bench_speed TASK: issue 34's speed table for one task, every baseline beside compiled naive (PIN: cores)
    # shellcheck disable=SC2086
    timeout "$(left)" ${PIN:-} python3 -m lra bench train "$1" --preset "$PRESET" --device "$DEVICE" --synthetic \
        --compile max --attn "naive,$BASELINES" > "$LOGS/bench-$1.log" 2>&1
}

kernel_table() {  # issue 33's table, one `lra bench attention` run per dropout value (DROPOUTS; PIN: cores)
    # flash (and its one-pass backward) beside the SDPA kernels; with dropout also flash with the forward's registers
    # left to the compiler (maxnreg=0): the default caps them at 128 under dropout at head dim 8 since two H100 runs
    # (docs/flash_kernel.md, v8), and this keeps the uncapped kernel measured beside it; without dropout also the
    # tiles head dim 8 takes under dropout (v5: 64 x 64, backward 32 x 64), which it left without dropout in v9
    local p variant
    for p in ${DROPOUTS:-0.1 0}; do
        variant=",flash@maxnreg=0"
        [ "$p" != 0 ] || variant=",flash@block_m=64@block_n=64@bwd_block_n=64"
        # shellcheck disable=SC2086
        timeout "$(left)" ${PIN:-} python3 -m lra bench attention --device "$DEVICE" --dropout "$p" \
            --seq "${SEQS:-1k,4k,16k}" --head-dim "${HEAD_DIMS:-8,16}" \
            --attn "flash,flash@deterministic=false$variant,${PEERS:-sdpa_flash,sdpa_cudnn}" ${KERNEL_ARGS:-} \
            > "$LOGS/kernel-p$p.log" 2>&1
    done
    [ -n "${KERNEL_TRAIN:-}" ] || return 0
    # KERNEL_TRAIN=1: the issue's training targets, each compiled (max) on synthetic tokens: Path-X's fa-paper step,
    # block_sparse_flash at the preset's batch 512 and flash beside sdpa_flash at batch 64, then Pathfinder's
    local task attn batch
    while read -r task attn batch; do
        [ "$(left)" -gt 60 ] || break
        # shellcheck disable=SC2086
        timeout "$(left)" ${PIN:-} python3 -m lra bench train "$task" --preset "$PRESET" --device "$DEVICE" \
            --synthetic --compile "${KERNEL_COMPILE:-max}" --attn "$attn" ${batch:+--set train.batch_size=$batch} \
            ${KERNEL_TRAIN_ARGS:-} < /dev/null > "$LOGS/kernel-train-$task-${attn%%,*}.log" 2>&1
    done <<'STEPS'
path-x block_sparse_flash
path-x flash,sdpa_flash 64
pathfinder flash,sdpa_flash
STEPS
}

session_left() { echo $((CAMPAIGN_END - ($(date +%s) - START))); }  # seconds to the session's end, now

line_source() {  # line_source NAME [SETTINGS...]: the campaigns/ folder a campaign line starts from (none: scratch)
    local name=$1; shift
    if [ "${1:-}" = --from ]; then echo "$2"; return; fi  # the line's own source
    local source=${CAMPAIGN_FROM:-$SOURCE}
    [ "$source" = own ] && source=path-x-$name  # the line's own Path-X chain (the seeds' Path-256 stages)
    echo "$source"
}

bring_state() {  # bring_state NAME: the committed campaigns/NAME (a folder, or packed: NAME.txz) into /tmp/lra/campaigns
    # where this machine has no copy as far on (one that ran in this session is ahead or level); a copy behind it, an
    # earlier session's left on a machine lent again, is set aside (resuming it would train those steps twice)
    local name=$1 committed=campaigns/$1.txz
    [ -f "$committed" ] || committed=campaigns/$name  # take_back.sh packs states; folders: sources, older states
    [ -e "$committed" ] || return 0
    if [ -d "/tmp/lra/campaigns/$name" ]; then
        [ "$(python3 scripts/state_steps.py "/tmp/lra/campaigns/$name")" -lt \
            "$(python3 scripts/state_steps.py "$committed")" ] || return 0
        mv "/tmp/lra/campaigns/$name" "/tmp/lra/campaigns-behind-$START-$name"
        echo "set aside /tmp/lra/campaigns/$name: behind the committed $committed" >&2
    fi
    if [ -d "$committed" ]; then
        cp -r "$committed" "/tmp/lra/campaigns/$name"
    else
        python3 scripts/unpack_carry.py /tmp/lra/campaigns "$committed"
    fi
}

taken_here() {  # taken_here TARGET-NAME: whether this machine's chain TARGET-NAME runs or has ended, so that no call
    # starts it again; one that stopped short of its end (at its time limit, which the call that started it set:
    # session 25's fourth call found flash-s1 stopped so, with session time left) starts again, its log kept aside
    local name=$1
    started "campaign-$name" || return 1
    alive "campaign-$name" && return 0
    [ "$(python3 scripts/state_steps.py --done "/tmp/lra/campaigns/$name")" != 0 ] && return 0
    mv "$LOGS/campaign-$name.log" "$LOGS/campaign-$name.before-$START.log" 2> /dev/null || true
    return 1
}

campaigns() {  # start CAMPAIGN_FILE's campaigns, each as TARGET-NAME (--from its source, or a chain of its own)
    [ "${CAMPAIGNS:-1}" = 1 ] || return 0
    local name attn settings state source from
    mkdir -p /tmp/lra/campaigns
    set -f  # a campaign's settings are words, never file patterns
    while read -r name attn settings; do
        [ -z "$name" ] || [ "${name:0:1}" = "#" ] || taken_here "$TARGET-$name" && continue
        if [ "${SERIAL:-0}" = 1 ]; then  # one chain at a time, in the file's order (see the header)
            set +f  # the pid files' pattern
            FLOOR=120 wait_detached 'campaign-*'
            alive 'campaign-*' && break  # still running as this call ends: the next call starts the next line
            set -f
            [ "$(session_left)" -gt 180 ] || break  # too little left to start a chain (its start costs ~40 s)
        fi
        # shellcheck disable=SC2086
        source=$(line_source "$name" $settings) from=()
        [ "${settings%% *}" != --from ] || read -r _ _ settings <<< "$settings"
        state=/tmp/lra/campaigns/$TARGET-$name
        bring_state "$TARGET-$name"
        # --from is read only when the campaign starts: a chain under way needs no source (it may be gone by then)
        if [ "$source" != none ] && [ ! -f "$state/campaign.json" ]; then
            bring_state "$source"  # this machine's copy where it is as far on: a chain that ended in this session
            from=(--from "/tmp/lra/campaigns/$source")
        fi
        # shellcheck disable=SC2086
        detach "campaign-$TARGET-$name" campaign "$TARGET" --attn "${CAMPAIGN_ATTN:-$attn}" --state "$state" "${from[@]}" \
            --device "$DEVICE" --workers 15 --time-limit "$(session_left)s" ${SMALL:-} $settings
    done < "${CAMPAIGN_FILE:-scripts/${TARGET//-/_}_campaigns.txt}"
    set +f
}

case $PHASE in
baselines)
    # carry the task's archive (.device/aclImdb_v1.tar.gz or .device/cifar10_jpeg.tar.gz, copied from ../shared/data);
    # the runs an earlier machine left unfinished come with the tree (leaderboard/in_flight/sweeps.txz, committed by
    # scripts/take_back.sh) and resume here (a run this machine already holds keeps its own files)
    kept=leaderboard/in_flight/sweeps.txz
    [ ! -f "$kept" ] || python3 scripts/unpack_carry.py /tmp/lra "$kept"
    for task in ${BASELINE_TASKS:-text}; do
        from=()
        [ "$task" = text ] && from=(--from .device/aclImdb_v1.tar.gz)
        [ "$task" = image ] && from=(--from .device/cifar10_jpeg.tar.gz)
        lra data prepare "$task" --preset "$PRESET" --workers 16 "${from[@]}" > "$LOGS/prep-$task.log" 2>&1
    done
    # BASELINE_GROUPS="ATTNS:SEEDS[:TASKS[:PER_GPU]] ..." runs one sweep a group side by side (TASKS comma-separated,
    # default BASELINE_TASKS, whose data is prepared above; PER_GPU runs of the group at once), so that leftover seeds
    # fill the GPU together, e.g. BASELINE_TASKS="text listops"
    # BASELINE_GROUPS="sinkhorn:0-2 local:1-2 reformer:0-2:listops:2"
    for group in ${BASELINE_GROUPS:-$BASELINES:${SEEDS:-0-2}}; do
        IFS=: read -r attns seeds tasks per_gpu <<< "$group"
        tasks=${tasks:-$(echo ${BASELINE_TASKS:-text} | tr ' ' ,)}
        timeout "$(left)" python3 -m lra sweep --tasks "$tasks" --preset "$PRESET" --attn "$attns" --seeds "$seeds" \
            --per-gpu "${per_gpu:-${PER_GPU:-4}}" --root /tmp/lra/sweeps --device "$DEVICE" \
            --time-limit "$(($(left) - 30))s" --skip-recorded leaderboard/results \
            > "$LOGS/sweep-${tasks//,/+}-${attns%%,*}-$seeds.log" 2>&1 &
        PIDS+=($!)
    done
    ;;
kernel)
    kernel_table
    ;;
listops-reruns)
    lra data prepare listops --preset "$PRESET" --workers 16 > "$LOGS/prep-listops.log" 2>&1
    for seed in 0 1 2; do
        listops_run "listops-reformer-s$seed" reformer "$seed"
        listops_run "listops-local-s$seed" local "$seed"
    done
    listops_run listops-linear-unnormalised-s0 linear 0 --set attention.linear.normalize=false
    listops_run listops-performer-zeroed-s0 performer 0 \
        --set attention.performer.pad_keys=zeroed --set attention.performer.scale=0.03125
    ;;
listops-seeds)
    lra data prepare listops --preset "$PRESET" --workers 16 > "$LOGS/prep-listops.log" 2>&1
    for attn in smyrf bigbird sinkhorn longformer sparse_transformer; do
        for seed in 1 2; do listops_run "listops-$attn-s$seed" "$attn" "$seed"; done
    done
    listops_run listops-linformer-s2 linformer 2
    ;;
listops-performer)
    lra data prepare listops --preset "$PRESET" --workers 16 > "$LOGS/prep-listops.log" 2>&1
    # the CPU pilot's performer (docs/baselines.md): with 64 features in fp32, drawn once it left the plateau and fell
    # back; redrawn every step, or with the relu kernel, it held
    for variant in redraw_every=0 redraw_every=1 kernel=relu; do
        listops_run "listops-performer-f64-${variant/=/}-s0" performer 0 --set attention.performer.nb_features=64 \
            --set "attention.performer.$variant" --set train.amp=none --set train.steps=30000 --set train.eval_every=250
    done
    ;;
speed)
    for task in ${SPEED_TASKS:-listops text retrieval image pathfinder}; do
        [ "$(left)" -gt 120 ] || break
        bench_speed "$task"
    done
    [ "$(left)" -gt 60 ] && timeout "$(left)" python3 -m lra bench train listops --preset fa-paper --synthetic \
        --compile max --attn linformer,nystrom --set attention.nystrom.conv_kernel_size=null \
        > "$LOGS/bench-listops-nystrom-noconv.log" 2>&1
    ;;
path-x | path-256)
    TARGET=$PHASE path_x
    ;;
*)
    echo "unknown phase $PHASE (baselines, kernel, listops-reruns, listops-seeds, listops-performer, speed, path-x," \
        "path-256)" >&2
    exit 2
    ;;
esac

for pid in "${PIDS[@]}"; do wait "$pid"; done
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name --format=csv,noheader
grep -H -E "record:|resume with|rror" "$LOGS"/*.log | tail -n 40
# A call brings back at most 8 files of 16 MiB, 64 MiB in all: the archive comes back in 15 MiB parts
# (back.txz.part0, ...; take_back.sh joins them). The campaigns' --from sources are read, never written: they stay out,
# CAMPAIGN_FROM's and the lines' own `--from FOLDER`s (with CAMPAIGN_FROM=own the lines' own Path-X chains still come
# back: unchanged, take_back.sh commits nothing new; ended in this session, their final state).
# xz at its largest window (scripts/pack_xz.py): a Path-256 state packs to ~7.5 MB where gzip made 31 (two side by side
# were over the 64 MiB), in ~7 s on one core.
leave_out=(--leave-out "campaigns/$SOURCE" --leave-out "campaigns/${CAMPAIGN_FROM:-$SOURCE}")
if [ "$PHASE" = path-x ] || [ "$PHASE" = path-256 ]; then  # and the sources that lines name with --from
    set -f
    while read -r name attn settings; do
        [ -z "$name" ] || [ "${name:0:1}" = "#" ] || [ "${settings%% *}" != --from ] && continue
        # shellcheck disable=SC2086
        leave_out+=(--leave-out "campaigns/$(line_source "$name" $settings)")
    done < "${CAMPAIGN_FILE:-scripts/${PHASE//-/_}_campaigns.txt}"
    set +f
fi
# The sweeps' unfinished runs (a checkpoint, no summary.json; a Text run of fa-paper ~2.5 MB) come back too, so that
# a later session on a new machine resumes them (scripts/take_back.sh) instead of starting them again. A run over
# MAX_RUN_MB (24) stays out: a `--preset fly` ListOps run's state is ~145 MB (LRA's 4 x 512 model, 9.0 M parameters,
# in best.pt and in last.pt with Adam's moments), which would take the archive past what a call brings back, and the
# tree past what the next one carries; it resumes on this machine's later calls only (docs/baselines.md, "Next device
# sessions for issue 34")
unfinished=()
for run in /tmp/lra/sweeps/*/*/*/s*; do
    [ -f "$run/last.pt" ] && [ ! -f "$run/summary.json" ] || continue
    size=$(du -sm "$run" | cut -f1)
    if [ "$size" -gt "${MAX_RUN_MB:-24}" ]; then
        echo "left out of the archive: ${run#/tmp/lra/sweeps/}, unfinished (${size} MB, over MAX_RUN_MB): it resumes" \
            "only on this machine" >&2
        continue
    fi
    unfinished+=("$run=sweeps/${run#/tmp/lra/sweeps/}")
done
python3 scripts/pack_xz.py /tmp/lra/back.txz "${leave_out[@]}" /tmp/lra/results=results /tmp/lra/logs=logs \
    /tmp/lra/campaigns=campaigns ${unfinished[@]+"${unfinished[@]}"}
[ "$(stat -c %s /tmp/lra/back.txz)" -le $((60 * 1024 * 1024)) ] || echo "WARNING: the archive is over 60 MiB" >&2
split -b 15M -d -a 1 /tmp/lra/back.txz "$OUT/back.txz.part"
ls -la "$OUT"
