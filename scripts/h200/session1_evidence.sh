#!/usr/bin/env bash
# GPU evidence in one device call: ListOps `paper` run with flash (issue 6), Path-256 end to end with
# flash_sparse (issue 7) and the model-level benchmark rows for the exact attentions (issue 8).
# Usage: OUT=/some/dir [LRA_GIT_REV=...] bash scripts/h200/session1_evidence.sh
# Everything lands flat in $OUT (the device tool returns at most 8 files, two folders deep).
set -uo pipefail
OUT=${OUT:?set OUT}
RUNS=${RUNS:-/tmp/lra-runs}
DATA=${DATA:-/tmp/lra-data}
export PYTHONUNBUFFERED=1
lra() { python3 -m lra "$@"; }
log=$OUT/evidence.log
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  lra info
  echo "== ListOps paper / flash"
  timeout "${LISTOPS_S:-260}" python3 -m lra train --task listops --attention flash --preset paper \
      --runs-dir "$RUNS" --data-dir "$DATA" --no-progress
  echo "== Path-256 / flash_sparse (scaled down: few images, few steps)"
  lra data generate path256 --n "${P256_N:-192}" --workers 16 --out "$DATA" || true
  timeout "${P256_S:-120}" python3 -m lra train --task path256 --attention flash_sparse --preset paper \
      --runs-dir "$RUNS" --data-dir "$DATA" --no-progress --no-compile \
      train.batch_size=8 train.accumulate_grad_batches=1 train.max_steps="${P256_STEPS:-24}" \
      train.val_check_interval=12 data.limit_train=128 data.limit_eval=32 optim.warmup_steps=4
  echo "== model benchmark (eager, small regime)"
  timeout "${BENCH_S:-120}" python3 -m lra bench models --attentions flash flash_sparse sdpa softmax \
      --regimes small --modes eager --seq-lens 1024 4096 16384 --out "$OUT/bench_models_h200.csv"
} 2>&1 | tee "$log"
i=0
for f in $(find "$RUNS" -name result.json); do
  i=$((i+1)); cp "$f" "$OUT/result_$(basename "$(dirname "$(dirname "$f")")")_$(basename "$(dirname "$(dirname "$(dirname "$f")")")")_$i.json"
done
