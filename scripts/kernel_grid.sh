#!/usr/bin/env bash
# The attention-kernel grid on one GPU: our dense and block-sparse kernels against PyTorch's SDPA
# back-ends, FlexAttention and the materialised softmax; the approximate baselines; attention dropout.
# bf16, B·N = 16K tokens, hidden 2,048, not causal; medians of triton.testing.do_bench.
#
#   scripts/kernel_grid.sh OUT [MINUTES]
#
# Writes OUT/<part>.{csv,md,meta.json}, OUT/kernel_tflops.{png,pdf} and the README's headline
# OUT/headline.md. Every part resumes (`--resume` keeps the measured cells); with MINUTES no new cell
# starts after the deadline, and running the same command again measures what is missing.
set -euo pipefail
OUT=${1:?usage: scripts/kernel_grid.sh OUT [MINUTES]}
source "$(dirname "$0")/budget.sh"
budget_start "${2:-}"

# `lra bench kernels` with the settings of every part, the resume flag and the time left.
bench() {
  budget_spent && budget_stop
  local budget=()
  [[ -n "$BUDGET_DEADLINE" ]] && budget=(--time-budget "$(budget_left_s)")
  ${LRA:-lra} bench kernels --out "$OUT" --resume --warmup 10 --rep 50 "${budget[@]}" "$@"
}

LENGTHS=(1k 2k 4k 8k 16k 32k 64k)

# dense: d = 32, 64, 128, N = 1K-64K, every implementation
bench --name dense --flex-dynamic --head-dims 32 64 128 --seq-lens "${LENGTHS[@]}" \
  --sparse-layouts none --approx-attentions none

# d = 64, 128 on Hopper: the portable kernel alone, the Hopper kernels (ping-pong forward) and cuDNN
# beside `ours` (which dispatches; other GPUs: `unsupported` rows); block-sparse: ours as dispatched
# beside the portable block-sparse kernel alone
bench --name hopper --impls ours ours_portable ours_hopper_pp sdpa_cudnn --passes fwd fwd_bwd \
  --head-dims 64 128 --seq-lens 1k 2k 4k 8k 16k --sparse-impls ours_sparse ours_sparse_portable \
  --sparse-layouts bigbird local butterfly --sparse-head-dims 64 128 --sparse-seq-lens 1k 2k 4k 8k 16k \
  --approx-attentions none

# block-sparse vs FlexAttention with the identical block mask, and our dense kernel for the ratio
bench --name block_sparse --flex-dynamic --impls ours --head-dims 32 64 128 --seq-lens "${LENGTHS[@]}" \
  --sparse-layouts bigbird local butterfly --sparse-head-dims 32 64 128 --sparse-seq-lens "${LENGTHS[@]}" \
  --approx-attentions none

# approximate baselines (Performer, Linformer, BigBird through the registry)
bench --name approx --impls none --sparse-layouts none \
  --approx-attentions performer linformer bigbird --approx-seq-lens 1k 4k 16k --approx-head-dims 32 64

# attention dropout 0.1: ours against SDPA flash and cuDNN
bench --name dropout --dropout 0.1 --impls ours sdpa_flash sdpa_cudnn --head-dims 32 64 \
  --seq-lens 1k 4k 16k --sparse-layouts none --approx-attentions none

budget_spent && budget_stop
${LRA:-lra} plot kernels --kernels "$OUT/dense.csv" --out "$OUT"
# the README's headline: forward + backward ranges over N, dense per head dim, block-sparse per layout
${LRA:-lra} table kernels --kernels "$OUT/dense.csv" --kernels "$OUT/block_sparse.csv" --passes fwd_bwd \
  --out "$OUT/headline.md"
echo "kernel grid complete: $OUT" >&2
