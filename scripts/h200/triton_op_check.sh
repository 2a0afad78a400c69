#!/usr/bin/env bash
# Device call (issue #8), session 7: torch.compile with our ops in the `triton_op` form
# ($LRA_KERNELS_COMPILE_OP=triton_op: Inductor launches the Triton kernels from its generated code,
# no Python launcher per call). Session 7's first try (small_batch_solo.sh, git 8632699) failed to
# compile under Inductor because Inductor types Python float arguments as fp64 (the softmax
# statistics became float64: tl.dot's accumulator assertion); the kernels now cast their float
# scalars to float32. This call: the compile tests in that form, then (if they pass) the model step
# with flash (triton_op) against sdpa, compiled and CUDA graphs, small batch and paper batch.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=480 bash scripts/h200/triton_op_check.sh
RECIPE=triton_op_check
source "$(dirname "$0")/lib.sh"
export CUDA_VISIBLE_DEVICES=0
MB=(python3 -m lra bench models --seq-lens 1024 4096 16384 --steps 50 --warmup 10)
{
  triton_op_compile_tests 100
  if (( tests_rc == 0 )); then
    say "small batch, CUDA graphs (reduce-overhead), triton_op: flash, sdpa"
    LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 250)" "${MB[@]}" --regimes small --modes compiled \
        --compile-mode reduce-overhead --attentions flash sdpa --out "$WORK/small_cudagraphs_triton_op.csv"
    say "small batch, compiled, triton_op: flash, sdpa"
    LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 160)" "${MB[@]}" --regimes small --modes compiled \
        --attentions flash sdpa --out "$WORK/small_triton_op.csv"
    say "paper batch, compiled, triton_op: flash, sdpa"
    LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 5)" "${MB[@]}" --regimes paper --modes compiled \
        --attentions flash sdpa --out "$WORK/paper_triton_op.csv"
  fi
  say "done"
} > "$WORK/lane0.log" 2>&1
pack
