#!/usr/bin/env bash
# Device calls (issue #7), prepared in session 6, revised in session 7, not run yet: the paper's full
# schedule on easy images. Sessions 6-7 (results/pathfinder/README.md): in 7-8 minute probes the
# paper model memorises 80,000-200,000 easy images while validation stays at chance; the dihedral
# augmentation (1.6M distinct training sequences) stops the memorising without generalisation in
# 19.5K steps; a continuous pixel embedding (model.pixel_embedding=linear) fits nothing at all in 15K
# steps. What no probe could afford is the paper's length. Both lanes train the paper model (dim 64,
# 2 layers, 2 heads x 32, token pixels, learned grid positions) on easy images at lr 1e-4, batch 256,
# 312 warm-up steps, linear decay, for the paper's 62,500 steps (~12.6 ms/step alone on an H200: ~14
# min, two calls), validating on 2,000 images every 625 steps:
#   GPU 0: with data.augment=dihedral (cannot memorise: a rising training accuracy is generalisation);
#   GPU 1: without augmentation (the paper setting exactly: does it generalise after memorising?).
# LANES=dihedral: only the first run, alone on one GPU (session 9: GPU 0 of an x2 call whose GPU 1
# runs another recipe; see lib.sh on sharing a call).
# WIDE=1: GPU 1 runs a larger model instead (dim 128, 4 layers, 4 heads x 32, MLP 256, lr 5e-4,
# 20,000 steps, dihedral; about 3x the step time: session 7's H7 ran 89.8 ms/step four to a GPU).
# A run is longer than a call: each call trains until 70 s before DEADLINE ($LRA_STOP_AT, lib.sh
# until_deadline: the run stops as on Ctrl-C and saves last.ckpt at that step); the next call
# resumes it (`lra train --resume`). Between calls the run tree travels:
#   call:  run(command="OUT=$OUT LRA_GIT_REV=<rev> RUNS=.keep/runs DEADLINE=570 bash scripts/h200/pathfinder_augment_long.sh",
#              carry=[".keep/runs"] from the second call on)
#   here:  rm -rf .keep/runs && mkdir -p .keep/runs && cat <files_at>/pathfinder_augment_long_runs.tar.gz.part-* | tar xz -C .keep/runs
# CPU check (tiny data and model, sdpa): DRY=1 DEADLINE=90 OUT=/tmp/o KEEP=/tmp/k RUNS=/tmp/k/r bash scripts/h200/pathfinder_augment_long.sh
RECIPE=pathfinder_augment_long
source "$(dirname "$0")/lib.sh"
N=${N:-250000}             # 200,000 / 25,000 / 25,000 easy images
EVAL=${EVAL:-2000}
ATTN=flash
EXTRA=()
if (( ${DRY:-0} )); then
  N=300; EVAL=16; ATTN=sdpa; EXTRA=(train.batch_size=8 train.val_check_interval=10)
fi

say "data: Pathfinder-32, $N easy images"
lra data generate pathfinder32 --n "$N" --difficulty easy --out "$DATA" --workers "$(nproc)" > "$WORK/data_easy.log" 2>&1

# long NAME LR STEPS [KEY=VALUE ...]: until 70 s before DEADLINE (lib.sh train_until_deadline);
# --resume continues an interrupted run of the same config (a completed one is reported, not redone)
long() {
  local name=$1 lr=$2 steps=$3; shift 3
  train_until_deadline "$name" python3 -m lra train --task pathfinder32 --attention "$ATTN" --preset paper \
      --runs-dir "$RUNS/$name" --data-dir "$DATA" --no-progress --resume data.difficulty=easy "optim.lr=$lr" \
      "train.max_steps=$steps" optim.warmup_steps=312 train.val_check_interval=625 \
      "data.limit_train=$(( N * 8 / 10 ))" "data.limit_eval=$EVAL" "$@" "${EXTRA[@]}"
}
lane0() { long L1_paper_dihedral 1e-4 62500 data.augment=dihedral; }
if (( ${WIDE:-0} )); then
  lane1() { long L2_wide4_dihedral 5e-4 20000 data.augment=dihedral model.dim=128 model.depth=4 model.num_heads=4 \
                 model.head_dim=32 model.mlp_dim=256; }
else
  lane1() { long L2_paper_plain 1e-4 62500; }
fi
if [[ ${LANES:-both} == dihedral ]]; then (export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane0) > "$WORK/lane0.log" 2>&1
elif (( NGPU >= 2 )); then run_lanes lane0 lane1
else (export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane0 & lane1 & wait) > "$WORK/lane0.log" 2>&1
fi

collect_results
for d in "$RUNS"/L*/; do join_metrics "$d" "$WORK/metrics_$(basename "$d").csv"; done
pack_runs
pack
