#!/usr/bin/env bash
# Device call (issues #2, #8 on GPU 0; #7 on GPU 1), session 6.
# Lane 0: session 6's first call measured the one-pass dropout backward ($LRA_DROPOUT_BWD=fused)
# only 3-6 % faster than the split one with the split's tiles (results/kernels/dropout/), and its
# dK/dV kernel spills with them at d = 64. Tune the dK/dV tiles of each form (kernels.tuning
# --passes dkdv, now with smaller and 8-warp candidates; split also re-tunes dQ), then time both
# forms with their tuned tiles at kernel level (dropout 0.1, d = 32, 64; cuDNN anchor in the same
# run) and the model step at the paper batch (flash with the better form vs sdpa, eager and compiled).
# Lane 1: `SET=augment scripts/h200/pathfinder_probe.sh` on GPU 1 (its own archive under $OUT/pf).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/fused_tiles_augment.sh
RECIPE=fused_tiles_augment
source "$(dirname "$0")/lib.sh"
KB=(python3 -m lra bench kernels --sparse-layouts none --approx none --warmup 10 --rep 50 --out "$WORK"
    --head-dims 32,64 --seq-lens 1k,4k,16k --passes bwd,fwd_bwd --dropout 0.1)

lane0() {
  local mode
  for mode in fused split; do
    say "tune dK/dV ($mode backward; split: and dQ), dropout 0.1, d = 32, 64"
    LRA_DROPOUT_BWD=$mode timeout -k 5 "$(left 200)" python3 -m kernels.tuning --head-dims 32,64 \
        --seq-lens 4096,16384 --dropout 0.1 --passes "dkdv$([[ $mode == split ]] && echo ,dq)" \
        --out "$WORK/tune_dropout_$mode.json"
  done
  for mode in fused split; do
    say "kernels, dropout 0.1, backward $mode, its tuned tiles"
    LRA_DROPOUT_BWD=$mode LRA_KERNEL_TILES="$WORK/tune_dropout_$mode.json" timeout -k 5 "$(left 150)" \
        "${KB[@]}" --impls ours --name kernels_drop_tuned_$mode
  done
  say "anchor: SDPA cuDNN with dropout 0.1"
  timeout -k 5 "$(left 140)" "${KB[@]}" --impls sdpa_cudnn --name kernels_drop_cudnn
  say "model step, paper batch: flash (fused, tuned) and sdpa"
  LRA_DROPOUT_BWD=fused LRA_KERNEL_TILES="$WORK/tune_dropout_fused.json" timeout -k 5 "$(left 5)" \
      python3 -m lra bench models --regimes paper --modes eager compiled --seq-lens 1024 4096 16384 \
      --attentions flash sdpa --out "$WORK/models_fused_tuned.csv"
  say "lane 0 done"
}

lane1() {
  mkdir -p "$OUT/pf"
  OUT="$OUT/pf" SET=augment N=250000 PROBE_MIN=${PROBE_MIN:-6.5} DEADLINE=$(( DEADLINE - $(elapsed) )) \
      bash "$(dirname "$0")/pathfinder_probe.sh"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
