#!/usr/bin/env bash
# The LRA accuracy table of record: ListOps and Pathfinder-32 with the published setting (`paper`
# preset) for every attention and three seeds, then the tables and figures.
#
#   scripts/lra_table.sh OUT [MINUTES]
#
# Data in $DATA (default OUT/data; generated once, reused), runs in OUT/runs, solo speed benchmarks
# in OUT/speed (once the runs are done), the training step across lengths in OUT/speed/efficiency.csv
# and OUT/efficiency.md, tables in OUT/table.{md,csv,tex} (its compact view: OUT/headline.md), figures in
# OUT/plots.
# RUNS_PER_GPU runs share each GPU (default 7). With MINUTES every run stops resumably at the deadline; running
# the same command again skips completed runs and resumes the others from their last checkpoint.
# A part of the grid: TASKS, ATTENTIONS, SEEDS (space-separated lists; default the whole table).
# COMPILE_MODE=reduce-overhead trains under CUDA graphs (a speed setting; the run ids stay the same).
set -euo pipefail
OUT=${1:?usage: scripts/lra_table.sh OUT [MINUTES]}
source "$(dirname "$0")/budget.sh"
budget_start "${2:-}"
DATA=${DATA:-$OUT/data}
RUNS=$OUT/runs
RUNS_PER_GPU=${RUNS_PER_GPU:-7}
read -r -a TASKS <<< "${TASKS:-listops pathfinder32}"
ALL_ATTENTIONS="softmax sdpa flash flash_sparse performer linformer bigbird"
read -r -a ATTENTIONS <<< "${ATTENTIONS:-$ALL_ATTENTIONS}"
read -r -a SEEDS <<< "${SEEDS:-0 1 2}"
mode=()
[[ -n "${COMPILE_MODE:-}" ]] && mode=(--compile-mode "$COMPILE_MODE")

# data: ListOps (96,000 / 2,000 / 2,000 expressions), Pathfinder-32 (200,000 hard images, 80/10/10)
for task in "${TASKS[@]}"; do
  ${LRA:-lra} data generate "$task" --data-dir "$DATA"
done

budget_spent && budget_stop
budget=()
[[ -n "$BUDGET_DEADLINE" ]] && budget=(--budget-minutes "$(budget_left_min)")
sweep_rc=0
${LRA:-lra} sweep --preset paper --tasks "${TASKS[@]}" --attentions "${ATTENTIONS[@]}" --seeds "${SEEDS[@]}" \
  --runs-per-gpu "$RUNS_PER_GPU" "${mode[@]}" "${budget[@]}" --runs-dir "$RUNS" --data-dir "$DATA" || sweep_rc=$?

# speed column: each attention alone on the GPU at its task's training batch (the runs share the GPU,
# so their own step times stay out of the speed figures); batch x length of the paper presets; all
# seven also when only some are trained, since the speed-ups are relative to softmax (a minute or two)
declare -A TOKENS=([listops]=64000 [pathfinder32]=262144) LENGTH=([listops]=2000 [pathfinder32]=1024)
speed=()
for task in "${TASKS[@]}"; do
  [[ -n "${TOKENS[$task]:-}" ]] || continue
  budget_spent || ${LRA:-lra} bench models --tokens-per-batch "${TOKENS[$task]}" --seq-lens "${LENGTH[$task]}" \
    --modes compiled --steps 30 --warmup 10 --attentions $ALL_ATTENTIONS --resume \
    --out "$OUT/speed/bench_$task.csv"
  [[ -f "$OUT/speed/bench_$task.csv" ]] && speed+=(--speed "$OUT/speed/bench_$task.csv")
done

# the efficiency half of the table: the same model's training step and peak memory for every
# attention at N = 1K-16K at the Pathfinder batch (256 x 1K tokens), compiled, alone on the GPU (out of
# memory cells marked); measured once (cells resume), stopped at the deadline
if ! budget_spent; then
  timeout "$(budget_left_s)" ${LRA:-lra} bench models --regimes paper --seq-lens 1K 2K 4K 8K 16K --modes compiled \
    --steps 20 --warmup 5 --attentions $ALL_ATTENTIONS --resume --out "$OUT/speed/efficiency.csv" || (( $? == 124 ))
fi
[[ -f "$OUT/speed/efficiency.csv" ]] && ${LRA:-lra} table efficiency --runs-dir "$RUNS" \
  --bench "$OUT/speed/efficiency.csv" --out "$OUT/efficiency.md"

# tables and figures of what has completed (a partial table says n = completed seeds per cell)
${LRA:-lra} table --runs-dir "$RUNS" "${speed[@]}" --out "$OUT/table.md"
${LRA:-lra} table headline --runs-dir "$RUNS" "${speed[@]}" --out "$OUT/headline.md"
${LRA:-lra} table --runs-dir "$RUNS" "${speed[@]}" --format csv --out "$OUT/table.csv"
${LRA:-lra} table --runs-dir "$RUNS" "${speed[@]}" --format latex --out "$OUT/table.tex"
${LRA:-lra} plot --runs-dir "$RUNS" "${speed[@]}" --out "$OUT/plots"
budget_spent && budget_stop
# a failed or out-of-memory run is in its record and the tables; the sweep retries it when rerun
(( sweep_rc == 0 )) || exit "$sweep_rc"
echo "LRA table complete: $OUT/table.md" >&2
