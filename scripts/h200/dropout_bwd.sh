#!/usr/bin/env bash
# Device call (issues #2, #3, #8), prepared in session 5, not run yet: does the opt-in one-pass
# dropout backward ($LRA_DROPOUT_BWD=fused: dQ by atomics inside the dK/dV pass, one mask generation
# instead of two) close the gap to cuDNN SDPA that attention dropout opens (results/kernels/dropout/)?
# Lane 0: `lra bench kernels --dropout 0.1` for split and fused (d = 32, 64; 1K, 4K, 16K) and the
# cuDNN anchor; then block-sparse vs our dense at d = 32 (issue #3, not re-measured since session 2).
# Lane 1: the model step (flash, split and fused, and sdpa) at both batch regimes, eager and compiled.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/dropout_bwd.sh
RECIPE=dropout_bwd
source "$(dirname "$0")/lib.sh"
KB=(python3 -m lra bench kernels --sparse-layouts none --approx none --warmup 10 --rep 50 --out "$WORK"
    --head-dims 32,64 --seq-lens 1k,4k,16k --passes fwd,bwd,fwd_bwd --dropout 0.1)
MB=(python3 -m lra bench models --regimes paper small --modes eager compiled --seq-lens 1024 4096 16384)

# each_bwd WHAT CMD...: CMD under LRA_DROPOUT_BWD=split, then =fused; @MODE@ in CMD becomes the mode
each_bwd() {
  local what=$1 mode
  shift
  for mode in split fused; do
    say "$what, backward $mode"
    LRA_DROPOUT_BWD=$mode timeout -k 5 "$(left 5)" "${@//@MODE@/$mode}"
  done
}

lane0() {
  each_bwd "kernels, dropout 0.1" "${KB[@]}" --impls ours --name kernels_drop_@MODE@
  say "anchor: SDPA cuDNN with dropout 0.1"
  timeout -k 5 "$(left 5)" "${KB[@]}" --impls sdpa_cudnn --name kernels_drop_cudnn
  say "block-sparse vs our dense, d = 32, one report"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels --impls ours --head-dims 32 --seq-lens 1k,2k,4k,8k,16k \
      --sparse-layouts bigbird,local,butterfly --sparse-head-dims 32 --sparse-seq-lens 1k,2k,4k,8k,16k \
      --approx none --flex-dynamic --warmup 10 --rep 50 --time-budget "$(left 40)" --out "$WORK" \
      --name sparse_dense_d32
  say "lane 0 done"
}

lane1() {
  each_bwd "model, flash" "${MB[@]}" --attentions flash --out "$WORK/models_flash_@MODE@.csv"
  say "model, sdpa (cuDNN)"
  timeout -k 5 "$(left 5)" "${MB[@]}" --attentions sdpa --out "$WORK/models_sdpa.csv"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
