#!/usr/bin/env bash
# The lead's H200 runs (2 GPUs, one call per phase). Usage on the device, from the repo root:
#   bash notes/gpu/lead_session.sh call1|call2 [seconds]
# Runs go under runs/gpu (kept on a warm machine between calls, so --resume can continue them); records go to
# $OUT/results and come back as one tarball with the logs.
set -u
PHASE=$1
BUDGET=${2:-540}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LRA_DATA=$PWD/runs/data LRA_RESULTS=$PWD/runs/results LRA_QUIET=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 COLUMNS=200
mkdir -p runs/gpu runs/results "$OUT"
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
lra() { python3 -m lra "$@"; }
log() { echo "[$(date +%H:%M:%S) +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/session.log"; }
gpu0() { CUDA_VISIBLE_DEVICES=0 "$@"; }
gpu1() { CUDA_VISIBLE_DEVICES=1 "$@"; }

finish() {
  log "packing results"
  tar czf "$OUT/results.tgz" -C runs results $(cd runs && ls gpu/*/summary.json gpu/*/metrics.jsonl 2>/dev/null)
  nvidia-smi --query-gpu=name,memory.used --format=csv >> "$OUT/session.log" 2>&1
}

EXACT=naive,flash,block_sparse_flash,sdpa_flash,sdpa_cudnn,flex
APPROX=linformer,performer,linear,local,reformer,smyrf,nystrom,synthesizer,sinkhorn,bigbird,longformer,sparse_transformer

if [ "$PHASE" = call1 ]; then
  log "start $(nvidia-smi -L | tr '\n' ' ')"
  lra data prepare listops --workers 16 > "$OUT/prep.log" 2>&1
  ( gpu0 timeout $(( $(left) - 20 )) python3 -m lra run listops --attn flash --out runs/gpu/listops-flash > "$OUT/listops-flash.log" 2>&1
    log "flash listops rc=$?"
    gpu0 timeout $(( $(left) - 20 )) python3 -m lra run listops --attn sdpa_flash --out runs/gpu/listops-sdpa_flash > "$OUT/listops-sdpa_flash.log" 2>&1
    log "sdpa_flash listops rc=$?" ) &
  ( gpu1 timeout $(( $(left) - 20 )) python3 -m lra run listops --attn naive --out runs/gpu/listops-naive > "$OUT/listops-naive.log" 2>&1
    log "naive listops rc=$?" ) &
  wait
  finish
  exit 0
fi

if [ "$PHASE" = call2 ]; then
  log "start"
  # continue the accuracy runs on GPU 1 while GPU 0 benchmarks
  ( for b in naive sdpa_flash; do
      d=runs/gpu/listops-$b
      if [ -f $d/last.pt ] && [ ! -f $d/summary.json ]; then
        gpu1 timeout $(( $(left) - 150 )) python3 -m lra run listops --attn $b --out $d --resume >> "$OUT/listops-$b.log" 2>&1
        log "resume $b rc=$?"
      fi
    done
    gpu1 timeout 120 python3 -m lra run path-x --attn block_sparse_flash --out runs/gpu/pathx-bsf \
      --set data.num_train=2048 --set data.num_val=256 --set data.num_test=256 --set train.steps=200 \
      --set train.eval_every=100 > "$OUT/pathx-bsf.log" 2>&1
    log "path-x block_sparse_flash run rc=$?" ) &
  # data for the benchmarks (small splits: only timing)
  SMALL="--set data.num_train=1024 --set data.num_val=64 --set data.num_test=64"
  lra data prepare text --from .carry/aclImdb_v1.tar.gz --workers 8 > "$OUT/prep2.log" 2>&1
  lra data prepare image --from .carry/cifar10_jpeg.tar.gz --workers 8 >> "$OUT/prep2.log" 2>&1
  for t in pathfinder path-x path-256; do lra data prepare $t $SMALL --workers 16 >> "$OUT/prep2.log" 2>&1; done
  log "data ready"
  B="--steps 10 --warmup 3 --device cuda"
  for t in listops text image pathfinder path-x path-256; do
    extra=""; case $t in pathfinder|path-x|path-256) extra=$SMALL;; esac
    gpu0 timeout 150 python3 -m lra bench train $t --attn $EXACT $B $extra > "$OUT/bench-$t.log" 2>&1
    log "bench $t rc=$?"
  done
  gpu0 timeout 100 python3 -m lra bench train retrieval --synthetic --attn $EXACT $B > "$OUT/bench-retrieval.log" 2>&1
  log "bench retrieval rc=$?"
  for t in listops text; do
    gpu0 timeout 120 python3 -m lra bench train $t --attn naive,$APPROX $B > "$OUT/bench-$t-approx.log" 2>&1
    log "bench $t approx rc=$?"
  done
  wait
  finish
  exit 0
fi
echo "unknown phase $PHASE"; exit 2
