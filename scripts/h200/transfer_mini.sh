#!/usr/bin/env bash
# Device call (issue #7): the transfer effect at a resolution one call can show — the `mini` recipe
# of lra/presets/transfer/pathx.yaml: pretrain Pathfinder-32 (1K tokens), transfer to Pathfinder-64
# (4K tokens, positional grid duplicated 2x2, as Path-64 -> Path-X), against Pathfinder-64 from
# scratch. The paper model, batch 256.
#   lane 0: pretrain Pathfinder-32 for PRE_MIN minutes, then fine-tune Pathfinder-64 for FT_MIN
#   lane 1: Pathfinder-64 from scratch for PRE_MIN + FT_MIN minutes (the same total GPU time as lane 0;
#           its curve at FT_MIN minutes is the same-fine-tuning-budget comparison)
# Why: session 3's scaled-down Path-64 -> Path-X chain (scripts/h200/transfer.sh) sat at chance in
# every stage — 2.6 minutes of Path-64 pretraining is far from leaving chance — so it could not show
# whether the transferred weights help.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> [PRE_MIN=5] [FT_MIN=2] bash scripts/h200/transfer_mini.sh
RECIPE=transfer_mini
source "$(dirname "$0")/lib.sh"
PRE_MIN=${PRE_MIN:-5}
FT_MIN=${FT_MIN:-2}
N_PF32=${N_PF32:-80000}     # 64,000 / 8,000 / 8,000
N_PF64=${N_PF64:-50000}     # 40,000 / 5,000 / 5,000
PF32_TRAIN=$(( N_PF32 * 8 / 10 )); PF64_TRAIN=$(( N_PF64 * 8 / 10 ))
EVAL=${EVAL:-2000}          # validation images per evaluation
SCRATCH_MIN=$(python3 -c "print($PRE_MIN + $FT_MIN)")

say "data: Pathfinder-32 $N_PF32, Pathfinder-64 $N_PF64"
lra data generate pathfinder32 --n "$N_PF32" --out "$DATA" --workers 16 > "$WORK/data_pf32.log" 2>&1 &
lra data generate pathfinder64 --n "$N_PF64" --out "$DATA" --workers 14 > "$WORK/data_pf64.log" 2>&1 &
wait

lane0() {
  say "pretrain Pathfinder-32 ($PRE_MIN min), fine-tune Pathfinder-64 ($FT_MIN min)"
  timeout -k 5 "$(left 5)" python3 -m lra transfer --target pathx --preset mini --runs "$RUNS" --data-dir "$DATA" \
      --no-progress "pretrain:train.max_minutes=$PRE_MIN" pretrain:evals_per_epoch=4 \
      "pretrain:data.limit_train=$PF32_TRAIN" "pretrain:data.limit_eval=$EVAL" \
      "finetune:train.max_minutes=$FT_MIN" finetune:evals_per_epoch=8 \
      "finetune:data.limit_train=$PF64_TRAIN" "finetune:data.limit_eval=$EVAL"
  say "lane 0 done"
}

lane1() {
  say "Pathfinder-64 from scratch ($SCRATCH_MIN min)"
  timeout -k 5 "$(left 5)" python3 -m lra transfer --target pathx --preset mini --from-scratch --runs "$RUNS" \
      --data-dir "$DATA" --no-progress "scratch:train.max_minutes=$SCRATCH_MIN" scratch:evals_per_epoch=8 \
      "scratch:data.limit_train=$PF64_TRAIN" "scratch:data.limit_eval=$EVAL"
  say "lane 1 done"
}

run_lanes lane0 lane1
collect_results
pack_runs   # the run tree with checkpoints, for later stages in a later session (see lib.sh)
pack
