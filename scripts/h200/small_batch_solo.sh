#!/usr/bin/env bash
# Device call (issue #8), prepared in session 6, not run yet: the small batch regime (32K tokens
# per step) with nothing else on the machine. That step is launch-bound (3.4-9 ms for ~2 ms of GPU
# work at 1K), and every earlier measurement shared the host CPU with another lane, so the same sdpa
# cell moved by up to 2x between calls (results/models/dropout_bwd/README.md). One lane, one GPU:
# flash (the one-pass dropout backward, the default since 8878428) and sdpa, eager, compiled and CUDA
# graphs, 1K-16K, 50 timed steps; every cell twice, in the order flash-sdpa and then sdpa-flash, so
# that drift shows as a difference between the two passes instead of hiding in one of them.
# Usage (device, kind nvidia-h200): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/small_batch_solo.sh
RECIPE=small_batch_solo
source "$(dirname "$0")/lib.sh"
export CUDA_VISIBLE_DEVICES=0
MB=(python3 -m lra bench models --regimes small --seq-lens 1024 4096 16384 --steps 50 --warmup 10)

{
  for order in "flash sdpa" "sdpa flash"; do
    tag=${order// /_}
    say "eager and compiled, order: $order"
    timeout -k 5 "$(left 120)" "${MB[@]}" --modes eager compiled --attentions $order --out "$WORK/small_$tag.csv"
    say "CUDA graphs (reduce-overhead), order: $order"
    timeout -k 5 "$(left 60)" "${MB[@]}" --modes compiled --compile-mode reduce-overhead --attentions $order \
        --out "$WORK/small_cudagraphs_$tag.csv"
  done
  say "done"
} > "$WORK/lane0.log" 2>&1
pack
