#!/usr/bin/env bash
# Device call (issue #7): the transfer effect at a resolution one call can show — the `mini` recipe
# of lra/presets/transfer/pathx.yaml: pretrain Pathfinder-32 (1K tokens), transfer to Pathfinder-64
# (4K tokens, positional grid duplicated 2x2, as Path-64 -> Path-X), against Pathfinder-64 from
# scratch on the same fine-tuning budget. The paper model, batch 256.
#   phase 1 (PRE_MIN minutes): two Pathfinder-32 pretrainings side by side, one per GPU — the paper's
#           learning rate (1e-4) and LR_B — because no Pathfinder run of ours has left chance yet and
#           a call cannot wait to see whether one does; Pathfinder-64 is generated meanwhile.
#   phase 2 (FT_MIN minutes): GPU 0 fine-tunes Pathfinder-64 from the better pretraining (best
#           validation accuracy); GPU 1 trains Pathfinder-64 from scratch with the identical stage
#           (hyper-parameters, schedule, minutes, a GPU of its own). Only the initial weights differ;
#           which pretraining fed the fine-tune does not bias that comparison.
# Why: session 3's scaled-down Path-64 -> Path-X chain (scripts/h200/transfer.sh) sat at chance in
# every stage — 2.6 minutes of Path-64 pretraining is far from leaving chance.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> [PRE_MIN=5] [FT_MIN=2] [LR_B=5e-4] bash scripts/h200/transfer_mini.sh
# CPU dry run of the commands (tiny data, no training): DRY=1 OUT=/tmp/o KEEP=/tmp/k bash scripts/h200/transfer_mini.sh
RECIPE=transfer_mini
source "$(dirname "$0")/lib.sh"
PRE_MIN=${PRE_MIN:-5}
FT_MIN=${FT_MIN:-2}
LR_B=${LR_B:-5e-4}
N_PF32=${N_PF32:-80000}     # 64,000 / 8,000 / 8,000
N_PF64=${N_PF64:-50000}     # 40,000 / 5,000 / 5,000
EVAL=${EVAL:-2000}          # validation images per evaluation
DRY=${DRY:-0}
if (( DRY )); then N_PF32=200; N_PF64=100; EVAL=8; fi
PF32_TRAIN=$(( N_PF32 * 8 / 10 )); PF64_TRAIN=$(( N_PF64 * 8 / 10 ))
dry() { (( DRY )) && echo --dry-run; }

# Stage settings shared by every command of a variant, so that phase 2 finds phase 1's run (the run
# id hashes the config, train.max_minutes included).
PRE_COMMON=("pretrain:train.max_minutes=$PRE_MIN" pretrain:evals_per_epoch=4
            "pretrain:data.limit_train=$PF32_TRAIN" "pretrain:data.limit_eval=$EVAL")
PRE_A=()                                                         # the recipe: lr 1e-4
PRE_B=("pretrain:optim.lr=$LR_B" "pretrain:preset=mini-pretrain-lr$LR_B")
FT=("finetune:train.max_minutes=$FT_MIN" finetune:evals_per_epoch=8
    "finetune:data.limit_train=$PF64_TRAIN" "finetune:data.limit_eval=$EVAL")
SCRATCH=("scratch:train.max_minutes=$FT_MIN" scratch:evals_per_epoch=8
         "scratch:data.limit_train=$PF64_TRAIN" "scratch:data.limit_eval=$EVAL")
chain() { timeout -k 5 "$(left 5)" python3 -m lra transfer --target pathx --preset mini --runs "$RUNS" \
            --data-dir "$DATA" --no-progress $(dry) "$@"; }

say "data: Pathfinder-32 $N_PF32 (now), Pathfinder-64 $N_PF64 (during phase 1)"
lra data generate pathfinder32 --n "$N_PF32" --out "$DATA" --workers 28 > "$WORK/data_pf32.log" 2>&1
lra data generate pathfinder64 --n "$N_PF64" --out "$DATA" --workers 22 > "$WORK/data_pf64.log" 2>&1 &
GEN64=$!

lane0() { say "pretrain Pathfinder-32, lr 1e-4 ($PRE_MIN min)"; chain --until pretrain "${PRE_COMMON[@]}" "${PRE_A[@]}"; }
lane1() { say "pretrain Pathfinder-32, lr $LR_B ($PRE_MIN min)"; chain --until pretrain "${PRE_COMMON[@]}" "${PRE_B[@]}"; }
run_lanes lane0 lane1
mv "$WORK/lane0.log" "$WORK/lane0_pretrain.log"; mv "$WORK/lane1.log" "$WORK/lane1_pretrain.log"
wait $GEN64
say "Pathfinder-64 data ready"

# the better pretraining by best validation accuracy (ties: the recipe's)
best_val() { python3 -c "import glob, json, sys
accs = [json.load(open(f)).get('best_val_acc') or 0 for f in glob.glob(sys.argv[1])]
print(max(accs, default=0))" "$RUNS/pathfinder32/flash/$1-n1024-*/result.json"; }
ACC_A=$(best_val mini-pretrain); ACC_B=$(best_val "mini-pretrain-lr$LR_B")
if python3 -c "import sys; sys.exit(not float('$ACC_B') > float('$ACC_A'))"; then PRE_PICK=("${PRE_B[@]}"); PICK=B; else PRE_PICK=("${PRE_A[@]}"); PICK=A; fi
say "best val: lr 1e-4 $ACC_A, lr $LR_B $ACC_B -> fine-tune from $PICK"

lane0() { say "fine-tune Pathfinder-64 from pretraining $PICK ($FT_MIN min)"; chain --until finetune "${PRE_COMMON[@]}" "${PRE_PICK[@]}" "${FT[@]}"; }
lane1() { say "Pathfinder-64 from scratch ($FT_MIN min)"; chain --from-scratch "${SCRATCH[@]}"; }
run_lanes lane0 lane1
mv "$WORK/lane0.log" "$WORK/lane0_finetune.log"; mv "$WORK/lane1.log" "$WORK/lane1_scratch.log"
collect_results
pack_runs   # the run tree with checkpoints, for later stages in a later session (see lib.sh)
pack
