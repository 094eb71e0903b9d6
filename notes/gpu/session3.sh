#!/usr/bin/env bash
# Third H200 session (2 GPUs): scaling (issue 9), ListOps accuracy with naive/flash/block_sparse_flash (issue 8),
# the numerics study (issue 7), Path-256 and flex bench rows (issue 8). Usage on the device, from the repo root:
#   bash notes/gpu/session3.sh A|B|C [seconds]
# A: data, 1 -> 2 GPU scaling, then naive ListOps detached on GPU 0 (setsid: it outlives the call on a warm machine)
#    and the forward numerics on GPU 1.  B (GPU 1; naive still on GPU 0): weights numerics, flash ListOps, outlier
#    inputs.  C (GPU 1): Path-256 bench, flex rows, block_sparse_flash ListOps if time allows, then wait for naive.
# Records' git_commit: the device's copy of .git is stale; start the command with LRA_GIT_COMMIT=<hash> next time.
# Everything lives under runs/ (kept on a warm machine); each phase returns all records and logs as one tarball.
set -u
PHASE=$1
BUDGET=${2:-560}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LRA_DATA=$PWD/runs/data LRA_RESULTS=$PWD/runs/results LRA_QUIET=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 COLUMNS=200
export CUBLAS_WORKSPACE_CONFIG=:4096:8
mkdir -p runs/gpu runs/results runs/logs "$OUT"
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "[$(date +%H:%M:%S) $PHASE +$(( $(date +%s) - START ))s] $*" | tee -a runs/logs/session.log; }
lra() { python3 -m lra "$@"; }
gpu1() { CUDA_VISIBLE_DEVICES=1 "$@"; }
pack() {
  log "packing"
  nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu --format=csv >> runs/logs/session.log 2>&1
  tar czf "$OUT/results.tgz" -C runs results logs $(cd runs && ls gpu/*/summary.json gpu/*/metrics.jsonl 2>/dev/null)
}
SMALL="--set data.num_train=1024 --set data.num_val=64 --set data.num_test=64"
NAIVE_DIR=runs/gpu/listops-naive

if [ "$PHASE" = A ]; then
  log "start $(nvidia-smi -L | tr '\n' ' ')"
  lra data prepare listops --workers 32 > runs/logs/prep.log 2>&1
  lra data prepare path-x $SMALL --workers 32 >> runs/logs/prep.log 2>&1
  log "data ready rc=$?"
  # issue 9: the same bench with 1 and 2 processes, both GPUs otherwise idle
  for n in 1 2; do
    CUDA_VISIBLE_DEVICES=0,1 timeout 120 python3 -m lra bench train listops --attn flash --steps 40 --warmup 8 \
      --nproc $n > runs/logs/scale-listops-$n.log 2>&1
    log "scale listops nproc=$n rc=$?"
    CUDA_VISIBLE_DEVICES=0,1 timeout 120 python3 -m lra bench train path-x --attn flash --steps 20 --warmup 5 \
      $SMALL --nproc $n > runs/logs/scale-pathx-$n.log 2>&1
    log "scale path-x nproc=$n rc=$?"
  done
  # issue 8: naive ListOps to completion on GPU 0, detached from this call
  CUDA_VISIBLE_DEVICES=0 setsid nohup python3 -m lra run listops --attn naive --out $NAIVE_DIR \
    > runs/logs/listops-naive.log 2>&1 < /dev/null &
  log "naive listops started"
  # issue 7: forward deviation vs fp64 across dtypes, lengths and tiles
  gpu1 timeout $(( $(left) - 15 )) python3 -m lra numerics forward --device cuda --no-plots --draws 3 \
    --attn naive,flash,block_sparse_flash,sdpa_flash,sdpa_cudnn,flex --dtype fp64,fp32,fp16,bf16 \
    --seq 512,1k,2k,4k,8k,16k --tiles default,128x64,64x128 > runs/logs/numerics-forward.log 2>&1
  log "numerics forward rc=$?"
  pack
  exit 0
fi

if [ "$PHASE" = B ]; then
  log "start; naive at: $(tail -c 300 runs/logs/listops-naive.log | tr '\r\n' '  ')"
  gpu1 timeout 240 python3 -m lra numerics weights listops --preset tiny --device cuda --no-plots \
    --set train.steps=3000 --set train.eval_every=250 > runs/logs/numerics-weights.log 2>&1
  log "numerics weights rc=$?"
  gpu1 timeout $(( $(left) - 75 )) python3 -m lra run listops --attn flash --out runs/gpu/listops-flash \
    > runs/logs/listops-flash.log 2>&1
  log "flash listops rc=$?"
  gpu1 timeout $(( $(left) - 10 )) python3 -m lra numerics forward --device cuda --no-plots --draws 3 \
    --inputs outlier --attn naive,flash,sdpa_flash,sdpa_cudnn --dtype fp32,bf16 --seq 1k,4k,16k \
    > runs/logs/numerics-outlier.log 2>&1
  log "numerics outlier rc=$?"
  pack
  exit 0
fi

if [ "$PHASE" = C ]; then
  log "start; naive at: $(tail -c 300 runs/logs/listops-naive.log | tr '\r\n' '  ')"
  lra data prepare path-256 $SMALL --workers 24 > runs/logs/prep256.log 2>&1
  gpu1 timeout 150 python3 -m lra bench train path-256 $SMALL --steps 5 --warmup 2 \
    --attn naive,flash,block_sparse_flash,sdpa_flash,sdpa_cudnn,flex > runs/logs/bench-path-256.log 2>&1
  log "bench path-256 rc=$?"
  for t in listops text retrieval image pathfinder path-x; do
    gpu1 timeout 30 python3 -m lra bench train $t --synthetic --steps 3 --warmup 1 --attn flex \
      > runs/logs/bench-flex-$t.log 2>&1
    log "bench flex $t rc=$?"
  done
  if [ "$(left)" -gt 230 ]; then
    gpu1 timeout $(( $(left) - 15 )) python3 -m lra run listops --attn block_sparse_flash \
      --out runs/gpu/listops-block_sparse_flash > runs/logs/listops-bsf.log 2>&1
    log "block_sparse_flash listops rc=$?"
  fi
  log "waiting for naive"
  while [ ! -f $NAIVE_DIR/summary.json ] && [ "$(left)" -gt 20 ] && pgrep -f "attn naive" > /dev/null; do sleep 5; done
  log "naive done=$( [ -f $NAIVE_DIR/summary.json ] && echo yes || echo no )"
  pack
  exit 0
fi
echo "unknown phase $PHASE"; exit 2
