#!/usr/bin/env bash
# Device call (issue #8), prepared in session 6, extended in session 7: the small batch regime (32K
# tokens per step) with nothing else on the machine. That step is launch-bound (3.4-9 ms for ~2 ms of
# GPU work at 1K), and every earlier measurement shared the host CPU with another lane, so the same
# sdpa cell moved by up to 2x between calls (results/models/dropout_bwd/README.md). One lane, one GPU:
# 1. the torch.compile tests on the GPU with our ops in the `triton_op` form
#    ($LRA_KERNELS_COMPILE_OP=triton_op: Inductor launches the Triton kernels from its own generated
#    code, no Python launcher per call, and CUDA graphs can capture them; it failed on torch 2.11 in
#    session 3, the two causes were addressed but never re-run on a GPU);
# 2. flash (the one-pass dropout backward, the default since 8878428) and sdpa, eager and compiled
#    (custom_op form), 1K / 4K / 16K, 50 timed steps, every cell twice, in the order flash-sdpa and
#    then sdpa-flash, so that drift shows as a difference between the two passes;
# 3. compiled and CUDA graphs (reduce-overhead) with the triton_op form for flash, and sdpa's CUDA
#    graphs anchor (only if the tests of 1. passed).
# (The compile form is pinned per step: since session 7 triton_op is the default on CUDA.)
# Usage (device, kind nvidia-h200): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=380 bash scripts/h200/small_batch_solo.sh
RECIPE=small_batch_solo
source "$(dirname "$0")/lib.sh"
export CUDA_VISIBLE_DEVICES=0
MB=(python3 -m lra bench models --regimes small --seq-lens 1024 4096 16384 --steps 50 --warmup 10)

{
  triton_op_compile_tests 90
  for order in "flash sdpa" "sdpa flash"; do
    tag=${order// /_}
    say "eager and compiled (custom_op), order: $order"
    LRA_KERNELS_COMPILE_OP=custom_op timeout -k 5 "$(left 150)" "${MB[@]}" --modes eager compiled --attentions $order \
        --out "$WORK/small_$tag.csv"
  done
  if (( tests_rc == 0 )); then
    say "compiled, triton_op form: flash"
    LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 70)" "${MB[@]}" --modes compiled --attentions flash \
        --out "$WORK/small_triton_op.csv"
    say "CUDA graphs (reduce-overhead), triton_op form: flash, then sdpa"
    LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$(left 5)" "${MB[@]}" --modes compiled --compile-mode reduce-overhead \
        --attentions flash sdpa --out "$WORK/small_cudagraphs_triton_op.csv"
  else
    say "CUDA graphs (reduce-overhead), custom_op form: flash, then sdpa"
    LRA_KERNELS_COMPILE_OP=custom_op timeout -k 5 "$(left 5)" "${MB[@]}" --modes compiled --compile-mode reduce-overhead \
        --attentions flash sdpa --out "$WORK/small_cudagraphs.csv"
  fi
  say "done"
} > "$WORK/lane0.log" 2>&1
pack
