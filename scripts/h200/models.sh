#!/usr/bin/env bash
# Device call 2 (issues #6, #8): DDP on two GPUs, then the model-level benchmark.
#   both GPUs: ListOps `paper` with flash under DDP: 2 x 16 per step (the single-GPU run's global
#              batch of 32, so the learning curves compare), then 2 x 32 for 1,500 steps (throughput)
#   lane 0: `lra bench models`, eager, small and paper batch regimes, flash / flash_sparse / sdpa / softmax
#   lane 1: the same compiled; dropout off (its cost); the approximate baselines; 32K and 64K
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> bash scripts/h200/models.sh
RECIPE=models
source "$(dirname "$0")/lib.sh"

ddp() {
  say "ListOps data"
  lra data generate listops --out "$DATA" --workers 16 || return
  say "DDP 2 GPUs, global batch 32 (2 x 16), the paper's 5,000 steps"
  timeout 200 python3 -m lra train --task listops --attention flash --preset paper --devices 2 --strategy ddp \
      --runs-dir "$RUNS" --data-dir "$DATA" --no-progress train.batch_size=16
  say "DDP 2 GPUs, 2 x 32 per step, 1,500 steps (throughput scaling)"
  timeout 90 python3 -m lra train --task listops --attention flash --preset paper --devices 2 --strategy ddp \
      --runs-dir "$RUNS" --data-dir "$DATA" --no-progress train.max_steps=1500 train.val_check_interval=500
  say "the same on 1 GPU (throughput reference)"
  CUDA_VISIBLE_DEVICES=0 timeout 80 python3 -m lra train --task listops --attention flash --preset paper \
      --devices 1 --runs-dir "$RUNS" --data-dir "$DATA" --no-progress train.max_steps=1500 train.val_check_interval=500
  say "DDP done"
}

bench() { timeout "$(left 5)" python3 -m lra bench models "$@"; }

lane0() {
  say "eager, small + paper regimes"
  bench --attentions flash sdpa softmax flash_sparse --regimes small paper --modes eager \
      --seq-lens 1024 2048 4096 8192 16384 --out "$WORK/models_eager.csv"
  say "lane 0 done"
}

lane1() {
  say "eager, small regime, attention dropout 0"
  bench --attentions flash sdpa --regimes small --modes eager --seq-lens 1024 4096 16384 --attention-dropout 0 \
      --out "$WORK/models_nodropout.csv"
  say "compiled, small regime"
  bench --attentions flash sdpa softmax flash_sparse --regimes small --modes compiled --seq-lens 1024 4096 16384 \
      --out "$WORK/models_compiled.csv"
  say "approximate baselines + long lengths, eager, small regime"
  bench --attentions performer linformer bigbird flash flash_sparse --regimes small --modes eager \
      --seq-lens 1024 4096 16384 --long-seq-lens 32768 65536 --out "$WORK/models_long.csv"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
(( NGPU >= 2 )) && ddp > "$WORK/ddp.log" 2>&1
run_lanes lane0 lane1
for f in $(find "$RUNS/listops" -name result.json 2>/dev/null); do
  cp "$f" "$WORK/result_$(basename "$(dirname "$f")").json"
done
pack
