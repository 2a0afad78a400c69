#!/usr/bin/env bash
# Short follow-up of compiled.sh (session 3), after the triton_op form failed under Inductor on the
# H200 and became opt-in: the compile tests and the compiled model cells with the default custom op;
# the TMA dK/dV pass at d = 64 (compiled.sh's tuning timed only the forward before its time ran out).
# Then the opt-in triton_op form (Inductor launches our kernels; CUDA graphs) after its fixes.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=300 bash scripts/h200/compiled_followup.sh
RECIPE=followup
source "$(dirname "$0")/lib.sh"

lane0() {
  say "tuning d=64, dK/dV pass: pointer vs TMA"
  timeout -k 5 "$(left 5)" python3 -m kernels.tuning --head-dims 64 --seq-lens 16384 --loads tma --passes dkdv \
      --out "$WORK/tma_d64_dkdv.json"
  say "lane 0 done"
}

lane1() {
  say "compile tests on the GPU"
  timeout -k 5 45 python3 -m pytest tests/kernels/test_compile.py tests/lra/test_model_compile.py -q -n 4 -p no:cacheprovider
  say "compiled (custom op), small and paper batch"
  timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions flash --regimes small paper --modes compiled \
      --seq-lens 1024 4096 --out "$WORK/models_compiled.csv"
  say "the opt-in triton_op form (fixes of session 3, untested on the GPU): compile tests, then the cells"
  LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 60 python3 -m pytest tests/kernels/test_compile.py \
      tests/lra/test_model_compile.py -q -n 4 -p no:cacheprovider
  LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions flash \
      --regimes small --modes compiled --seq-lens 1024 16384 --out "$WORK/models_compiled_triton_op.csv"
  LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions flash sdpa \
      --regimes small --modes compiled --compile-mode reduce-overhead --seq-lens 1024 16384 \
      --out "$WORK/models_cudagraphs_triton_op.csv"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
