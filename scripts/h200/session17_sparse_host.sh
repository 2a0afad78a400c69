#!/usr/bin/env bash
# Device call (issue #8), session 17, third: the host time of block-sparse vs dense in the compiled step
# after d212217 (Tiles.clamped returns its tiles unchanged when they fit the block, so Dynamo no longer
# traces dataclasses.replace on the block-sparse path: 10 fewer Python guards per compiled call). One GPU:
#   1. the block-sparse, tiles and compile tests on CUDA;
#   2. scripts/h200/compiled_host_time.py: host time per compiled step at batch 1, 4K, default mode and
#      CUDA graphs, flash / flash_sparse / sdpa in rotating rounds, with and without guards;
#   3. the small batch, compiled, 1K / 4K, interleaved, 1,000 steps per attention (as call 2).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/session17_sparse_host.sh
RECIPE=session17_sparse_host
source "$(dirname "$0")/lib.sh"
ATT=(flash sdpa flash_sparse)
LONG=(--steps 1000 --rounds 50)

lane() {
  cuda_tests 80 -n 8 tests/kernels/test_block_sparse.py tests/kernels/test_tiles.py tests/kernels/test_compile.py \
      tests/kernels/test_sparse_pipelining.py
  say "compiled host time, N=4096"
  timeout -k 5 "$(left 280)" python3 scripts/h200/compiled_host_time.py --seq-len 4096 --rounds 12 --iters 40 \
      --out "$WORK/host_time_N4096.md" > "$WORK/host_time_N4096.log" 2>&1
  grep "^|" "$WORK/host_time_N4096.md"
  say "compiled host time, CUDA graphs, N=4096"
  timeout -k 5 "$(left 180)" python3 scripts/h200/compiled_host_time.py --seq-len 4096 --rounds 12 --iters 40 \
      --mode reduce-overhead --out "$WORK/host_time_cudagraphs_N4096.md" > "$WORK/host_time_cudagraphs_N4096.log" 2>&1
  grep "^|" "$WORK/host_time_cudagraphs_N4096.md"
  say "small batch, compiled"
  bench_cell small_compiled 5 "${LONG[@]}" --regimes small --modes compiled --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
