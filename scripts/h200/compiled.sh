#!/usr/bin/env bash
# Device call (issues #2, #8), session 3: GPU correctness of the kernels (incl. the opt-in TMA path
# and the triton_op under torch.compile), TMA vs pointer loads timed by kernels.tuning, and the
# compiled model benchmark (default mode and CUDA graphs).
#   lane 0: TMA / tile tests on the GPU; kernels.tuning --loads tma at d = 64, then d = 128
#   lane 1: the rest of the kernel / baseline / compile tests on the GPU; `lra bench models`
#           compiled (small batch), with CUDA graphs (reduce-overhead), compiled at the paper batch
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> bash scripts/h200/compiled.sh
RECIPE=compiled
source "$(dirname "$0")/lib.sh"

lane0() {
  say "TMA tests on the GPU"
  timeout -k 5 140 python3 -m pytest tests/kernels/test_tma.py tests/kernels/test_tiles.py -q -x -p no:cacheprovider
  say "tuning d=64: pointer vs TMA vs TMA + warp specialisation"
  timeout -k 5 "$(( $(left 5) < 200 ? $(left 5) : 200 ))" python3 -m kernels.tuning --head-dims 64 --seq-lens 4096,16384 \
      --loads tma --out "$WORK/tma_d64.json"
  say "tuning d=128"
  timeout -k 5 "$(left 5)" python3 -m kernels.tuning --head-dims 128 --seq-lens 4096,16384 --loads tma \
      --out "$WORK/tma_d128.json"
  say "lane 0 done"
}

lane1() {
  say "GPU tests: kernels, baselines, compiled model"
  timeout -k 5 150 python3 -m pytest tests/kernels tests/baselines tests/lra/test_model_compile.py -q -n 8 \
      -p no:cacheprovider --ignore=tests/kernels/test_tma.py
  bench() { timeout -k 5 "$(left 5)" python3 -m lra bench models "$@"; }
  say "compiled, small batch"
  TORCH_LOGS=graph_breaks bench --attentions flash sdpa flash_sparse --regimes small --modes compiled \
      --seq-lens 1024 16384 --out "$WORK/models_compiled.csv" --profile "$WORK/profiles"
  say "CUDA graphs (reduce-overhead), small batch"
  bench --attentions flash sdpa flash_sparse --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 16384 --out "$WORK/models_cudagraphs.csv"
  say "compiled, paper batch"
  bench --attentions flash sdpa --regimes paper --modes compiled --seq-lens 1024 4096 --out "$WORK/models_compiled_paper.csv"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
run_lanes lane0 lane1
pack
