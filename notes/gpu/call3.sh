#!/usr/bin/env bash
# Short follow-up: why the resumes failed, re-run the benchmarks that stopped at flex's refusal, pack everything.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LRA_DATA=$PWD/runs/data LRA_RESULTS=$PWD/runs/results LRA_QUIET=1 COLUMNS=200
CUDA_VISIBLE_DEVICES=1 timeout 25 python3 -m lra run listops --attn naive --out runs/gpu/listops-naive --resume > $OUT/resume.log 2>&1
B="--steps 8 --warmup 2 --device cuda --attn naive,flash,block_sparse_flash,sdpa_flash,sdpa_cudnn"
S="--set data.num_train=1024 --set data.num_val=64 --set data.num_test=64"
( CUDA_VISIBLE_DEVICES=0 timeout 70 python3 -m lra bench train listops $B > $OUT/b1.log 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 70 python3 -m lra bench train image $B >> $OUT/b1.log 2>&1 ) &
( CUDA_VISIBLE_DEVICES=1 timeout 70 python3 -m lra bench train text $B > $OUT/b2.log 2>&1
  CUDA_VISIBLE_DEVICES=1 timeout 70 python3 -m lra bench train path-x $B $S >> $OUT/b2.log 2>&1 ) &
wait
CUDA_VISIBLE_DEVICES=0 timeout 40 python3 -m lra bench train retrieval --synthetic $B > $OUT/b3.log 2>&1
tar czf $OUT/r.tgz -C runs results $(cd runs && ls gpu/*/summary.json gpu/*/metrics.jsonl gpu/*/config.json 2>/dev/null)
tail -3 $OUT/resume.log; grep -h "│" $OUT/b*.log | cut -c1-150
