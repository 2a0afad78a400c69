#!/usr/bin/env bash
# Device calls (issue #7), prepared in session 9, run in session 10 (results/transfer/README.md, "Session 10"): does a Pathfinder-32 model that has
# learned the task transfer to Pathfinder-64? Session 9's pathfinder_augment_long.sh run
# L1_paper_dihedral (the paper model with dihedral augmentation, easy images) is the first of ours to
# leave chance: validation 50 % until ~14K steps, then 59-65 % from 15K on (results/pathfinder/long/).
# Its best checkpoint starts a Pathfinder-64 run (4,096 tokens; every weight copied, the learned
# positional grid duplicated 2x2 -- the recipe's Path-64 -> Path-X step one resolution lower), against
# the identical run from random weights:
#   lane 0: --init-from the best Pathfinder-32 checkpoint under $INIT_RUNS;   lane 1: from scratch.
# Both: the paper model and optimizer (lr 1e-4, AdamW), easy images (contour length 6, as the
# pretraining), data.augment=dihedral (without it our runs memorise), batch $BATCH, 312 warm-up steps
# then cosine decay over $STEPS steps, validation on 2,000 images every $VAL steps. Two GPUs: one lane
# each; one GPU: both lanes side by side on it (equal shares, so the comparison stays fair).
# A run is longer than a call: each call trains until 70 s before DEADLINE ($LRA_STOP_AT, lib.sh
# until_deadline: the run stops as on Ctrl-C and saves last.ckpt at that step); the next call
# resumes it. The run tree travels between calls as in pathfinder_augment_long.sh, in the same
# folder as the pretraining (its checkpoint is the input):
#   call:  run(command="OUT=$OUT LRA_GIT_REV=<rev> RUNS=.keep/runs9 DEADLINE=575 bash scripts/h200/pathfinder64_transfer.sh",
#              carry=[".keep/runs9"])
#   here:  cat <files_at>/pathfinder64_transfer_runs.tar.gz.part-* | tar xz -C .keep/runs9
# CPU check (tiny model and data, sdpa; trains its own tiny Pathfinder-32 run as the checkpoint):
#   DRY=1 DEADLINE=150 OUT=/tmp/o KEEP=/tmp/k RUNS=/tmp/k/r bash scripts/h200/pathfinder64_transfer.sh
#
# TARGET=pathx (session 10): the next resolution, the recipe's own step -- Path-X (16,384 tokens, grid
# duplicated 2x2 again) fine-tuned from the best checkpoint of the Pathfinder-64 run above
# (T1_pf64_from_pf32) against Path-X from scratch; batch 32 (a step at the paper's 256 takes ~1 s),
# one epoch of linear warm-up (500 steps), 20,000 easy images (1,000 evaluated), validation every 200 steps:
#   call:  run(command="OUT=$OUT TARGET=pathx LRA_GIT_REV=<rev> RUNS=.keep/runs9 DEADLINE=575 bash scripts/h200/pathfinder64_transfer.sh",
#              carry=[".keep/runs9"])
#   here:  cat <files_at>/pathx_transfer_runs.tar.gz.part-* | tar xz -C .keep/runs9
# CPU check: the pathfinder64 dry run above, then the same line with TARGET=pathx.
# Continuing the Path-X runs (session 12: X1 at step 3,462, X2 at 5,916 of 15,000; their trees, 40 MB,
# are in .keep/pathx12 -- carrying .keep/runs9 beside them would pass the 64 MiB a call takes). Always
# carry the trees (the device removes un-carried ignored folders between calls) and name the *same*
# INIT as when X1 started (its path is part of X1's run id; the file is not read on a resume):
#   call:  run(command="OUT=$OUT TARGET=pathx INIT=.keep/runs9/T1_pf64_from_pf32/pathfinder64/flash/paper-n4096-s0-89fba98d/checkpoints/best-step10500.ckpt RUNS=.keep/pathx12 LRA_GIT_REV=<rev> DEADLINE=575 bash scripts/h200/pathfinder64_transfer.sh",
#              carry=[".keep/pathx12"])
#   here:  cat <files_at>/pathx_transfer_runs.tar.gz.part-* | tar xz -C .keep/pathx12
TARGET=${TARGET:-pathfinder64}
case $TARGET in
  pathfinder64) RECIPE=pathfinder64_transfer ;;
  pathx) RECIPE=pathx_transfer ;;
  *) echo "TARGET=$TARGET: use pathfinder64 or pathx" >&2; exit 2 ;;
esac
source "$(dirname "$0")/lib.sh"
ATTN=flash
MODEL=()
if [[ $TARGET == pathfinder64 ]]; then
  N=${N:-60000}              # Pathfinder-64 easy: 48,000 / 6,000 / 6,000 images
  EVAL=${EVAL:-2000}
  BATCH=${BATCH:-128}
  STEPS=${STEPS:-30000}
  VAL=${VAL:-500}
  WARMUP=312
  INIT_RUNS=${INIT_RUNS:-$RUNS/L1_paper_dihedral}
  INIT_TASK=pathfinder32
  LANE_RUNS=(T1_pf64_from_pf32 T2_pf64_scratch)
else
  N=${N:-20000}              # Path-X easy: 16,000 / 2,000 / 2,000 images
  EVAL=${EVAL:-1000}
  BATCH=${BATCH:-32}
  STEPS=${STEPS:-15000}      # 30 epochs of 16,000 at batch 32
  VAL=${VAL:-200}
  WARMUP=500                 # one epoch
  INIT_RUNS=${INIT_RUNS:-$RUNS/T1_pf64_from_pf32}
  INIT_TASK=pathfinder64
  LANE_RUNS=(X1_pathx_from_pf64 X2_pathx_scratch)
fi
if (( ${DRY:-0} )); then
  N=200; EVAL=16; ATTN=sdpa; BATCH=4; STEPS=40; VAL=10; WARMUP=4
  MODEL=(model.dim=16 model.depth=1 model.num_heads=2 model.head_dim=8 model.mlp_dim=32)
  [[ $TARGET == pathx ]] && BATCH=1   # sdpa's CPU backward at 16K tokens: ~8 GB a sequence
fi
if (( ${DRY:-0} )) && [[ $TARGET == pathfinder64 ]]; then
  say "dry run: a tiny Pathfinder-32 run to transfer from"
  lra data generate pathfinder32 --n 200 --difficulty easy --out "$DATA" > "$WORK/data_pf32.log" 2>&1
  lra train --task pathfinder32 --attention sdpa --preset paper --runs-dir "$INIT_RUNS" --data-dir "$DATA" \
      --no-progress data.difficulty=easy train.max_steps=20 optim.warmup_steps=2 train.batch_size=4 train.val_check_interval=10 \
      data.limit_eval=16 "${MODEL[@]}" > "$WORK/pretrain_dry.log" 2>&1
fi

# INIT=<checkpoint path>: name it instead of finding it (its path is part of the runs' ids; a run
# that resumes from its own last.ckpt does not read it, so a call that only continues the runs need
# not carry it -- see the header's Path-X continuation)
INIT=${INIT:-$(find "$INIT_RUNS" -path "*$INIT_TASK*" -name 'best-*.ckpt' 2>/dev/null | sort -V | tail -1)}
if [[ -z $INIT ]]; then
  say "no best-*.ckpt of a $INIT_TASK run under $INIT_RUNS: carry the run tree (header)"; exit 2
fi
say "transfer from $INIT"

say "data: $TARGET, $N easy images"
lra data generate "$TARGET" --n "$N" --difficulty easy --out "$DATA" --workers "$(nproc)" > "$WORK/data_$TARGET.log" 2>&1

# stage NAME [ARG ...]: one $TARGET run until 70 s before DEADLINE (lib.sh train_until_deadline)
stage() {
  local name=$1; shift
  train_until_deadline "$name" python3 -m lra train --task "$TARGET" --attention "$ATTN" --preset paper \
      --runs-dir "$RUNS/$name" --data-dir "$DATA" --no-progress --resume "$@" data.difficulty=easy \
      data.augment=dihedral "train.batch_size=$BATCH" "train.max_steps=$STEPS" "optim.warmup_steps=$WARMUP" \
      optim.schedule=cosine "train.val_check_interval=$VAL" "data.limit_train=$(( N * 8 / 10 ))" \
      "data.limit_eval=$EVAL" "${MODEL[@]}"
}
lane0() { stage "${LANE_RUNS[0]}" --init-from "$INIT"; }
lane1() { stage "${LANE_RUNS[1]}"; }
if (( NGPU >= 2 )); then run_lanes lane0 lane1
else (export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane0 & lane1 & wait) > "$WORK/lane0.log" 2>&1
fi

# each lane's best checkpoint on the test split (`lra eval`; the runs are unfinished, so their records
# carry no test accuracy yet): eager, a few seconds
for name in "${LANE_RUNS[@]}"; do
  run_dir=$(dirname "$(find "$RUNS/$name" -name config.yaml 2>/dev/null | head -1)")
  [[ -d $run_dir/checkpoints ]] || continue
  timeout -k 5 "$(left 5)" python3 -m lra eval "$run_dir" --split test --no-compile --no-progress \
      --data-dir "$DATA" --out "$WORK/test_$name.json" > "$WORK/test_$name.log" 2>&1
  say "$name: $(tail -2 "$WORK/test_$name.log" | head -1)"
done
for name in "${LANE_RUNS[@]}"; do
  collect_results "$RUNS/$name"
  join_metrics "$RUNS/$name" "$WORK/metrics_$name.csv"
done
pack_runs "${LANE_RUNS[@]}"   # the lanes' runs only: the carried input run is already where it came from
pack
