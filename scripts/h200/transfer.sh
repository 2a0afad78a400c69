#!/usr/bin/env bash
# Device call 3 (issues #7, #8): a scaled-down run of the Path-X transfer recipe, Path-256 with the
# recipe's butterfly layout, then (time permitting) the compiled model benchmark and the baselines. Scaled down (stated with the results): N_PF64 / N_PATHX generated
# images (split 80/10/10), every stage capped by train.max_minutes, Path-X batch 32.
#   lane 0: pretrain Path-64 (capped at PRE_MIN minutes), fine-tune Path-X from it (FT_MIN minutes)
#   lane 1: Path-X from scratch, same schedule, batch and cap; then Path-256 (65,536 tokens) with
#           flash_sparse and the butterfly layout, trained and evaluated end to end; 20 Path-X steps at
#           the recipe's batch of 256 (measured step time for the cost estimate); then
#           `lra bench models` compiled (flash, sdpa, softmax) and the approximate baselines
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> bash scripts/h200/transfer.sh
RECIPE=transfer
source "$(dirname "$0")/lib.sh"
N_PF64=${N_PF64:-40000}
N_PATHX=${N_PATHX:-20000}
PRE_MIN=${PRE_MIN:-2.6}
FT_MIN=${FT_MIN:-2.6}
# the Path-X stages: 3 epochs, 4 validations per epoch on 1,000 images; whatever the cap allows
# every stage reads only the generated images (data.limit_* = the generated split sizes; without them
# a stage would generate the full 200,000-image dataset of its task first)
PF64_TRAIN=$(( N_PF64 * 8 / 10 )); PATHX_TRAIN=$(( N_PATHX * 8 / 10 ))
PF64_EVAL=${PF64_EVAL:-2000}; PATHX_EVAL=${PATHX_EVAL:-1000}   # validation images per evaluation (<= N / 10)
PATHX=(finetune:train.batch_size=32 "finetune:data.limit_train=$PATHX_TRAIN" finetune:epochs=3 finetune:evals_per_epoch=4 "finetune:data.limit_eval=$PATHX_EVAL"
       "finetune:train.max_minutes=$FT_MIN")
SCRATCH=(scratch:train.batch_size=32 "scratch:data.limit_train=$PATHX_TRAIN" scratch:epochs=3 scratch:evals_per_epoch=4 "scratch:data.limit_eval=$PATHX_EVAL"
         "scratch:train.max_minutes=$FT_MIN")
PRETRAIN=("pretrain:train.max_minutes=$PRE_MIN" pretrain:evals_per_epoch=2 "pretrain:data.limit_train=$PF64_TRAIN"
          "pretrain:data.limit_eval=$PF64_EVAL")

say "data: Path-64 $N_PF64, Path-X $N_PATHX, Path-256 400 images"
lra data generate pathfinder64 --n "$N_PF64" --out "$DATA" --workers 12 > "$WORK/data_pf64.log" 2>&1 &
lra data generate pathx --n "$N_PATHX" --out "$DATA" --workers 14 > "$WORK/data_pathx.log" 2>&1 &
lra data generate path256 --n 400 --out "$DATA" --workers 4 > "$WORK/data_path256.log" 2>&1 &
wait

lane0() {
  say "pretrain Path-64, then fine-tune Path-X"
  timeout -k 5 "$(left 5)" python3 -m lra transfer --target pathx --until finetune --runs "$RUNS" --data-dir "$DATA" \
      --no-progress "${PRETRAIN[@]}" "${PATHX[@]}"
  say "lane 0 done"
}

lane1() {
  say "Path-X from scratch"
  timeout -k 5 "$(left 5)" python3 -m lra transfer --target pathx --from-scratch --runs "$RUNS" --data-dir "$DATA" \
      --no-progress "${SCRATCH[@]}"
  say "Path-256, flash_sparse, butterfly layout"
  timeout -k 5 "$(left 5)" python3 -m lra train --task path256 --attention flash_sparse --attention.layout butterfly \
      --preset paper --runs-dir "$RUNS" --data-dir "$DATA" --no-progress \
      train.batch_size=8 train.max_steps=40 train.val_check_interval=20 data.limit_train=320 data.limit_eval=40 \
      optim.warmup_steps=4
  say "Path-X step time at the recipe's batch of 256 (for lra transfer --estimate-cost)"
  timeout -k 5 "$(left 5)" python3 -m lra train --task pathx --attention flash --preset paper --runs-dir "$RUNS" \
      --data-dir "$DATA" --no-progress train.max_steps=20 train.val_check_interval=20 train.throughput_warmup_steps=5 \
      train.limit_val_batches=2 "data.limit_train=$PATHX_TRAIN" "data.limit_eval=$PATHX_EVAL" optim.warmup_steps=5
  say "model benchmark: compiled, small regime"
  timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions flash sdpa softmax --regimes small --modes compiled \
      --seq-lens 1024 16384 --out "$WORK/models_compiled.csv"
  say "model benchmark: approximate baselines and long lengths, eager, small regime"
  timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions performer linformer bigbird flash flash_sparse \
      --regimes small --modes eager --seq-lens 4096 --long-seq-lens 32768 65536 --out "$WORK/models_long.csv"
  say "lane 1 done"
}

run_lanes lane0 lane1
collect_results
pack
