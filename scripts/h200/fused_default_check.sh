#!/usr/bin/env bash
# Device call (issues #2, #3, #8), session 6, after the one-pass dropout backward became the default
# with its own dK/dV tiles (kernels/ops.py, kernels/tiles.py): the cells the previous call
# (fused_tiles_augment.sh, paper batch only) left out.
# Lane 0: the small batch regime (32K tokens per batch), eager and compiled, flash vs sdpa, 1K-16K.
# Lane 1: flash_sparse (block-sparse, BigBird layout) at the paper batch, compiled, with the default
# (one-pass) and the split dropout backward; then the CUDA kernel tests on the GPU.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=330 bash scripts/h200/fused_default_check.sh
RECIPE=fused_default_check
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --seq-lens 1024 4096 16384)

lane0() {
  say "model step, small batch, eager and compiled: flash (default backward) and sdpa"
  timeout -k 5 "$(left 5)" "${MB[@]}" --regimes small --modes eager compiled --attentions flash sdpa \
      --out "$WORK/models_small.csv"
  say "lane 0 done"
}

lane1() {
  local mode
  for mode in fused split; do
    say "model step, paper batch, compiled: flash_sparse, backward $mode"
    LRA_DROPOUT_BWD=$mode timeout -k 5 "$(left 120)" "${MB[@]}" --regimes paper --modes compiled \
        --attentions flash_sparse --out "$WORK/models_sparse_$mode.csv"
  done
  say "CUDA kernel tests"
  timeout -k 5 "$(left 5)" python3 -m pytest -q -x tests/kernels -p no:cacheprovider > "$WORK/pytest_kernels.log" 2>&1
  tail -3 "$WORK/pytest_kernels.log"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
