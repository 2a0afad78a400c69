#!/usr/bin/env bash
# The FlashAttention paper's route to Path-X and Path-256 (Dao et al. 2022, Appendix E), as chains
# of `lra train` runs: pretrain Path-64 -> fine-tune the target from that checkpoint (positional
# grid duplicated) -> (Path-X) fine-tune again from the best checkpoint; and each target from
# random weights with the same schedule, the baseline.
#
#   scripts/transfer_chain.sh OUT [MINUTES]
#
# Runs in OUT/runs, data in $DATA (default OUT/data), tables in OUT/*.md, figures in OUT/plots.
#   TARGETS   targets, from: pathx path256                     (default: pathx path256)
#   RECIPE    recipe of lra/presets/transfer/<target>.yaml     (default: <target>-transfer, the paper's;
#             pathx also: curriculum = Pathfinder-32 -> 64 -> Path-X on easy images with augmentation)
#   SEED      seed of every stage (default 0); DEVICES: Lightning devices per run (default: auto)
#   EXTRA     more [STAGE:]KEY=VALUE overrides, e.g. "data.limit_train=20000 epochs=4"
# Completed stages are skipped and an interrupted one resumes from its last checkpoint. With
# MINUTES every run stops at the deadline as on Ctrl-C (last.ckpt at that step, $LRA_STOP_AT of
# `lra train`); running the same command again continues.
set -euo pipefail
OUT=${1:?usage: scripts/transfer_chain.sh OUT [MINUTES]}
source "$(dirname "$0")/budget.sh"
budget_start "${2:-}"
[[ -n "$BUDGET_DEADLINE" ]] && export LRA_STOP_AT=$BUDGET_DEADLINE
TARGETS=${TARGETS:-pathx path256}
RUNS=$OUT/runs
common=(--runs-dir "$RUNS" --data-dir "${DATA:-$OUT/data}" --seed "${SEED:-0}")
[[ -n "${DEVICES:-}" ]] && common+=(--devices "$DEVICES")
# shellcheck disable=SC2206  # EXTRA is a list of words on purpose
overrides=(${EXTRA:-})

# transfer TARGET ARGS...: one `lra transfer` chain; a stop at the deadline ends the recipe quietly
transfer() {
  budget_spent && budget_stop
  local target=$1; shift
  local rc=0
  ${LRA:-lra} transfer --target "$target" --preset "${RECIPE:-$target-transfer}" "${common[@]}" "$@" \
    "${overrides[@]}" || rc=$?
  (( rc == 0 )) && return 0
  budget_spent && budget_stop
  exit "$rc"
}

for target in $TARGETS; do
  transfer "$target" --no-table
  transfer "$target" --no-table --from-scratch
done

# every chain is complete: the same commands now train nothing and print the per-stage summaries;
# --estimate-cost prices the recipe from the step times these runs measured
mkdir -p "$OUT"
for target in $TARGETS; do
  transfer "$target" | tee "$OUT/$target-summary.md"
  transfer "$target" --from-scratch | tee "$OUT/$target-scratch-summary.md"
  transfer "$target" --estimate-cost | tee "$OUT/$target-cost.md"
done
${LRA:-lra} table accuracy --runs-dir "$RUNS" --out "$OUT/accuracy.md"
${LRA:-lra} plot curves --runs-dir "$RUNS" --out "$OUT/plots"
echo "transfer chains complete: $OUT" >&2
