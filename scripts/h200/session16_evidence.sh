#!/usr/bin/env bash
# Device call (issue #8), session 16, last: the compiled step with this session's changes -- no
# copies around our kernels under torch.compile (96ea69d), Inductor's static launcher for them (set
# through torch's environment variable so that the compile workers see it) -- and an A/B of the
# static launch. One GPU:
#   1. the compile tests on CUDA;
#   2. the compiled small-batch step's profile (flash): launches through the static launcher;
#   3. small batch, compiled, 1K / 4K / 16K (A: static launch);
#   4. small batch, compiled, 1K / 4K, TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 (B);
#   5. paper batch, compiled, 1K; small batch, CUDA graphs, 1K / 4K; small batch, eager, 1K / 4K.
# flash, sdpa (cuDNN), flash_sparse (BigBird) interleaved in every cell.
# (Session 16 ran it at c11eedc with the profile's budget computed from the deadline, which left it 1 s,
# and 330 s held back after the first compiled run, which cut its 16K cell; the budgets are fixed since.)
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=580 bash scripts/h200/session16_evidence.sh
RECIPE=session16_evidence
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10 --resume)
ATT=(flash sdpa flash_sparse)

lane() {
  cuda_tests 80 -n 8 tests/kernels/test_compile.py tests/kernels/test_gpu_compile.py tests/lra/test_model_compile.py \
      tests/kernels/test_compile_triton_op.py
  python3 -m lra info 2>&1 | grep -E "^(kernels|inductor|launches)"
  say "compiled step profile, small batch 1K, flash"
  mkdir -p "$WORK/profiles"
  timeout -k 5 60 python3 scripts/h200/profile_step.py --compile --attentions flash sdpa \
      --seq-len 1024 --batch 32 --out "$WORK/profiles" | grep "ms/step"
  grep -hE "triton_heuristics.py:[0-9]+\(run\)|static_triton_launcher.py:[0-9]+\(run\)" "$WORK"/profiles/*_compiled.txt
  say "small batch, compiled, static launch (A)"
  timeout -k 5 "$(left 230)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 16384 \
      --attentions "${ATT[@]}" --out "$WORK/small_compiled.csv" > "$WORK/small_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled.log"
  say "small batch, compiled, Triton's launcher (B)"
  TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 timeout -k 5 "$(left 160)" "${MB[@]}" --steps 100 --rounds 10 \
      --regimes small --modes compiled --seq-lens 1024 4096 --attentions "${ATT[@]}" \
      --out "$WORK/small_compiled_triton_launcher.csv" > "$WORK/small_compiled_triton_launcher.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled_triton_launcher.log"
  say "paper batch, compiled, 1K"
  timeout -k 5 "$(left 100)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes compiled --seq-lens 1024 \
      --attentions "${ATT[@]}" --out "$WORK/paper_compiled.csv" > "$WORK/paper_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/paper_compiled.log"
  say "small batch, CUDA graphs"
  timeout -k 5 "$(left 40)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions flash sdpa --out "$WORK/small_cudagraphs.csv" > "$WORK/small_cudagraphs.log" 2>&1
  grep -h "ms/step" "$WORK/small_cudagraphs.log"
  say "small batch, eager"
  timeout -k 5 "$(left 5)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes eager --seq-lens 1024 4096 \
      --attentions "${ATT[@]}" --out "$WORK/small_eager.csv" > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
