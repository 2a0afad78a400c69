#!/usr/bin/env bash
# Device calls (issues #7, #8): Pathfinder-32 at the paper's full length — the `paper` preset
# (62,400 steps of 256 on the LRA-size 160,000-image training split, evaluation on all 20,000
# validation images every 312 steps) with `flash`, one seed per GPU (seeds 0 and 1 on an x2
# machine, seed 0 on one GPU). It checks the Pathfinder column against the FlashAttention paper's
# 72.7 % and gives the `mini` transfer recipe a pretrained model that has left chance
# (results/pathfinder/README.md: minutes of training only memorise).
#
# One run is ~62,400 x 12.6 ms = 13 minutes of training plus evaluation, more than one call, so each
# call trains until its DEADLINE and then interrupts the run with SIGINT: Lightning saves
# last.ckpt at that step and the record says "interrupted"; the next call resumes it
# (`lra train --resume`) and a completed run is left alone. Between calls the run tree travels:
#   call 1:  run(command="OUT=$OUT LRA_GIT_REV=<rev> RUNS=.keep/runs DEADLINE=570 bash scripts/h200/pathfinder_paper.sh")
#   here:    mkdir -p .keep/runs && cat <files_at>/pathfinder_paper_runs.tar.gz.part-* | tar xz -C .keep/runs
#            (.keep/ is in .git/info/exclude)
#   call 2+: the same command with carry=[".keep/runs"]; repeat until the lanes say "completed"
# RUNS must be the same relative path in every call: checkpoint paths inside the run are relative.
# Data are regenerated in each call (deterministic: the same images; ~50 s on 32 cores).
# CPU check of one interrupt/resume cycle (tiny model and data, sdpa): DRY=1 OUT=/tmp/o KEEP=/tmp/k RUNS=/tmp/k/r bash scripts/h200/pathfinder_paper.sh
RECIPE=pathfinder_paper
source "$(dirname "$0")/lib.sh"
N=${N:-200000}             # the LRA release size: 160,000 / 20,000 / 20,000
ATTN=flash
EXTRA=()
if (( ${DRY:-0} )); then
  N=300; ATTN=sdpa
  EXTRA=(model.dim=16 model.mlp_dim=16 model.head_dim=8 train.batch_size=8 train.max_steps=40
         train.val_check_interval=10 optim.warmup_steps=4 data.limit_train=240 data.limit_eval=30)
fi

say "data: Pathfinder-32, $N images"
lra data generate pathfinder32 --n "$N" --out "$DATA" --workers "$(nproc)" > "$WORK/data.log" 2>&1

# seed S: train (or resume) until DEADLINE, then SIGINT; 40 s are kept for the shutdown and packing
seed_run() {
  say "seed $1: $(left 40) s of training"
  timeout -s INT -k 30 "$(left 40)" python3 -m lra train --task pathfinder32 --attention "$ATTN" --preset paper \
      --seed "$1" --runs-dir "$RUNS" --data-dir "$DATA" --no-progress --resume "${EXTRA[@]}"
  local rc=$?
  say "seed $1: exit $rc ($( (( rc == 0 )) && echo completed || echo 'interrupted or failed: resume in the next call'))"
}
lane0() { seed_run 0; }
lane1() { seed_run 1; }
if (( NGPU >= 2 )); then run_lanes lane0 lane1; else (export CUDA_VISIBLE_DEVICES=0; lane0 > "$WORK/lane0.log" 2>&1); fi

collect_results
for f in $(find "$RUNS" -name metrics.csv); do   # <run id>/logs/version_<k>/metrics.csv, one version per call
  cp "$f" "$WORK/metrics_$(basename "$(dirname "$(dirname "$(dirname "$f")")")")_$(basename "$(dirname "$f")").csv"
done
pack_runs
pack
