#!/usr/bin/env bash
# Device call (issue #3), prepared in session 6, not run yet. At d = 32 our block-sparse forward is
# only 1.04-1.17x FlexAttention (target 1.3x; fwd+bwd 1.37-1.52x, met): results/kernels/README.md.
# The sparse kernel has so far run with the dense kernel's tiles. Tune tiles for it on the BigBird
# layout (`kernels.tuning --sparse bigbird`, blocks of 128; d = 32 and 64, N = 4K and 16K), then
# re-run the block-sparse vs Flex vs dense report at d = 32 with the tuned tiles ($LRA_KERNEL_TILES;
# the JSON fills the block-sparse table only). If they win, copy the entry into
# kernels/tiles.py `_GPU_16BIT_SPARSE` with the numbers.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=200 bash scripts/h200/sparse_tiles_d32.sh
# (one GPU; may follow small_batch_solo.sh in the same call: `... small_batch_solo.sh; DEADLINE=... bash scripts/h200/sparse_tiles_d32.sh`)
RECIPE=sparse_tiles_d32
source "$(dirname "$0")/lib.sh"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
{
  say "tune the block-sparse tiles on the BigBird layout, d = 32, 64"
  timeout -k 5 "$(left 70)" python3 -m kernels.tuning --sparse bigbird --block-size 128 --head-dims 32,64 \
      --seq-lens 4096,16384 --out "$WORK/tune_sparse_bigbird.json"
  say "block-sparse vs Flex vs dense, d = 32, with the tuned sparse tiles"
  LRA_KERNEL_TILES="$WORK/tune_sparse_bigbird.json" timeout -k 5 "$(left 5)" python3 -m lra bench kernels \
      --impls ours --head-dims 32 --seq-lens 1k,4k,16k --sparse-layouts bigbird,local,butterfly \
      --sparse-head-dims 32 --sparse-seq-lens 1k,4k,16k --approx none --flex-dynamic --warmup 10 --rep 50 \
      --out "$WORK" --name sparse_dense_d32_tuned
  say "done"
} > "$WORK/lane0.log" 2>&1
pack
