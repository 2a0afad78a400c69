#!/usr/bin/env bash
# Device call (issues #2, #8), prepared in session 7, not run yet: the cells the committed grids
# still lack.
#   GPU 0 (#2): dense kernel, ours vs SDPA flash / cuDNN and FlexAttention, d = 32 and 64 at
#     N = 32K and 64K (never reached by a call's budget: results/kernels/README.md) and 1K (the
#     d = 64 fwd+bwd cell at 1.25x SDPA-flash, measured before the eager fast path, ac2cd77); then
#     the block-sparse forward tiles tuned on the local layout at d = 32 (#3).
#   GPU 1 (#8): the model step at the paper batch, flash vs sdpa: 2K and 8K eager and compiled
#     (the one-pass dropout backward was measured at 1K / 4K / 16K only), and CUDA graphs at 1K / 4K /
#     16K (with the triton_op form, the default on CUDA since session 7); then a torch.profiler trace of
#     the small batch at 1K compiled, flash vs sdpa (CPU-bound there: results/models/triton_op/).
# Usage (device, kind nvidia-h200-x2): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/grid_fill.sh
RECIPE=grid_fill
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --regimes paper --attentions flash sdpa --steps 30 --warmup 10)

lane0() {
  say "dense kernels, d = 32 and 64, N = 1K, 32K, 64K"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels --impls ours,sdpa_flash,sdpa_cudnn,flex --head-dims 32,64 \
      --seq-lens 1k,32k,64k --sparse-layouts none --approx none --flex-dynamic --warmup 10 --rep 50 \
      --time-budget "$(left 60)" --out "$WORK" --name dense_fill
  say "block-sparse forward tiles on the local layout, d = 32 (#3: its forward is 1.02x Flex with the BigBird-tuned tiles)"
  timeout -k 5 "$(left 5)" python3 -m kernels.tuning --sparse local --block-size 128 --head-dims 32 \
      --seq-lens 4096,16384 --passes fwd --out "$WORK/tune_sparse_local_fwd.json"
  say "lane 0 done"
}

lane1() {
  say "model step, paper batch, 2K and 8K, eager and compiled"
  timeout -k 5 "$(left 150)" "${MB[@]}" --modes eager compiled --seq-lens 2048 8192 --out "$WORK/paper_2k_8k.csv"
  say "model step, paper batch, CUDA graphs"
  timeout -k 5 "$(left 60)" "${MB[@]}" --modes compiled --compile-mode reduce-overhead --seq-lens 1024 4096 16384 \
      --out "$WORK/paper_cudagraphs.csv"
  say "profile: small batch, 1K, compiled (where the host time of the CPU-bound step goes)"
  timeout -k 5 "$(left 5)" python3 -m lra bench models --regimes small --modes compiled --attentions flash sdpa \
      --seq-lens 1024 --steps 20 --warmup 10 --profile "$WORK/profiles" --out "$WORK/small_profile.csv"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
