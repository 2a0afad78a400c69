#!/usr/bin/env bash
# Device call (issue #8), session 13: the small batch (32K tokens per step) after the packed-QKV path.
# That step is bound by the host CPU at 1K-4K (results/models/triton_op/), where flash trailed sdpa
# (0.73-0.97x): per attention call our path paid more Python and more launches than SDPA's C++ op.
# Since session 13 the model hands our kernels the fused projection whole (kernels.flash_attention_
# qkvpacked: no q/k/v views, no copy to merge the heads, no stacking of dQ/dK/dV), the output is laid
# out like q (also in the compiled graph) and the backward's preprocess kernel zeroes the one-pass dQ
# buffer (one launch fewer). One GPU, in order:
# Call 1 (git 079f60d) found Triton's launcher at ~150 us per launch of our big kernels on this host;
# since then repeat launches skip its argument binding (kernels/launch.py, $LRA_TRITON_LAUNCH).
#   1. the kernel and model tests touched by the change, on CUDA;
#   2. scripts/h200/launch_overhead.py (where a launch's host time goes) and host_overhead.py (host
#      time of one attention core, fwd + bwd, on tiny inputs: sdpa vs flash views vs flash packed,
#      cached vs Triton's launches, kernels stubbed);
#   3. `lra bench models`, small batch, eager, 1K / 4K / 16K: flash and sdpa in two orders, each
#      followed by flash with Triton's launches (LRA_TRITON_LAUNCH=triton);
#   4. paper batch, eager, 1K / 4K: flash, sdpa, flash_sparse;
#   5. small batch, compiled (default mode), flash and sdpa; 6. the model compile tests.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=560 bash scripts/h200/small_batch_packed.sh
RECIPE=small_batch_packed
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --steps 50 --warmup 10)

lane() {
  cuda_tests 170 tests/kernels/test_launch.py tests/kernels/test_packed.py \
      tests/kernels/test_fused_backward.py tests/kernels/test_layer_norm.py tests/lra/test_model.py -k "not registered"
  say "host time per launch and per attention call"
  timeout -k 5 60 python3 scripts/h200/launch_overhead.py --out "$WORK/launch_overhead.txt" > "$WORK/launch_overhead.log" 2>&1
  sed -n 1,8p "$WORK/launch_overhead.txt"
  timeout -k 5 90 python3 scripts/h200/host_overhead.py --out "$WORK/host_overhead.md" > "$WORK/host_overhead.log" 2>&1
  cat "$WORK/host_overhead.md"
  for order in "flash sdpa" "sdpa flash"; do
    tag=${order// /_}
    say "small batch, eager, order $order, then flash with Triton's launches"
    timeout -k 5 "$(left 10)" "${MB[@]}" --regimes small --modes eager --seq-lens 1024 4096 16384 \
        --attentions $order --out "$WORK/small_eager_$tag.csv" > "$WORK/small_eager_$tag.log" 2>&1
    LRA_TRITON_LAUNCH=triton timeout -k 5 "$(left 10)" "${MB[@]}" --regimes small --modes eager --seq-lens 1024 4096 16384 \
        --attentions flash --out "$WORK/small_eager_tritonlaunch_$tag.csv" > "$WORK/small_eager_tritonlaunch_$tag.log" 2>&1
  done
  grep -h "ms/step" "$WORK"/small_eager_*.log
  say "paper batch, eager, 1K / 4K"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 30 --regimes paper --modes eager --seq-lens 1024 4096 \
      --attentions flash sdpa flash_sparse --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  grep -h "ms/step" "$WORK/paper_eager.log"
  say "small batch, compiled (default mode)"
  timeout -k 5 "$(left 110)" "${MB[@]}" --regimes small --modes compiled --seq-lens 1024 4096 16384 \
      --attentions flash sdpa --resume --out "$WORK/small_compiled.csv" > "$WORK/small_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled.log"
  say "model compile tests (triton_op form)"
  timeout -k 5 "$(left 5)" python3 -m pytest -q -p no:cacheprovider tests/lra/test_model_compile.py \
      > "$WORK/pytest_compile.log" 2>&1
  say "compile tests: exit $? ($(tail -1 "$WORK/pytest_compile.log"))"
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
