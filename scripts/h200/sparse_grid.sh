#!/usr/bin/env bash
# Device call (issue #3), session 8: the whole block-sparse grid with today's kernels and tiles —
# ours vs FlexAttention (identical BlockMask) vs our dense kernel, BigBird / local / butterfly,
# block 128, N = 1K ... 64K — one head dim per GPU (d = 32 had only 1K / 4K / 16K with the sparse
# tiles; d = 64 was last measured in session 5, before the block-sparse kernel had tiles of its own).
# First, per GPU, the block-sparse forward's 64-row tile candidates (kernels.tuning FWD_SPARSE) on
# the local and BigBird layouts (the grid itself runs with the committed tiles).
# TUNE=0 skips the tuning; TUNE_PASSES (default fwd; e.g. fwd,dkdv,dq) and TUNE_SECONDS (per layout,
# default 75) widen it; TESTS=1 runs the block-sparse tests on the GPU after the grid (lane 0: the
# kernel tests, lane 1: the torch.compile and TMA ones; LANE1_TESTS replaces lane 1's list).
# Usage (device, kind nvidia-h200-x2): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=540 bash scripts/h200/sparse_grid.sh
# Session 8 ran it three times: git 02c7913 (tuning + grid), git 8b1df9e with TUNE=0 TESTS=1 (the grid
# with the 64-row d = 32 forward tiles and the plans stored in launch order), then with the
# persistent block-sparse forward of git 99202f2 (since removed: slower, results/kernels/README.md):
# TUNE=0 TESTS_FIRST=1 SWEEP="2 8" LANE1_TESTS=tests/kernels/test_tma.py on one GPU (TESTS_FIRST ran
# the tests after the grid, as TESTS does; it and the SWEEP loop over $LRA_SPARSE_FORWARD=persistent:K
# went with the persistent kernel).
# Session 9: the block-sparse loops now carry their list index one step ahead, so their copies
# pipeline like the dense loops' (kernels.triton_attention._fwd_tiles); re-tune all three passes
# (with 4-stage candidates, kernels.tuning.SPARSE_DEEP) and measure the grid with the winners
# (TUNED_GRID=1: `kernels.tuning --combine` over both layouts, loaded via $LRA_KERNEL_TILES; the
# grid's .meta.json records the tiles it ran with) on two GPUs:
#   OUT=$OUT LRA_GIT_REV=<rev> TUNE_PASSES=fwd,dkdv,dq TUNE_SECONDS=120 TUNED_GRID=1 TESTS=1 DEADLINE=560 bash scripts/h200/sparse_grid.sh
RECIPE=sparse_grid
source "$(dirname "$0")/lib.sh"
NS=1k,2k,4k,8k,16k,32k,64k

lane() {
  local d=$1 tests=$2 layout
  local tuned=()
  (( ${TUNE:-1} )) && for layout in local bigbird; do
    local json="$WORK/tune_sparse_${layout}_${TUNE_PASSES:-fwd}_d$d.json"
    say "block-sparse tiles ($TUNE_PASSES), $layout, d = $d"
    rm -f "$json"
    timeout -k 5 "${TUNE_SECONDS:-75}" python3 -m kernels.tuning --sparse "$layout" --block-size 128 --head-dims "$d" \
        --seq-lens 4096,16384 --passes "${TUNE_PASSES:-fwd}" --out "$json"
    [[ -f $json ]] && tuned+=("$json")
  done
  # TUNED_GRID=1: the grid (and tests) run with the tuned winners, by the geometric mean over both layouts
  if (( ${TUNED_GRID:-0} )) && (( ${#tuned[@]} == 2 )); then
    python3 -m kernels.tuning --combine "${tuned[@]}" --out "$WORK/tune_sparse_combined_d$d.json" \
      && export LRA_KERNEL_TILES="$WORK/tune_sparse_combined_d$d.json"
    say "grid tiles: ${LRA_KERNEL_TILES:-the committed table}"
  fi
  say "block-sparse vs Flex vs dense, d = $d, N = $NS"
  timeout -k 5 "$(left 5)" python3 -m lra bench kernels --impls ours --head-dims "$d" --seq-lens "$NS" \
      --sparse-layouts bigbird,local,butterfly --sparse-head-dims "$d" --sparse-seq-lens "$NS" --approx none \
      --flex-dynamic --warmup 10 --rep 50 --time-budget "$(left ${GRID_MARGIN:-30})" --out "$WORK" --name "sparse_grid_d$d"
  if (( ${TESTS:-0} )); then
    say "GPU tests: $tests"
    timeout -k 5 "$(left 5)" python3 -m pytest -q -p no:cacheprovider $tests > "$WORK/pytest_d$d.log" 2>&1
    say "tests: exit $? ($(tail -1 "$WORK/pytest_d$d.log"))"
  fi
  say "lane d = $d done"
}
lane0() { lane 32 "tests/kernels/test_block_sparse.py tests/kernels/test_layouts.py tests/kernels/test_tiles.py"; }
lane1() { lane 64 "${LANE1_TESTS:-tests/kernels/test_compile.py tests/kernels/test_compile_triton_op.py tests/kernels/test_tma.py}"; }

python3 -m lra info > "$WORK/info.txt" 2>&1
run_lanes lane0 lane1
pack
