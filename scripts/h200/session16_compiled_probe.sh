#!/usr/bin/env bash
# Device call (issue #8), session 16, first: where the compiled small-batch step's time goes, and the
# CUDA tests of session 15's last commits (never run on a GPU). One GPU:
#   1. the launch, launch-plan, plan-launcher, packed, block-sparse and model tests on CUDA;
#   2. step profiles (scripts/h200/profile_step.py --compile) of flash and sdpa at the small batch
#      (32 x 1K), with Inductor's generated code (TORCH_LOGS=output_code) kept;
#   3. the small batch compiled at 1K / 4K, flash vs sdpa, interleaved, with the kernels seen by
#      torch.compile as triton_op (the default) and as custom_op ($LRA_KERNELS_COMPILE_OP).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/session16_compiled_probe.sh
# (Rewritten with lib.sh's bench_cell / compile_checks / compiled_profile at the end of session 16; same runs as the call.)
RECIPE=session16_compiled_probe
source "$(dirname "$0")/lib.sh"
SMALL_COMPILED=(--steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 --attentions flash sdpa)

lane() {
  cuda_tests 100 -n 8 tests/kernels/test_launch.py tests/kernels/test_launch_plans.py tests/kernels/test_plan_launcher.py \
      tests/kernels/test_packed.py tests/kernels/test_packed_fast_path.py tests/kernels/test_block_sparse.py \
      tests/kernels/test_compile_triton_op.py tests/lra/test_model.py
  say "compiled step profiles, small batch 1K"
  mkdir -p "$WORK/profiles"
  TORCH_LOGS=output_code timeout -k 5 "$(left 380)" python3 scripts/h200/profile_step.py --compile --attentions flash sdpa \
      --seq-len 1024 --batch 32 --out "$WORK/profiles" 2> "$WORK/profiles/output_code.log" | grep "ms/step"
  say "small batch, compiled, triton_op"
  bench_cell small_compiled_triton_op 200 "${SMALL_COMPILED[@]}"
  say "small batch, compiled, custom_op"
  LRA_KERNELS_COMPILE_OP=custom_op bench_cell small_compiled_custom_op 10 "${SMALL_COMPILED[@]}"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
