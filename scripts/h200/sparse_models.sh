#!/usr/bin/env bash
# Device call (issues #3, #8), prepared in session 8, not run yet (session 9 planned it beside another recipe on an x2 machine, which was not lent): the model-level step with the
# block-sparse loops pipelined (git 6a50bea: the list index carried one step ahead) and the
# block-sparse host-time caching — flash_sparse (BigBird layout, the registry's default) against
# flash and sdpa (cuDNN), the `paper` model, 1K / 4K / 16K.
#   GPU 0: paper batch (262,144 tokens per step), eager and compiled;
#   GPU 1: small batch (32,768 tokens per step), eager and compiled.
# Run after scripts/h200/sparse_grid.sh (whose header has its call) has re-tuned the block-sparse
# tiles, and with the tiles it chose committed.
# Usage (device, kind nvidia-h200-x2): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/sparse_models.sh
# Beside another recipe (as session 9 planned: pathfinder_augment_long.sh LANES=dihedral on GPU 0), it runs
# on one GPU: the paper batch first, in LANE0_SHARE (default 50) percent of the time, then the small one:
#   CUDA_VISIBLE_DEVICES=1 OUT=$OUT/sm PACK_BESIDE=0 LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/sparse_models.sh
RECIPE=sparse_models
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --attentions flash_sparse flash sdpa --seq-lens 1024 4096 16384 --modes eager compiled
    --steps 30 --warmup 10)

lane0() {
  say "model step, paper batch: flash_sparse vs flash vs sdpa"
  timeout -k 5 "$(left 10)" "${MB[@]}" --regimes paper --resume --out "$WORK/paper.csv"
  say "lane 0 done"
}
lane1() {
  say "model step, small batch: flash_sparse vs flash vs sdpa"
  timeout -k 5 "$(left 10)" "${MB[@]}" --regimes small --resume --out "$WORK/small.csv"
  say "lane 1 done"
}

# PROFILE=1 (default): first, where the eager paper-batch step at 1K spends its GPU time — flash, sdpa
# and the materialised softmax, 3 steps each under torch.profiler (operator tables by self CUDA time in
# $WORK/profiles/*.txt; the Chrome traces are dropped, they are large). Issue #8 asks flash for >= 3.5x
# the eager softmax Transformer there; session 6 measured 11.15 vs 34.34 ms (3.08x), and the ~4 ms that
# torch.compile removes from the same step says how much of it is the shared model's unfused
# element-wise work rather than attention.
profile() {
  say "profile: paper batch, 1K, eager: flash, sdpa, softmax"
  timeout -k 5 "$(left 10)" python3 -m lra bench models --attentions flash sdpa softmax --regimes paper \
      --modes eager --seq-lens 1024 --steps 10 --warmup 5 --profile "$WORK/profiles" --out "$WORK/profile_paper_1k.csv"
  rm -f "$WORK"/profiles/*.json.gz
  say "profile done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
(( ${PROFILE:-1} )) && (export CUDA_VISIBLE_DEVICES=$ONE_GPU; profile) > "$WORK/profile.log" 2>&1
run_lanes lane0 lane1
pack
