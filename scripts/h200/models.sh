#!/usr/bin/env bash
# Device call 2 (issues #6, #8, #2, #3): DDP on two GPUs, the model-level benchmark, and the rest of
# the kernel grid that call 1 left (results/kernels/raw/*.csv are resumed: only missing cells run).
#   both GPUs: ListOps `paper` with flash under DDP, 2 x 16 per step (the single-GPU run's global
#              batch of 32, so the learning curves compare)
#   lane 0: `lra bench models`, eager, small and paper batch regimes, flash / sdpa / softmax /
#           flash_sparse; then flash and sdpa with attention dropout 0 (the cost of dropout)
#   lane 1: the dense kernel grid at d = 32 (and d = 64's missing cells), the block-sparse grid at d = 32
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> bash scripts/h200/models.sh
RECIPE=models
source "$(dirname "$0")/lib.sh"

ddp() {
  say "ListOps data"
  lra data generate listops --out "$DATA" --workers 16 || return
  say "DDP 2 GPUs, global batch 32 (2 x 16), the paper's 5,000 steps"
  # -k: a DDP rank that ignores SIGTERM (blocked in a collective) must not hang the whole call
  timeout -k 10 "${DDP_S:-230}" python3 -m lra train --task listops --attention flash --preset paper --devices 2 \
      --strategy ddp --runs-dir "$RUNS" --data-dir "$DATA" --no-progress train.batch_size=16
  say "DDP done"
}

bench() { timeout -k 5 "$(left 5)" python3 -m lra bench models "$@"; }

lane0() {
  say "eager, small regime"
  bench --attentions flash sdpa softmax flash_sparse --regimes small --modes eager \
      --seq-lens 1024 4096 16384 --out "$WORK/models_eager.csv"
  say "eager, small regime, attention dropout 0"
  bench --attentions flash sdpa --regimes small --modes eager --seq-lens 1024 16384 --attention-dropout 0 \
      --out "$WORK/models_nodropout.csv"
  say "eager, paper regime"
  bench --attentions flash sdpa softmax flash_sparse --regimes paper --modes eager \
      --seq-lens 1024 4096 --out "$WORK/models_paper.csv"
  say "lane 0 done"
}

lane1() {
  cp results/kernels/raw/dense_a.* results/kernels/raw/sparse.* "$WORK/" 2>/dev/null
  say "dense grid d=32 (+ d=64 leftovers)"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels --resume --flex-dynamic --head-dims 32,64 \
      --sparse-layouts none --approx none --warmup 10 --rep 50 --out "$WORK" --name dense_a \
      --time-budget "$(( $(left 30) - 60 ))"
  say "block-sparse grid d=32 leftovers"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels --resume --flex-dynamic --head-dims '' \
      --sparse-layouts bigbird,local,butterfly --sparse-head-dims 64,32 --approx none --warmup 10 --rep 50 \
      --out "$WORK" --name sparse --time-budget "$(left 25)"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
if (( NGPU >= 2 )); then ddp > "$WORK/ddp.log" 2>&1; fi
run_lanes lane0 lane1
for f in $(find "$RUNS/listops" -name result.json 2>/dev/null); do
  cp "$f" "$WORK/result_$(basename "$(dirname "$f")").json"
done
cp "$WORK/ddp.log" "$OUT/" 2>/dev/null
pack
