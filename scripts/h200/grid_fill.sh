#!/usr/bin/env bash
# Device call (issues #2, #3, #8), prepared in session 7, revised in session 8: the cells the
# committed grids still lack, and the one Hopper lever never timed.
#   GPU 0 (#2): dense kernel, ours vs SDPA flash / cuDNN and FlexAttention, d = 32 and 64 at
#     N = 32K and 64K (never reached by a call's budget: results/kernels/README.md) and 1K (the
#     d = 64 fwd+bwd cell at 1.25x SDPA-flash, measured before the eager fast path, ac2cd77); the
#     block-sparse tuning test on the GPU (fixed after session 7's GPU run); then the model step at
#     the paper batch, 2K and 8K, eager and compiled (#8), and the block-sparse forward tiles tuned
#     on the local layout at d = 32 (#3).
#   GPU 1 (#2): the TMA + warp-specialised loads (kernels.tiles.LOADS_TMA_WS) against the table's
#     pointer tiles, one candidate per process under a timeout (session 3's tuner stopped at that
#     candidate: a hang or a very slow build), with a correctness check; then CUDA graphs at the
#     paper batch (#8).
# Usage (device, kind nvidia-h200-x2): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/grid_fill.sh
RECIPE=grid_fill
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --regimes paper --attentions flash sdpa --steps 30 --warmup 10)

lane0() {
  say "dense kernels, d = 32 and 64, N = 1K, 32K, 64K"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels --impls ours,sdpa_flash,sdpa_cudnn,flex --head-dims 32,64 \
      --seq-lens 1k,32k,64k --sparse-layouts none --approx none --flex-dynamic --warmup 10 --rep 50 \
      --time-budget "$(( $(left 60) < 320 ? $(left 60) : 320 ))" --out "$WORK" --name dense_fill
  say "the block-sparse tuning test, fixed after session 7's GPU run"
  timeout -k 5 "$(left 5)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_tiles.py > "$WORK/pytest_tiles.log" 2>&1
  say "test_tiles: exit $? ($(tail -1 "$WORK/pytest_tiles.log"))"
  say "model step, paper batch, 2K and 8K, eager and compiled"
  timeout -k 5 "$(left 70)" "${MB[@]}" --modes eager compiled --seq-lens 2048 8192 --out "$WORK/paper_2k_8k.csv"
  say "block-sparse forward tiles on the local layout, d = 32 (#3: its forward is 1.02x Flex with the BigBird-tuned tiles)"
  timeout -k 5 "$(left 5)" python3 -m kernels.tuning --sparse local --block-size 128 --head-dims 32 \
      --seq-lens 4096,16384 --passes fwd --out "$WORK/tune_sparse_local_fwd.json"
  say "lane 0 done"
}

# ws_probe SECONDS PASS D TILES...: one candidate per process, each under its own timeout (a
# warp-specialised build may hang), all within SECONDS; one JSON line each in ws_probe.jsonl
ws_probe() {
  local stop=$(( $(elapsed) + $1 )) kind=$2 d=$3 t cap
  shift 3
  for t in "$@"; do
    cap=$(( stop - $(elapsed) )); (( cap > 70 )) && cap=70; (( cap > $(left 5) )) && cap=$(left 5)
    (( cap < 25 )) && { say "ws probe: no time left for $kind d=$d $t"; return; }
    timeout -k 5 "$cap" python3 scripts/h200/ws_probe.py --pass "$kind" --head-dim "$d" --tiles "$t" \
        >> "$WORK/ws_probe.jsonl" 2>> "$WORK/ws_probe.err"
    say "ws probe $kind d=$d $t: exit $? (cap $cap s)"
  done
}

lane1() {
  say "Hopper TMA + warp specialisation probe"
  ws_probe 170 fwd 64 128,64,8,3,0 128,64,4,3,2 128,128,4,2,2 128,64,4,3,1
  ws_probe 120 fwd 128 128,64,8,3,0 128,64,4,2,2 128,128,4,2,2
  ws_probe 120 dkdv 64 32,128,4,3,0 64,128,4,3,2 32,128,4,3,2
  ws_probe 60 fwd 32 128,64,4,3,0 128,64,4,3,2
  say "model step, paper batch, CUDA graphs"
  timeout -k 5 "$(left 5)" "${MB[@]}" --modes compiled --compile-mode reduce-overhead --seq-lens 1024 4096 16384 \
      --out "$WORK/paper_cudagraphs.csv"
  say "lane 1 done"
}

python3 -m lra info > "$WORK/info.txt" 2>&1
run_lanes lane0 lane1
pack
