#!/usr/bin/env bash
# Device call (issue #8), session 17, first: why block-sparse (flash_sparse, BigBird layout) is 3-9 %
# slower than dense flash in the compiled small-batch step at 1K / 4K (session 16) while it is the
# fastest eagerly and at the paper batch. One GPU:
#   1. compiled step profiles of flash_sparse and flash at 32 x 1K and 8 x 4K (issue / wall / GPU-busy
#      time per step, static-launch bypasses, Inductor's output code for 4K);
#   2. the small batch under CUDA graphs (reduce-overhead: the host's share gone), 1K / 4K, with flash_sparse;
#   3. the paper batch compiled at 4K / 16K (last measured in session 7);
#   4. the compile tests on CUDA (session 16's last commits never ran on a GPU).
# flash, sdpa (cuDNN), flash_sparse interleaved in every cell.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=580 bash scripts/h200/session17_sparse_probe.sh
RECIPE=session17_sparse_probe
source "$(dirname "$0")/lib.sh"
ATT=(flash sdpa flash_sparse)

lane() {
  compiled_profile 110 flash_sparse flash
  PROFILE_N=4096 PROFILE_BATCH=8 TORCH_LOGS=output_code compiled_profile 110 flash_sparse flash
  say "small batch, CUDA graphs"
  bench_cell small_cudagraphs 250 --steps 100 --rounds 10 --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "paper batch, compiled, 4K / 16K"
  bench_cell paper_compiled_long 75 --steps 40 --rounds 4 --regimes paper --modes compiled --seq-lens 4096 16384 \
      --attentions "${ATT[@]}"
  compile_checks "$(left 5)"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
