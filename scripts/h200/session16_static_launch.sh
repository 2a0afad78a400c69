#!/usr/bin/env bash
# Device call (issue #8), session 16, third: Inductor's static launcher for our kernels under
# torch.compile (kernels.ops._let_inductor_launch_ours_statically; torch's
# TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 turns it off). One GPU:
#   1. the compile tests on CUDA;
#   2. the compiled small-batch step's profile (flash): every launch through the static launcher?
#   3. small batch, compiled, 1K / 4K: flash, sdpa, flash_sparse interleaved, with the static launch
#      (A) and without (B, the torch default) -- the ratio to sdpa inside each run;
#   4. paper batch, compiled, 1K (A).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/session16_static_launch.sh
# (Rewritten with lib.sh's bench_cell / compile_checks / compiled_profile at the end of session 16; same runs as the call.)
RECIPE=session16_static_launch
source "$(dirname "$0")/lib.sh"
SMALL_COMPILED=(--steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096)
ATT=(flash sdpa flash_sparse)

lane() {
  compile_checks 100
  compiled_profile "$(left 430)" flash
  say "small batch, compiled, static launch (A)"
  bench_cell small_compiled_static 250 "${SMALL_COMPILED[@]}" --attentions "${ATT[@]}"
  say "small batch, compiled, Triton's launcher (B)"
  TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 bench_cell small_compiled_triton_launcher 90 \
      "${SMALL_COMPILED[@]}" --attentions "${ATT[@]}"
  say "paper batch, compiled, 1K (A)"
  bench_cell paper_compiled 10 --steps 40 --rounds 4 --regimes paper --modes compiled --seq-lens 1024 --attentions "${ATT[@]}"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
