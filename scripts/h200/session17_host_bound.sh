#!/usr/bin/env bash
# Device call (issue #8), session 17, second: the host-bound cells where block-sparse and dense flash have
# been within a few percent of each other, either way, from call to call (small batch 1K / 4K, eager,
# compiled and under CUDA graphs; paper batch eager 1K). Call 1's profiles showed the two steps make the
# same launches (920 per 10 steps) and the same Python calls (+6 per step for block-sparse), and step
# times of one host code path moving by 30 % between runs; so here every cell runs 10x the steps of
# session 16 (1,000 per attention in 50 interleaved rounds at the small batch) to average the drift out.
# flash, sdpa (cuDNN), flash_sparse interleaved in every cell. One GPU.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/session17_host_bound.sh
RECIPE=session17_host_bound
source "$(dirname "$0")/lib.sh"
ATT=(flash sdpa flash_sparse)
LONG=(--steps 1000 --rounds 50)

lane() {
  say "small batch, compiled"
  bench_cell small_compiled 330 "${LONG[@]}" --regimes small --modes compiled --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "small batch, eager"
  bench_cell small_eager 250 "${LONG[@]}" --regimes small --modes eager --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "paper batch, eager, 1K"
  bench_cell paper_eager 200 --steps 200 --rounds 20 --regimes paper --modes eager --seq-lens 1024 --attentions "${ATT[@]}"
  say "small batch, CUDA graphs"
  bench_cell small_cudagraphs 5 "${LONG[@]}" --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
