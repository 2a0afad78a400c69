#!/usr/bin/env bash
# Device call (issue #8), session 14: launch plans (kernels.ops replays the bound launches of an earlier
# call with the same input layout; $LRA_TRITON_LAUNCH=planned, the default) on the host-bound cells.
# One GPU, in order:
#   1. the launch / plan / packed / fused-backward / model tests on CUDA (test_launch.py and
#      test_launch_plans.py compare cached and planned launches bitwise with built ones);
#   2. scripts/h200/host_overhead.py: host time of one attention core, fwd + bwd, sdpa vs flash in each
#      launch mode (planned / cached / Triton), measured in rotating rounds;
#   3. `lra bench models --interleave`, small batch (32K tokens), eager, 1K / 4K / 16K: flash, sdpa,
#      flash_sparse, 100 steps in 10 rounds;
#   4. the same, paper batch (262,144 tokens), eager, 1K, with softmax: 40 steps in 4 rounds.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/launch_plans_check.sh
RECIPE=launch_plans_check
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10)

lane() {
  cuda_tests 170 tests/kernels/test_launch.py tests/kernels/test_launch_plans.py \
      tests/kernels/test_packed.py tests/kernels/test_fused_backward.py tests/lra/test_model.py -k "not registered"
  say "host time per attention call, by launch mode"
  timeout -k 5 120 python3 scripts/h200/host_overhead.py --out "$WORK/host_overhead.md" > "$WORK/host_overhead.log" 2>&1
  cat "$WORK/host_overhead.md"
  say "small batch, eager, interleaved"
  timeout -k 5 "$(left 100)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes eager \
      --seq-lens 1024 4096 16384 --attentions flash sdpa flash_sparse --resume --out "$WORK/small_eager.csv" \
      > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "paper batch, eager, 1K, interleaved"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes eager --seq-lens 1024 \
      --attentions flash sdpa flash_sparse softmax --resume --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  grep -h "ms/step" "$WORK/paper_eager.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
