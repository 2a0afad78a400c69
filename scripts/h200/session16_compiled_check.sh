#!/usr/bin/env bash
# Device call (issue #8), session 16, second: the compiled step without the copies Inductor added
# around our kernels (the block-sparse counts pointer passed into a @triton.jit helper counted as
# written, so every launch copied QKV -- q was its placeholder -- before and after; and a zero lse
# gradient filled per call). One GPU:
#   1. kernel + compile tests on CUDA (dense, block-sparse, fused backward, torch.compile);
#   2. the compiled small-batch step's profile with Inductor's code (no 6291328-element copies left);
#   3. small batch, compiled, 1K / 4K / 16K; paper batch, compiled, 1K; small batch, eager, 1K / 4K
#      (flash, sdpa, flash_sparse, interleaved).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/session16_compiled_check.sh
# (Rewritten with lib.sh's bench_cell / compile_checks / compiled_profile at the end of session 16; same runs as the call.)
RECIPE=session16_compiled_check
source "$(dirname "$0")/lib.sh"
ATT=(flash sdpa flash_sparse)

lane() {
  cuda_tests 150 -n 8 tests/kernels/test_compile.py tests/kernels/test_gpu_compile.py tests/lra/test_model_compile.py \
      tests/kernels/test_block_sparse.py tests/kernels/test_flash_attention.py tests/kernels/test_fused_backward.py \
      tests/kernels/test_sparse_pipelining.py tests/kernels/test_packed_fast_path.py tests/kernels/test_plan_launcher.py
  say "compiled step profile, small batch 1K, flash"
  mkdir -p "$WORK/profiles"
  TORCH_LOGS=output_code timeout -k 5 "$(left 420)" python3 scripts/h200/profile_step.py --compile --attentions flash \
      --seq-len 1024 --batch 32 --out "$WORK/profiles" 2> "$WORK/profiles/output_code.log" | grep "ms/step"
  say "QKV-sized copies left in Inductor's code: $(grep -c 'empty_strided_cuda((6291328' "$WORK/profiles/output_code.log")"
  say "small batch, compiled"
  bench_cell small_compiled 200 --steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 16384 \
      --attentions "${ATT[@]}"
  say "paper batch, compiled, 1K"
  bench_cell paper_compiled 90 --steps 40 --rounds 4 --regimes paper --modes compiled --seq-lens 1024 --attentions "${ATT[@]}"
  say "small batch, eager"
  bench_cell small_eager 10 --steps 100 --rounds 10 --regimes small --modes eager --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
