#!/usr/bin/env bash
# Device call 1 (issues #2, #3, #4): tile tuning and the full kernel benchmark on the H200.
#   lane 0: tune head dims 64 and 32 (plain and with attention dropout 0.1), then the dense grid
#           (ours vs SDPA flash / cuDNN / efficient, FlexAttention, materialised softmax) at d = 64, 32
#   lane 1: tune head dim 128, the dense grid at d = 128, then (with lane 0's tiles) block-sparse
#           (BigBird / local / butterfly, ours vs FlexAttention BlockMask) and the approximate baselines
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> [TUNE=0] bash scripts/h200/kernels.sh
#   TUNE=0: no tuning, the committed tables of kernels/tiles.py (re-timing after a kernel change)
RECIPE=kernels
source "$(dirname "$0")/lib.sh"

TUNE=${TUNE:-1}
tile_arg() { [[ "$TUNE" == 1 && -f "$1" ]] && echo "--tiles=$1"; }

lane0() {
  if [[ "$TUNE" == 1 ]]; then
    say "tuning d=64,32"
    timeout -k 5 150 python3 -m kernels.tuning --head-dims 64,32 --seq-lens 4096,16384 --out "$KEEP/tuning.json"
    cp "$KEEP/tuning.json" "$WORK/" 2>/dev/null
    say "tuning d=32,64 with dropout 0.1"
    timeout -k 5 120 python3 -m kernels.tuning --head-dims 32,64 --seq-lens 4096,16384 --dropout 0.1 \
        --out "$KEEP/tuning_dropout.json"
    cp "$KEEP/tuning_dropout.json" "$WORK/" 2>/dev/null
  fi
  say "dense grid d=64,32"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels $(tile_arg "$KEEP/tuning.json") --flex-dynamic --head-dims 64,32 \
      --sparse-layouts none --approx none --warmup 10 --rep 50 --out "$WORK" --name dense_a --time-budget "$(left 30)"
  say "lane 0 done"
}

lane1() {
  if [[ "$TUNE" == 1 ]]; then
    say "tuning d=128"
    timeout -k 5 120 python3 -m kernels.tuning --head-dims 128 --seq-lens 4096,16384 --out "$KEEP/tuning128.json"
    cp "$KEEP/tuning128.json" "$WORK/" 2>/dev/null
  fi
  say "dense grid d=128"
  timeout -k 5 200 python3 -m lra bench kernels $(tile_arg "$KEEP/tuning128.json") --flex-dynamic --head-dims 128 \
      --sparse-layouts none --approx none --warmup 10 --rep 50 --out "$WORK" --name dense_b --time-budget 170
  tiles=""
  if [[ "$TUNE" == 1 ]]; then
    for _ in $(seq 60); do [[ -f "$KEEP/tuning.json" ]] && break; sleep 2; done
    tiles="--tiles=$KEEP/tuning128.json"; [[ -f "$KEEP/tuning.json" ]] && tiles="--tiles=$KEEP/tuning.json,$KEEP/tuning128.json"
  fi
  say "approximate baselines ($tiles)"
  timeout -k 5 120 python3 -m lra bench kernels $tiles --head-dims '' --sparse-layouts none \
      --approx performer,linformer,bigbird --approx-seq-lens 1k,4k,16k --approx-head-dims 32,64 \
      --warmup 10 --rep 50 --out "$WORK" --name approx --time-budget 100
  say "block-sparse grid"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels $tiles --flex-dynamic --head-dims '' \
      --sparse-layouts bigbird,local,butterfly --sparse-head-dims 64,32 --approx none --warmup 10 --rep 50 \
      --out "$WORK" --name sparse --time-budget "$(left 30)"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
run_lanes lane0 lane1
pack
