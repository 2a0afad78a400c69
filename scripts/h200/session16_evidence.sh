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
# (Rewritten with lib.sh's bench_cell / compile_checks / compiled_profile at the end of session 16; same runs as the call.)
RECIPE=session16_evidence
source "$(dirname "$0")/lib.sh"
ATT=(flash sdpa flash_sparse)

lane() {
  compile_checks 80
  compiled_profile 60 flash sdpa
  say "small batch, compiled, static launch (A)"
  bench_cell small_compiled 230 --steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 16384 \
      --attentions "${ATT[@]}"
  say "small batch, compiled, Triton's launcher (B)"
  TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0 bench_cell small_compiled_triton_launcher 160 --steps 100 \
      --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "paper batch, compiled, 1K"
  bench_cell paper_compiled 100 --steps 40 --rounds 4 --regimes paper --modes compiled --seq-lens 1024 --attentions "${ATT[@]}"
  say "small batch, CUDA graphs"
  bench_cell small_cudagraphs 40 --steps 100 --rounds 10 --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions flash sdpa
  say "small batch, eager"
  bench_cell small_eager 5 --steps 100 --rounds 10 --regimes small --modes eager --seq-lens 1024 4096 --attentions "${ATT[@]}"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
