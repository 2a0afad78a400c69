#!/usr/bin/env bash
# Device call (issue #8), session 15: the native plan launcher (kernels.plan_launcher: a launch plan's
# launches replayed by one C call; $LRA_TRITON_LAUNCH=native, the default) on the host-bound cells.
# One GPU, in order:
#   1. the whole kernel and lra test suites on CUDA (8 workers): test_plan_launcher.py compares native
#      replays bitwise with Python replays and built launches; tests/lra checks the cpu_machine skips;
#   2. scripts/h200/host_overhead.py: host time of one attention core, fwd + bwd, sdpa vs flash in each
#      launch mode (native / planned / cached / Triton), rotating rounds, and a cProfile of the default;
#   3. `lra bench models --interleave`, small batch (32K tokens), eager, 1K / 4K: flash, sdpa,
#      flash_sparse, 100 steps in 10 rounds;
#   4. the same, paper batch (262,144 tokens), eager, 1K, with softmax: 40 steps in 4 rounds.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/native_launch_check.sh
RECIPE=native_launch_check
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10 --resume)

lane() {
  cuda_tests 260 -n 8 tests/kernels tests/lra
  grep -E "^(FAILED|ERROR)" "$WORK/pytest.log" | head -20
  say "host time per attention call, by launch mode"
  timeout -k 5 100 python3 scripts/h200/host_overhead.py --profile 300 --out "$WORK/host_overhead.md" \
      > "$WORK/host_overhead.log" 2>&1
  sed -n '1,20p' "$WORK/host_overhead.md"
  say "small batch, eager, interleaved"
  timeout -k 5 "$(left 80)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes eager \
      --seq-lens 1024 4096 --attentions flash sdpa flash_sparse --out "$WORK/small_eager.csv" \
      > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "paper batch, eager, 1K, interleaved"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes eager --seq-lens 1024 \
      --attentions flash sdpa flash_sparse softmax --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  grep -h "ms/step" "$WORK/paper_eager.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
