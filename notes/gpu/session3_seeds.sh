#!/usr/bin/env bash
# Follow-up to session3.sh: is flash's slow ListOps start (17.5% val at step 500, where naive and block_sparse_flash
# had 35%) a property of the backend or of the seed? Short prefixes (the rsqrt schedule does not depend on
# train.steps, so these are the first steps of the full runs) of more seeds, on two GPUs.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LRA_DATA=$PWD/runs/data LRA_RESULTS=$PWD/runs/results LRA_QUIET=1
mkdir -p runs/gpu runs/results runs/logs "$OUT"
T=${1:-165}
python3 -m lra data prepare listops --workers 32 > runs/logs/prep.log 2>&1
S="--set train.steps=1000"
( for r in "flash 1" "flash 2" "sdpa_flash 0"; do set -- $r
    CUDA_VISIBLE_DEVICES=0 timeout $(( T - SECONDS )) python3 -m lra run listops --attn $1 --seed $2 $S \
      --out runs/gpu/listops-$1-s$2 > runs/logs/listops-$1-s$2.log 2>&1; done ) &
( for r in "naive 1" "block_sparse_flash 1"; do set -- $r
    CUDA_VISIBLE_DEVICES=1 timeout $(( T - SECONDS )) python3 -m lra run listops --attn $1 --seed $2 \
      --set train.steps=600 --out runs/gpu/listops-$1-s$2 > runs/logs/listops-$1-s$2.log 2>&1; done ) &
wait
tar czf "$OUT/seeds.tgz" -C runs results logs $(cd runs && ls gpu/*/metrics.jsonl 2>/dev/null)
grep -h "step 500\|done" runs/logs/listops-*.log
