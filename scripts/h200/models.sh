#!/usr/bin/env bash
# Device call 2 (issues #6, #8): the model-level benchmark, and (DDP=1) ListOps under DDP.
#   DDP=1, both GPUs first: ListOps `paper` with flash under DDP, 2 x 16 per step (the single-GPU
#          run's global batch of 32, so the learning curves compare); done in session 2
#   lane 0: `lra bench models`, eager, small and paper batch regimes, flash / sdpa / softmax /
#           flash_sparse at 1K-16K; then flash and sdpa with attention dropout 0 (the cost of dropout)
#   lane 1: the same compiled (small regime; COMPILED=0 leaves it out); the approximate baselines
#           and 32K / 64K, eager
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> [DDP=1] [COMPILED=0] bash scripts/h200/models.sh
RECIPE=models
source "$(dirname "$0")/lib.sh"

ddp() {
  say "ListOps data"
  lra data generate listops --out "$DATA" --workers 16 || return
  say "DDP 2 GPUs, global batch 32 (2 x 16), the paper's 5,000 steps"
  # -k: a DDP rank that ignores SIGTERM (blocked in a collective) must not hang the whole call
  timeout -k 10 "${DDP_S:-230}" python3 -m lra train --task listops --attention flash --preset paper --devices 2 \
      --strategy ddp --runs-dir "$RUNS" --data-dir "$DATA" --no-progress train.batch_size=16
  say "DDP done"
}

bench() { timeout -k 5 "$(left 5)" python3 -m lra bench models "$@"; }

lane0() {
  say "eager, small + paper regimes"
  bench --attentions flash sdpa softmax flash_sparse --regimes small paper --modes eager \
      --seq-lens 1024 2048 4096 8192 16384 --out "$WORK/models_eager.csv"
  say "eager, small regime, attention dropout 0"
  bench --attentions flash sdpa --regimes small --modes eager --seq-lens 1024 4096 16384 --attention-dropout 0 \
      --out "$WORK/models_nodropout.csv"
  say "lane 0 done"
}

lane1() {
  if [[ "${COMPILED:-1}" == 1 ]]; then
    say "compiled, small regime"
    bench --attentions flash sdpa softmax flash_sparse --regimes small --modes compiled --seq-lens 1024 4096 16384 \
        --out "$WORK/models_compiled.csv"
  fi
  say "approximate baselines + long lengths, eager, small regime"
  bench --attentions performer linformer bigbird flash flash_sparse --regimes small --modes eager \
      --seq-lens 1024 2048 4096 8192 16384 --long-seq-lens 32768 65536 --out "$WORK/models_long.csv"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
if [[ "${DDP:-0}" == 1 ]] && (( NGPU >= 2 )); then ddp > "$WORK/ddp.log" 2>&1; fi
run_lanes lane0 lane1
collect_results "$RUNS/listops"
cp "$WORK/ddp.log" "$OUT/" 2>/dev/null
pack
