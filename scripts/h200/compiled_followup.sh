#!/usr/bin/env bash
# Short follow-up of compiled.sh (session 3), after the triton_op form failed under Inductor on the
# H200 and became opt-in: the compile tests and the compiled model cells with the default custom op;
# the TMA dK/dV pass at d = 64 (compiled.sh's tuning timed only the forward before its time ran out).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=150 bash scripts/h200/compiled_followup.sh
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
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
