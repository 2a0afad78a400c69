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
RECIPE=session16_static_launch
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10 --resume --modes compiled)
ATT=(flash sdpa flash_sparse)

lane() {
  cuda_tests 100 -n 8 tests/kernels/test_compile.py tests/kernels/test_gpu_compile.py tests/lra/test_model_compile.py \
      tests/kernels/test_compile_triton_op.py
  python3 -m lra info 2>&1 | grep -E "^(kernels|inductor|launches)"
  say "compiled step profile, small batch 1K, flash"
  mkdir -p "$WORK/profiles"
  timeout -k 5 "$(left 430)" python3 scripts/h200/profile_step.py --compile --attentions flash \
      --seq-len 1024 --batch 32 --out "$WORK/profiles" | grep "ms/step"
  grep -E "triton_heuristics.py:[0-9]+\(run\)|static_triton_launcher.py:[0-9]+\(run\)" \
      "$WORK/profiles/flash_N1024_B32_compiled.txt" | head -2
  say "small batch, compiled, static launch (A)"
  timeout -k 5 "$(left 250)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --seq-lens 1024 4096 \
      --attentions "${ATT[@]}" --out "$WORK/small_compiled_static.csv" > "$WORK/small_compiled_static.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled_static.log"
  say "small batch, compiled, Triton's launcher (B)"
  TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 timeout -k 5 "$(left 90)" "${MB[@]}" --steps 100 --rounds 10 \
      --regimes small --seq-lens 1024 4096 --attentions "${ATT[@]}" --out "$WORK/small_compiled_triton_launcher.csv" \
      > "$WORK/small_compiled_triton_launcher.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled_triton_launcher.log"
  say "paper batch, compiled, 1K (A)"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --seq-lens 1024 \
      --attentions "${ATT[@]}" --out "$WORK/paper_compiled.csv" > "$WORK/paper_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/paper_compiled.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
