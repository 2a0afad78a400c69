#!/usr/bin/env bash
# The FlashAttention paper's Path-X / Path-256 recipe, end to end (Dao et al. 2022, Appendix E):
#   generate data -> pretrain Path-64 -> fine-tune the target (positional grid duplicated)
#   -> (Path-X) second fine-tune from the best checkpoint -> from-scratch baseline -> tables, plots.
# Every step is resumable: rerun the same command after an interruption; finished runs are skipped,
# an interrupted one resumes from its last checkpoint, generated data sets are reused.
#
#   scripts/pathx_transfer.sh                               # the paper's recipe for Path-X (GPU)
#   TARGETS="pathx path256" scripts/pathx_transfer.sh       # both targets, one Path-64 pretraining
#   N_IMAGES=20000 EPOCHS=4 scripts/pathx_transfer.sh       # a scaled-down run (state it with results)
#   RECIPE=smoke RUNS=/tmp/runs DATA=/tmp/data scripts/pathx_transfer.sh   # CPU miniature
#
# Knobs (environment variables; empty = the recipe's value):
#   TARGETS          targets, from: pathx path256                         (default: pathx)
#   RECIPE           lra/presets/transfer/<target>.yaml recipe: <target>-transfer or smoke
#   RUNS             run folders                                          (default: runs/transfer)
#   DATA             data root                                            (default: data)
#   OUT              tables and plots                                     (default: results/transfer)
#   SEED             seed of every stage                                  (default: 0)
#   N_IMAGES         images generated per task (split 80/10/10)           (default: 200000, the LRA size)
#   N_TRAIN, N_EVAL  data.limit_train / data.limit_eval for every stage   (default: the whole splits)
#   EPOCHS           epochs of every stage; PRETRAIN_EPOCHS: pretraining only
#   SCRATCH          1: also train the from-scratch baseline (same schedule and length)  (default: 1)
#   GENERATE         1: generate the Pathfinder data first (parallel)     (default: 1; not for smoke)
#   WORKERS          generator processes                                  (default: all cores)
#   DEVICES          Lightning devices per run, e.g. 1 or 0,1             (default: auto)
#   EXTRA            more overrides, e.g. "train.batch_size=128 finetune:optim.lr=5e-5"
#   LRA              the lra command                                      (default: lra, else python -m lra)
set -euo pipefail

TARGETS=${TARGETS:-pathx}
RECIPE=${RECIPE:-}
RUNS=${RUNS:-runs/transfer}
DATA=${DATA:-data}
OUT=${OUT:-results/transfer}
SEED=${SEED:-0}
N_IMAGES=${N_IMAGES:-200000}
N_TRAIN=${N_TRAIN:-}
N_EVAL=${N_EVAL:-}
EPOCHS=${EPOCHS:-}
PRETRAIN_EPOCHS=${PRETRAIN_EPOCHS:-}
SCRATCH=${SCRATCH:-1}
GENERATE=${GENERATE:-1}
WORKERS=${WORKERS:-}
DEVICES=${DEVICES:-}
EXTRA=${EXTRA:-}
if [[ -z "${LRA:-}" ]]; then
  if command -v lra >/dev/null 2>&1; then LRA=lra; else LRA="python -m lra"; fi
fi

for target in $TARGETS; do
  case "$target" in pathx|path256) ;; *) echo "TARGETS: unknown target '$target' (pathx, path256)" >&2; exit 2 ;; esac
done

# Overrides shared by every `lra transfer` call: the same ones give the same run ids, which is what
# lets the second target reuse the Path-64 pretraining and a rerun skip what is done.
overrides=()
[[ -n "$N_TRAIN" ]] && overrides+=("data.limit_train=$N_TRAIN")
[[ -n "$N_EVAL" ]] && overrides+=("data.limit_eval=$N_EVAL")
[[ -n "$EPOCHS" ]] && overrides+=("epochs=$EPOCHS")
[[ -n "$PRETRAIN_EPOCHS" ]] && overrides+=("pretrain:epochs=$PRETRAIN_EPOCHS")
# shellcheck disable=SC2206  # EXTRA is a list of words on purpose
[[ -n "$EXTRA" ]] && overrides+=($EXTRA)

common=(--runs "$RUNS" --data-dir "$DATA" --seed "$SEED")
[[ -n "$DEVICES" ]] && common+=(--devices "$DEVICES")

run() { echo "+ $*" >&2; "$@"; }

# 1. data: the generator caches are keyed by their parameters and reused, so this is a no-op when
#    the data exist (the official release under $DATA is used instead when present).
if [[ "$GENERATE" == 1 && "${RECIPE}" != smoke ]]; then
  workers=()
  [[ -n "$WORKERS" ]] && workers=(--workers "$WORKERS")
  tasks=(pathfinder64)
  for target in $TARGETS; do tasks+=("$target"); done
  for task in "${tasks[@]}"; do
    run $LRA data generate "$task" --out "$DATA" --n "$N_IMAGES" ${workers[@]+"${workers[@]}"}
  done
fi

# 2. the chains (and their baselines); each `lra transfer` skips finished stages.
presets=()
for target in $TARGETS; do
  recipe=${RECIPE:-$target-transfer}
  run $LRA transfer --target "$target" --preset "$recipe" "${common[@]}" --no-table ${overrides[@]+"${overrides[@]}"}
  if [[ "$SCRATCH" == 1 ]]; then
    run $LRA transfer --target "$target" --preset "$recipe" "${common[@]}" --no-table --from-scratch ${overrides[@]+"${overrides[@]}"}
  fi
done

# 3. tables and figures from every run record of the chains.
mkdir -p "$OUT"
run $LRA table accuracy --runs "$RUNS" --out "$OUT/accuracy.md"
run $LRA table accuracy --runs "$RUNS" --format csv --out "$OUT/accuracy.csv"
run $LRA table efficiency --runs "$RUNS" --out "$OUT/efficiency.md"
run $LRA plot curves accuracy --runs "$RUNS" --out "$OUT/plots"
for target in $TARGETS; do
  recipe=${RECIPE:-$target-transfer}
  # Rerunning a finished chain trains nothing: it prints the per-stage summary (status, accuracy,
  # time, step time, memory) and the accuracy table; --estimate-cost the GPU-hours of the recipe
  # at the lengths used here, from the step times these runs measured.
  run $LRA transfer --target "$target" --preset "$recipe" "${common[@]}" ${overrides[@]+"${overrides[@]}"} \
    | tee "$OUT/$target-$recipe-summary.md"
  if [[ "$SCRATCH" == 1 ]]; then
    run $LRA transfer --target "$target" --preset "$recipe" "${common[@]}" --from-scratch \
      ${overrides[@]+"${overrides[@]}"} | tee "$OUT/$target-$recipe-scratch-summary.md"
  fi
  run $LRA transfer --target "$target" --preset "$recipe" "${common[@]}" --estimate-cost \
    ${overrides[@]+"${overrides[@]}"} | tee "$OUT/$target-$recipe-cost.md"
done
echo "done: tables and plots in $OUT, runs in $RUNS"
