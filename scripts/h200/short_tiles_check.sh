#!/usr/bin/env bash
# Device call (issue #8), session 14, after small_batch_followup.sh: the one-pass dropout backward's dK/dV
# tiles for short sequences (kernels.tiles: (64, 128, 4, 3) at N_q <= 1K, d 32, from that call's tuning)
# and bound launches calling Triton's C launcher directly. One GPU, in order:
#   1. the launch / plan / packed / fused-backward / dropout / tiles / model tests on CUDA;
#   2. scripts/h200/host_overhead.py (host time per attention core by launch mode);
#   3. kernels.tuning of the one-pass dK/dV at the small batch's 2K and 4K and the paper batch's 1K
#      (where the short-sequence entry's edge lies);
#   4. `lra bench models --interleave`, small batch: CUDA graphs 1K / 4K (flash, sdpa), eager 1K / 4K and
#      compiled 1K (flash, sdpa, flash_sparse); paper batch, eager, 1K / 4K (flash, sdpa, flash_sparse, softmax).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=570 bash scripts/h200/short_tiles_check.sh
RECIPE=short_tiles_check
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10)
TUNE=(python3 -m kernels.tuning --head-dims 32 --hidden 64 --dropout 0.1 --passes dkdv)

lane() {
  cuda_tests 170 tests/kernels/test_launch.py tests/kernels/test_launch_plans.py tests/kernels/test_packed.py \
      tests/kernels/test_fused_backward.py tests/kernels/test_dropout.py tests/kernels/test_tiles.py \
      tests/lra/test_model.py -k "not registered"
  say "host time per attention call, by launch mode"
  timeout -k 5 100 python3 scripts/h200/host_overhead.py --out "$WORK/host_overhead.md" > "$WORK/host_overhead.log" 2>&1
  cat "$WORK/host_overhead.md"
  say "one-pass dK/dV tiles: small batch 2K / 4K, paper batch 1K"
  timeout -k 5 60 "${TUNE[@]}" --seq-lens 2048,4096 --tokens 32768 --out "$WORK/tune_small_2k_4k.json" > "$WORK/tune_small_2k_4k.log" 2>&1
  timeout -k 5 60 "${TUNE[@]}" --seq-lens 1024 --tokens 262144 --out "$WORK/tune_paper_1k.json" > "$WORK/tune_paper_1k.log" 2>&1
  grep -h "dkdv\|best" "$WORK"/tune_*.log
  say "small batch, CUDA graphs, interleaved"
  timeout -k 5 "$(left 200)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions flash sdpa --resume --out "$WORK/small_cudagraphs.csv" > "$WORK/small_cudagraphs.log" 2>&1
  grep -h "ms/step" "$WORK/small_cudagraphs.log"
  say "small batch, eager, interleaved"
  timeout -k 5 "$(left 160)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes eager --seq-lens 1024 4096 \
      --attentions flash sdpa flash_sparse --resume --out "$WORK/small_eager.csv" > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "paper batch, eager, interleaved"
  timeout -k 5 "$(left 90)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes eager --seq-lens 1024 4096 \
      --attentions flash sdpa flash_sparse softmax --resume --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  grep -h "ms/step" "$WORK/paper_eager.log"
  say "small batch, compiled, 1K, interleaved"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 \
      --attentions flash sdpa flash_sparse --resume --out "$WORK/small_compiled.csv" > "$WORK/small_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
