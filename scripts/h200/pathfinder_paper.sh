#!/usr/bin/env bash
# Device calls (issues #7, #8): Pathfinder-32 at the paper's full length, then the transfer test.
# The pretraining is the `mini` transfer recipe's pretrain stage (lra/presets/transfer/pathx.yaml):
# the `paper` model and optimizer, 62,500 steps of 256 on the LRA-size 160,000-image training split,
# validated on all 20,000 validation images every 312 steps — the FlashAttention paper's Pathfinder
# setting (72.7 %, Table 3), one seed per GPU (seeds 0 and 1 on an x2 machine, seed 0 on one GPU).
# Minutes of it only memorise the training images (results/pathfinder/README.md); this is the run
# that can show whether our Pathfinder reproduces, and the pretrained model the transfer test needs.
#
# PHASE=pretrain (default; repeat until both lanes say "completed"): one run is ~62,500 x 12.6 ms =
# 13 minutes of training plus evaluation, more than one call, so each call trains until 70 s before
# its DEADLINE and then stops the run ($LRA_STOP_AT, lib.sh until_deadline): it saves last.ckpt at
# that step and the next call resumes it (`lra transfer` resumes an interrupted stage; a completed one is skipped).
# PHASE=finetune: Pathfinder-64 fine-tuned from seed 0's best Pathfinder-32 checkpoint (positional
# grid 2x2) on GPU 0, against the same stage from random weights on GPU 1, FT_MIN minutes each.
#
# Between calls the run tree travels (the data are regenerated: deterministic, ~50 s on 32 cores):
#   call:  run(command="OUT=$OUT LRA_GIT_REV=<rev> RUNS=.keep/runs DEADLINE=570 [PHASE=...] bash scripts/h200/pathfinder_paper.sh",
#              carry=[".keep/runs"] from the second call on)
#   here:  rm -rf .keep/runs && mkdir -p .keep/runs && cat <files_at>/pathfinder_paper_runs.tar.gz.part-* | tar xz -C .keep/runs
#          (.keep/ in .git/info/exclude)
# RUNS must be the same relative path in every call (checkpoint paths inside a run are relative).
# CPU check (tiny model and data, sdpa): DRY=1 DEADLINE=60 OUT=/tmp/o KEEP=/tmp/k RUNS=/tmp/k/r bash scripts/h200/pathfinder_paper.sh
# (interrupts the pretraining), again with DEADLINE=400 (resumes and completes it), then PHASE=finetune.
RECIPE=pathfinder_paper
source "$(dirname "$0")/lib.sh"
PHASE=${PHASE:-pretrain}
FT_MIN=${FT_MIN:-5}
N_PF32=${N_PF32:-200000}   # the LRA release size: 160,000 / 20,000 / 20,000
N_PF64=${N_PF64:-50000}    # 40,000 / 5,000 / 5,000 for the fine-tune comparison
EVAL64=${EVAL64:-2000}     # Pathfinder-64 validation images per evaluation
FLAGS=(); OVR=()           # DRY: options / overrides for the CPU check
if (( ${DRY:-0} )); then
  N_PF32=300; N_PF64=60; EVAL64=6
  FLAGS=(--attention sdpa --pretrain-attention sdpa)
  OVR=(model.dim=16 model.mlp_dim=16 model.head_dim=8 train.batch_size=8 pretrain:epochs=1.4
       pretrain:data.limit_train=240 pretrain:data.limit_eval=30)
fi
PF64_TRAIN=$(( N_PF64 * 8 / 10 ))
# the chain command: chain [FLAG ...] -- [STAGE:KEY=VALUE ...] (flags before the overrides, for argparse)
chain() {
  local flags=() ovr=()
  while (( $# )) && [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  (( $# )) && shift
  ovr=("$@")
  CMD=(python3 -m lra transfer --target pathx --preset mini --runs "$RUNS" --data-dir "$DATA" --no-progress
       --no-table "${FLAGS[@]}" "${flags[@]}" "${OVR[@]}" "${ovr[@]}")
}

say "data: Pathfinder-32 $N_PF32$([[ $PHASE == finetune ]] && echo ", Pathfinder-64 $N_PF64")"
lra data generate pathfinder32 --n "$N_PF32" --out "$DATA" --workers "$(nproc)" > "$WORK/data_pf32.log" 2>&1
if [[ "$PHASE" == finetune ]]; then
  lra data generate pathfinder64 --n "$N_PF64" --out "$DATA" --workers "$(nproc)" > "$WORK/data_pf64.log" 2>&1
fi

# pretrain seed S until 70 s before DEADLINE (lib.sh until_deadline)
pretrain() {
  say "pretrain seed $1: $(left 70) s"
  chain --until pretrain --seed "$1"
  until_deadline "$(left 70)" "${CMD[@]}"
  local rc=$?
  say "pretrain seed $1: exit $rc ($( (( rc == 0 )) && echo completed || echo 'interrupted or failed: run this phase again'))"
}
if [[ "$PHASE" == pretrain ]]; then
  lane0() { pretrain 0; }
  lane1() { pretrain 1; }
elif [[ "$PHASE" == finetune ]]; then
  lane0() {
    say "fine-tune Pathfinder-64 from seed 0 ($FT_MIN min)"
    chain --until finetune --seed 0 -- "finetune:train.max_minutes=$FT_MIN" finetune:evals_per_epoch=8 \
        "finetune:data.limit_train=$PF64_TRAIN" "finetune:data.limit_eval=$EVAL64"
    timeout -k 5 "$(left 5)" "${CMD[@]}"
  }
  lane1() {
    say "Pathfinder-64 from scratch ($FT_MIN min)"
    chain --from-scratch --seed 0 -- "scratch:train.max_minutes=$FT_MIN" scratch:evals_per_epoch=8 \
        "scratch:data.limit_train=$PF64_TRAIN" "scratch:data.limit_eval=$EVAL64"
    timeout -k 5 "$(left 5)" "${CMD[@]}"
  }
else
  echo "PHASE must be pretrain or finetune, got $PHASE" >&2; exit 2
fi
if (( NGPU >= 2 )); then run_lanes lane0 lane1
else (export CUDA_VISIBLE_DEVICES=$ONE_GPU; if [[ $PHASE == pretrain ]]; then lane0; else lane0; lane1; fi) > "$WORK/lane0.log" 2>&1
fi

collect_results
for f in $(find "$RUNS" -name metrics.csv); do   # <run id>/logs/version_<k>/metrics.csv, one version per call
  cp "$f" "$WORK/metrics_$(basename "$(dirname "$(dirname "$(dirname "$f")")")")_$(basename "$(dirname "$f")").csv"
done
pack_runs
pack
