#!/usr/bin/env bash
# Device call (issue #8), session 14, after launch_plans_check.sh: the small batch (32K tokens) with
# launch plans, and what is left there. One GPU, in order:
#   1. scripts/h200/host_overhead.py --profile: host time per attention core by launch mode, and a
#      cProfile of the planned packed call (where the host time that is left goes);
#   2. `lra bench models --interleave`, small batch, eager, 1K / 4K: flash, sdpa, flash_sparse (again, with
#      peak memory now charging the GPU libraries' workspaces to every model alike);
#   3. the same, compiled (default mode), 1K / 4K / 16K: flash, sdpa, flash_sparse;
#   4. the same under CUDA graphs (--compile-mode reduce-overhead), 1K / 4K: flash, sdpa;
#   5. kernels.tuning at the small batch's shape (B 32 x H 2 x N 1K, d 32, dropout 0.1, one-pass
#      backward): forward and dK/dV candidates, with what is left of the call.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=570 bash scripts/h200/small_batch_followup.sh
RECIPE=small_batch_followup
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10 --regimes small)

lane() {
  say "host time per attention call, by launch mode; cProfile of the planned call"
  timeout -k 5 120 python3 scripts/h200/host_overhead.py --profile 300 --out "$WORK/host_overhead.md" \
      > "$WORK/host_overhead.log" 2>&1
  sed -n 1,20p "$WORK/host_overhead.md"
  say "small batch, eager, interleaved"
  timeout -k 5 "$(left 300)" "${MB[@]}" --steps 100 --rounds 10 --modes eager --seq-lens 1024 4096 \
      --attentions flash sdpa flash_sparse --resume --out "$WORK/small_eager.csv" > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "small batch, compiled, interleaved"
  timeout -k 5 "$(left 150)" "${MB[@]}" --steps 100 --rounds 10 --modes compiled --seq-lens 1024 4096 16384 \
      --attentions flash sdpa flash_sparse --resume --out "$WORK/small_compiled.csv" > "$WORK/small_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled.log"
  say "small batch, CUDA graphs, interleaved"
  timeout -k 5 "$(left 70)" "${MB[@]}" --steps 100 --rounds 10 --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions flash sdpa --resume --out "$WORK/small_cudagraphs.csv" \
      > "$WORK/small_cudagraphs.log" 2>&1
  grep -h "ms/step" "$WORK/small_cudagraphs.log"
  say "tiles at the small batch's shape"
  timeout -k 5 "$(left 10)" python3 -m kernels.tuning --head-dims 32 --seq-lens 1024 --tokens 32768 --hidden 64 \
      --dropout 0.1 --passes fwd,dkdv --out "$WORK/tune_small_d32.json" > "$WORK/tune_small.log" 2>&1
  tail -12 "$WORK/tune_small.log"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
