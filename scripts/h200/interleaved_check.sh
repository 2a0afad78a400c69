#!/usr/bin/env bash
# Device call (issue #8), prepared in session 13, not run yet: the host-bound cells measured with
# `lra bench models --interleave` (the attentions of a cell built together and timed in rotating rounds,
# so that the host's drift -- up to 40 % within one call in session 13 -- falls on all of them alike).
# One GPU, in order:
#   1. small batch (32K tokens), eager, 1K / 4K / 16K: flash, sdpa, flash_sparse, 100 steps in 10 rounds;
#   2. paper batch (262,144 tokens), eager, 1K: flash, sdpa, flash_sparse, softmax, 40 steps in 4 rounds
#      (flash vs the materialised Transformer at 1K, issue #8's 3.5x, on whatever host the call gets);
#   3. small batch, compiled (default mode), 1K / 4K: flash, sdpa, 100 steps in 10 rounds.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=480 bash scripts/h200/interleaved_check.sh
RECIPE=interleaved_check
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10)

lane() {
  say "small batch, eager, interleaved"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes eager \
      --seq-lens 1024 4096 16384 --attentions flash sdpa flash_sparse --resume --out "$WORK/small_eager.csv" \
      > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "paper batch, eager, 1K, interleaved"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes eager --seq-lens 1024 \
      --attentions flash sdpa flash_sparse softmax --resume --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  grep -h "ms/step" "$WORK/paper_eager.log"
  say "small batch, compiled, interleaved"
  timeout -k 5 "$(left 5)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 \
      --attentions flash sdpa --resume --out "$WORK/small_compiled.csv" > "$WORK/small_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
