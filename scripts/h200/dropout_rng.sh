#!/usr/bin/env bash
# Device call (issues #2, #8): what attention dropout costs our kernels, per way of making its
# random numbers ($LRA_DROPOUT_RNG, kernels/triton_attention.py), against SDPA with the same dropout;
# and whether the cheapest way closes the model-level gap to cuDNN SDPA at the paper batch.
# Lane 0: `lra bench kernels --dropout 0.1` (d = 32, 64; N = 1K, 4K, 16K) for each setting, the SDPA
# anchors with and without dropout, then `lra bench models` (paper batch, eager, 1K / 4K) per setting.
# Lane 1 (issue #3): block-sparse vs our dense kernel in one report (the sparse/dense bound needs
# both), d = 64, BigBird / local / butterfly, 1K-64K; then the TMA dK/dV tuning pass (issue #2).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=555 bash scripts/h200/dropout_rng.sh
# Session 5 ran it at git ddf1ff2, when the settings also had an expansion part ("expand=join|select",
# four settings); "select" measured 1.3-1.5x slower and was removed, and 7 rounds became the default
# (results/kernels/dropout/).
RECIPE=dropout_rng
source "$(dirname "$0")/lib.sh"
SETTINGS=("rounds=10" "rounds=7")
tag() { echo "${1//rounds=/r}"; }   # rounds=7 -> r7
KB=(python3 -m lra bench kernels --sparse-layouts none --approx none --warmup 10 --rep 50 --out "$WORK"
    --head-dims 32,64 --seq-lens 1k,4k,16k --passes fwd,bwd,fwd_bwd)

lane0() {
  for s in "${SETTINGS[@]}"; do
    say "kernels, dropout 0.1, $s"
    LRA_DROPOUT_RNG=$s timeout -k 5 "$(left 5)" "${KB[@]}" --dropout 0.1 --impls ours --name "kernels_drop_$(tag "$s")"
  done
  say "anchors: SDPA flash / cuDNN with dropout 0.1; ours and cuDNN without dropout"
  timeout -k 5 "$(left 5)" "${KB[@]}" --dropout 0.1 --impls sdpa_flash,sdpa_cudnn --name kernels_drop_sdpa
  timeout -k 5 "$(left 5)" "${KB[@]}" --impls ours,sdpa_cudnn --name kernels_nodrop
  for s in "${SETTINGS[@]}"; do
    say "model, paper batch, eager, flash, $s"
    LRA_DROPOUT_RNG=$s timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions flash --regimes paper \
        --modes eager --seq-lens 1024 4096 --out "$WORK/models_paper_eager_$(tag "$s").csv"
  done
  say "model, paper batch, eager, sdpa (cuDNN) anchor"
  timeout -k 5 "$(left 5)" python3 -m lra bench models --attentions sdpa --regimes paper --modes eager \
      --seq-lens 1024 4096 --out "$WORK/models_paper_eager_sdpa.csv"
  say "lane 0 done"
}

lane1() {
  say "block-sparse vs our dense, d = 64, one report"
  timeout -k 5 "$(left 120)" python3 -m lra bench kernels --impls ours --head-dims 64 \
      --seq-lens 1k,2k,4k,8k,16k,32k,64k --sparse-layouts bigbird,local,butterfly --sparse-head-dims 64 \
      --sparse-seq-lens 1k,2k,4k,8k,16k,32k,64k --approx none --flex-dynamic --warmup 10 --rep 50 \
      --time-budget "$(left 150)" --out "$WORK" --name sparse_vs_dense_d64
  say "tuning d=64, dK/dV pass: pointer vs TMA"
  timeout -k 5 "$(left 5)" python3 -m kernels.tuning --head-dims 64 --seq-lens 16384 --loads tma --passes dkdv \
      --out "$WORK/tma_d64_dkdv.json"
  say "lane 1 done"
}

run_lanes lane0 lane1
pack
