#!/usr/bin/env bash
# Device call (issue #8): the compiled half of the model benchmark grid — `lra bench models --modes
# compiled` with the default custom-op form of our kernels, both batch regimes, 1K-16K.
# Lane 0: the paper batch (262,144 tokens per step); lane 1: the GPU compile tests, then the small
# batch (32,768 tokens), then CUDA graphs (compile mode reduce-overhead) for flash vs sdpa.
# Each bench rewrites its CSV after every cell, so a cell cut by the deadline loses only itself.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/compiled_grid.sh
RECIPE=compiled_grid
source "$(dirname "$0")/lib.sh"
LENS=(1024 2048 4096 8192 16384)

bench() {  # bench REGIME OUTNAME [ARGS...]: compiled cells of REGIME until the deadline
  local regime=$1 name=$2; shift 2
  timeout -k 5 "$(left 5)" python3 -m lra bench models --regimes "$regime" --modes compiled \
      --out "$WORK/$name.csv" "$@"
}

lane0() {
  say "paper batch, compiled: flash, sdpa, flash_sparse"
  bench paper models_compiled_paper --attentions flash sdpa flash_sparse --seq-lens "${LENS[@]}"
  say "paper batch, compiled: softmax (the materialised Transformer; OOM expected at 16K)"
  bench paper models_compiled_paper_softmax --attentions softmax --seq-lens "${LENS[@]}"
  say "lane 0 done"
}

lane1() {
  say "compile tests on the GPU"
  timeout -k 5 60 python3 -m pytest tests/kernels/test_compile.py tests/lra/test_model_compile.py -q -n 4 -p no:cacheprovider
  say "small batch, compiled: flash, sdpa, flash_sparse"
  bench small models_compiled_small --attentions flash sdpa flash_sparse --seq-lens "${LENS[@]}"
  say "small batch, CUDA graphs (reduce-overhead): flash, sdpa"
  bench small models_cudagraphs_small --attentions flash sdpa --seq-lens 1024 16384 --compile-mode reduce-overhead
  say "small batch, compiled: softmax"
  bench small models_compiled_small_softmax --attentions softmax --seq-lens "${LENS[@]}"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
