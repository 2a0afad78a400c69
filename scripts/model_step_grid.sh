#!/usr/bin/env bash
# The LRA model's training step (paper size, attention dropout 0.1: forward, backward, clip, AdamW)
# per attention, length, batch regime and mode, on one GPU. The attentions of a cell are timed in
# rotating rounds (--interleave), so that host-bound cells compare within the same time windows.
#
#   scripts/model_step_grid.sh OUT [MINUTES]
#
# Writes OUT/<regime>_<mode>.{csv,md,meta.json} (paper batch = 262,144 tokens per step, small =
# 32,768; modes eager, compiled, cudagraphs = torch.compile mode reduce-overhead), OUT/user_<mode>.*
# (`--model user`: the kernel as a drop-in in a plain torch.nn model), the baselines at the small
# batch up to 64K, OUT/efficiency.md and the README's compact views OUT/steps.md (the LRA model) and
# OUT/user_steps.md (the user's model). Every file resumes
# (`--resume` keeps measured cells); with MINUTES no new file is started after the deadline, and
# running the same command again measures what is missing.
set -euo pipefail
OUT=${1:?usage: scripts/model_step_grid.sh OUT [MINUTES]}
source "$(dirname "$0")/budget.sh"
budget_start "${2:-}"
mkdir -p "$OUT"

EXACT=(softmax sdpa flash flash_sparse)
LENGTHS=(1024 4096 16384)

# bench NAME ARGS...: one `lra bench models` file, resumed
bench() {
  budget_spent && budget_stop
  local name=$1; shift
  ${LRA:-lra} bench models --interleave --resume --warmup 10 --out "$OUT/$name.csv" "$@"
}

# paper batch: GPU-bound; 40 steps in 4 rounds per attention
bench paper_eager      --regimes paper --modes eager    --steps 40 --rounds 4 --seq-lens "${LENGTHS[@]}" --attentions "${EXACT[@]}"
bench paper_compiled   --regimes paper --modes compiled --steps 40 --rounds 4 --seq-lens "${LENGTHS[@]}" --attentions "${EXACT[@]}"
# small batch: bound by the host below 16K; more steps and rounds
bench small_eager      --regimes small --modes eager    --steps 100 --rounds 10 --seq-lens "${LENGTHS[@]}" --attentions "${EXACT[@]}"
bench small_compiled   --regimes small --modes compiled --steps 100 --rounds 10 --seq-lens "${LENGTHS[@]}" --attentions "${EXACT[@]}"
bench small_cudagraphs --regimes small --modes compiled --compile-mode reduce-overhead --steps 100 --rounds 10 \
  --seq-lens 1024 4096 --attentions sdpa flash flash_sparse
# a user's own model (plain torch.nn, q/k/v strided views) calling our kernel against SDPA's back-ends
USER=(flash sdpa sdpa_flash)
bench user_eager    --model user --regimes small paper --modes eager    --steps 40 --rounds 4 --seq-lens "${LENGTHS[@]}" --attentions "${USER[@]}"
bench user_compiled --model user --regimes small paper --modes compiled --steps 40 --rounds 4 --seq-lens "${LENGTHS[@]}" --attentions "${USER[@]}"
# approximate baselines next to our kernels, small batch, up to 64K tokens
bench small_eager_baselines --regimes small --modes eager --steps 20 \
  --seq-lens "${LENGTHS[@]}" --long-seq-lens 32768 65536 --attentions performer linformer bigbird flash flash_sparse

budget_spent && budget_stop
shopt -s nullglob
csvs=()
for f in "$OUT"/*.csv; do csvs+=(--bench "$f"); done
mkdir -p "$OUT/no-runs"
${LRA:-lra} table efficiency --runs-dir "$OUT/no-runs" "${csvs[@]}" --out "$OUT/efficiency.md"
# steps OUTFILE "ATTENTIONS" NAME...: `lra table steps` over the files NAME.csv that exist
steps() {
  local out=$1 attentions=$2 name benches=()
  shift 2
  for name in "$@"; do
    [[ -f "$OUT/$name.csv" ]] && benches+=(--bench "$OUT/$name.csv")
  done
  (( ${#benches[@]} )) || return 0
  # shellcheck disable=SC2086  # ATTENTIONS is a word list
  ${LRA:-lra} table steps --runs-dir "$OUT/no-runs" --baseline sdpa --attentions $attentions "${benches[@]}" \
    --out "$OUT/$out"
}
# the README's compact view: SDPA / flash / flash_sparse per batch and mode of the LRA model
steps steps.md "sdpa flash flash_sparse" paper_compiled paper_eager small_compiled small_eager
# the same view of the user's own model: SDPA cuDNN / SDPA FlashAttention-2 / flash
steps user_steps.md "sdpa sdpa_flash flash" user_compiled user_eager
echo "model-step grid complete: $OUT" >&2
