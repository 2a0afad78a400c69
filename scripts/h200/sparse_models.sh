#!/usr/bin/env bash
# Device call (issues #3, #8), prepared in session 8, run in session 9: the model-level step with the
# block-sparse loops pipelined (git 6a50bea: the list index carried one step ahead) and the
# block-sparse host-time caching — flash_sparse (BigBird layout, the registry's default) against
# flash and sdpa (cuDNN), the `paper` model, 1K / 4K / 16K.
#   GPU 0: paper batch (262,144 tokens per step), eager and compiled;
#   GPU 1: small batch (32,768 tokens per step), eager and compiled.
# Run after scripts/h200/sparse_grid.sh (whose header has its call) has re-tuned the block-sparse
# tiles, and with the tiles it chose committed.
# Usage (device, kind nvidia-h200-x2): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/sparse_models.sh
# Session 9 ran it on GPU 1 of an x2 call beside pathfinder_augment_long.sh (LANES=dihedral) on GPU 0,
# so on one GPU: the paper batch first, in LANE0_SHARE (default 50) percent of the time, then the small one:
#   CUDA_VISIBLE_DEVICES=1 OUT=$OUT/sm PACK_BESIDE=0 LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/sparse_models.sh
RECIPE=sparse_models
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --attentions flash_sparse flash sdpa --seq-lens 1024 4096 16384 --modes eager compiled
    --steps 30 --warmup 10)

lane0() {
  say "model step, paper batch: flash_sparse vs flash vs sdpa"
  timeout -k 5 "$(left 10)" "${MB[@]}" --regimes paper --out "$WORK/paper.csv"
  say "lane 0 done"
}
lane1() {
  say "model step, small batch: flash_sparse vs flash vs sdpa"
  timeout -k 5 "$(left 10)" "${MB[@]}" --regimes small --out "$WORK/small.csv"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
run_lanes lane0 lane1
pack
