#!/usr/bin/env bash
# Device call (issue #8), prepared in session 10, run in session 12 (results/models/session12/): does our Triton LayerNorm
# (kernels/layer_norm.py) take PyTorch's 3.2 ms of LayerNorm out of the eager paper-batch step?
# Session 10's profile (results/models/session10/) put PyTorch's LayerNorm at 29 % of flash's 11.0 ms
# GPU step at 1K (flash 3.08x the eager softmax Transformer there; issue #8 asks 3.5x).
# One GPU, in order:
#   1. tests/kernels/test_layer_norm.py on CUDA (the kernels against F.layer_norm and float64);
#   2. scripts/bench_layer_norm.py: ours vs F.layer_norm vs torch.compile(F.layer_norm), forward and
#      forward + backward, 262,144 x 64 (the paper batch) and three other shapes;
#   3. the model step, paper batch, eager, 1K / 4K / 16K, flash sdpa softmax flash_sparse, with
#      PyTorch's LayerNorm (LRA_LAYER_NORM=torch) and then with ours (the default), same GPU;
#   4. with the time left, the same two for the small batch at 1K (auto keeps PyTorch's there: the
#      forced kernel, LRA_LAYER_NORM=triton, says what the host-bound step would pay).
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=300 bash scripts/h200/layer_norm_step.sh
RECIPE=layer_norm_step
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --attentions flash sdpa softmax flash_sparse --modes eager --steps 30 --warmup 10)

lane() {
  say "LayerNorm tests on CUDA"
  timeout -k 5 "$(left 10)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_layer_norm.py \
      > "$WORK/pytest_layer_norm.log" 2>&1
  say "tests: exit $? ($(tail -1 "$WORK/pytest_layer_norm.log"))"
  say "LayerNorm kernels vs PyTorch's"
  timeout -k 5 "$(left 10)" python3 scripts/bench_layer_norm.py --out "$WORK/layer_norm.csv" > "$WORK/layer_norm.log" 2>&1
  say "model step, paper batch, PyTorch's LayerNorm"
  LRA_LAYER_NORM=torch timeout -k 5 "$(left 10)" "${MB[@]}" --regimes paper --seq-lens 1024 4096 16384 \
      --resume --out "$WORK/paper_torch_ln.csv" > "$WORK/paper_torch_ln.log" 2>&1
  say "model step, paper batch, our LayerNorm"
  timeout -k 5 "$(left 10)" "${MB[@]}" --regimes paper --seq-lens 1024 4096 16384 \
      --resume --out "$WORK/paper_triton_ln.csv" > "$WORK/paper_triton_ln.log" 2>&1
  say "model step, small batch at 1K, PyTorch's LayerNorm (auto) and ours forced"
  timeout -k 5 "$(left 10)" "${MB[@]}" --regimes small --seq-lens 1024 \
      --resume --out "$WORK/small_auto_ln.csv" > "$WORK/small_auto_ln.log" 2>&1
  LRA_LAYER_NORM=triton timeout -k 5 "$(left 10)" "${MB[@]}" --regimes small --seq-lens 1024 \
      --resume --out "$WORK/small_triton_ln.csv" > "$WORK/small_triton_ln.log" 2>&1
  grep -h "ms/step" "$WORK"/paper_*_ln.log "$WORK"/small_*_ln.log
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
