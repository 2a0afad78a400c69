#!/usr/bin/env bash
# Device call (issue #8), session 13, after small_batch_packed.sh (calls 1-2): the packed-QKV path and
# cached launches (git dc3481d on) across the regimes issue #8 judges, on one GPU:
#   1. paper batch, eager, 1K / 4K / 16K: flash, sdpa, flash_sparse; softmax at 1K / 4K (it runs out of
#      memory at 16K); flash with q/k/v views (LRA_PACKED_QKV=0) at 1K / 4K, same call;
#   2. small batch, CUDA graphs (compiled, mode reduce-overhead: the host leaves the step), 1K / 4K /
#      16K: flash and sdpa -- the GPU time of the step (session 7: flash 0.94x sdpa at 1K);
#   3. small batch, eager, 1K / 4K, 100 timed steps, sdpa / flash / sdpa / flash (the host-bound cells
#      drift within a call; alternating shows it);
#   4. with the time left: paper batch, compiled (default mode), 1K: flash, sdpa, flash_sparse.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=480 bash scripts/h200/packed_check.sh
RECIPE=packed_check
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --warmup 10)

lane() {
  say "paper batch, eager"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 30 --regimes paper --modes eager --seq-lens 1024 4096 16384 \
      --attentions flash sdpa flash_sparse --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 30 --regimes paper --modes eager --seq-lens 1024 4096 \
      --attentions softmax --out "$WORK/paper_eager_softmax.csv" > "$WORK/paper_eager_softmax.log" 2>&1
  LRA_PACKED_QKV=0 timeout -k 5 "$(left 10)" "${MB[@]}" --steps 30 --regimes paper --modes eager --seq-lens 1024 4096 \
      --attentions flash --out "$WORK/paper_eager_views.csv" > "$WORK/paper_eager_views.log" 2>&1
  grep -h "ms/step" "$WORK"/paper_eager*.log
  say "small batch, CUDA graphs"
  timeout -k 5 "$(left 150)" "${MB[@]}" --steps 50 --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 16384 --attentions flash sdpa --resume --out "$WORK/small_cudagraphs.csv" \
      > "$WORK/small_cudagraphs.log" 2>&1
  grep -h "ms/step" "$WORK/small_cudagraphs.log"
  say "small batch, eager, alternating"
  for round in 1 2; do
    timeout -k 5 "$(left 100)" "${MB[@]}" --steps 100 --regimes small --modes eager --seq-lens 1024 4096 \
        --attentions sdpa flash --out "$WORK/small_eager_round$round.csv" > "$WORK/small_eager_round$round.log" 2>&1
  done
  grep -h "ms/step" "$WORK"/small_eager_round*.log
  say "paper batch, compiled, 1K"
  timeout -k 5 "$(left 5)" "${MB[@]}" --steps 30 --regimes paper --modes compiled --seq-lens 1024 \
      --attentions flash sdpa flash_sparse --resume --out "$WORK/paper_compiled.csv" > "$WORK/paper_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/paper_compiled.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
