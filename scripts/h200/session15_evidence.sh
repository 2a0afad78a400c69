#!/usr/bin/env bash
# Device call (issue #8), session 15, last: the model benchmark grid with this session's launch path
# (launch plans replayed natively: kernels.plan_launcher, $LRA_TRITON_LAUNCH=native, the default; packed
# calls through kernels.packed_fast_path),
# every cell interleaved (`lra bench models --interleave`: the attentions of a cell timed in rotating
# rounds). One GPU:
#   1. the launch, launch-plan, plan-launcher, packed, block-sparse and model tests on CUDA (bitwise:
#      the packed fast path and native replays vs Python replays vs built launches);
#   2. scripts/h200/host_overhead.py: host time of one attention core per launch mode, vs sdpa;
#   3. paper batch (262,144 tokens), eager: 1K / 4K with softmax, 16K without (it does not fit);
#   4. small batch (32K tokens), eager, 1K / 4K / 16K;
#   5. small batch, compiled (default mode), 1K / 4K / 16K;
#   6. small batch, CUDA graphs (reduce-overhead), 1K / 4K;
#   7. paper batch, compiled, 1K;
#   8. step profiles (scripts/h200/profile_step.py) of flash and sdpa, eager, 1K, paper and small batch
#      (with what is left).
# flash, sdpa (cuDNN) and flash_sparse (BigBird) everywhere.
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> DEADLINE=570 bash scripts/h200/session15_evidence.sh
RECIPE=session15_evidence
source "$(dirname "$0")/lib.sh"
MB=(python3 -m lra bench models --interleave --warmup 10 --resume)
ATT=(flash sdpa flash_sparse)

lane() {
  cuda_tests 90 -n 8 tests/kernels/test_launch.py tests/kernels/test_launch_plans.py tests/kernels/test_plan_launcher.py \
      tests/kernels/test_packed.py tests/kernels/test_block_sparse.py tests/lra/test_model.py
  say "host time per attention call, by launch mode"
  timeout -k 5 70 python3 scripts/h200/host_overhead.py --repeats 7 --out "$WORK/host_overhead.md" \
      > "$WORK/host_overhead.log" 2>&1
  sed -n '1,20p' "$WORK/host_overhead.md"
  say "paper batch, eager"
  timeout -k 5 "$(left 400)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes eager --seq-lens 1024 4096 \
      --attentions "${ATT[@]}" softmax --out "$WORK/paper_eager.csv" > "$WORK/paper_eager.log" 2>&1
  timeout -k 5 "$(left 360)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes eager --seq-lens 16384 \
      --attentions "${ATT[@]}" --out "$WORK/paper_eager_16k.csv" > "$WORK/paper_eager_16k.log" 2>&1
  grep -h "ms/step" "$WORK"/paper_eager*.log
  say "small batch, eager"
  timeout -k 5 "$(left 300)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes eager --seq-lens 1024 4096 16384 \
      --attentions "${ATT[@]}" --out "$WORK/small_eager.csv" > "$WORK/small_eager.log" 2>&1
  grep -h "ms/step" "$WORK/small_eager.log"
  say "small batch, compiled"
  timeout -k 5 "$(left 150)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --seq-lens 1024 4096 16384 \
      --attentions "${ATT[@]}" --out "$WORK/small_compiled.csv" > "$WORK/small_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/small_compiled.log"
  say "small batch, CUDA graphs"
  timeout -k 5 "$(left 70)" "${MB[@]}" --steps 100 --rounds 10 --regimes small --modes compiled --compile-mode reduce-overhead \
      --seq-lens 1024 4096 --attentions flash sdpa --out "$WORK/small_cudagraphs.csv" > "$WORK/small_cudagraphs.log" 2>&1
  grep -h "ms/step" "$WORK/small_cudagraphs.log"
  say "paper batch, compiled, 1K"
  timeout -k 5 "$(left 10)" "${MB[@]}" --steps 40 --rounds 4 --regimes paper --modes compiled --seq-lens 1024 \
      --attentions "${ATT[@]}" --out "$WORK/paper_compiled.csv" > "$WORK/paper_compiled.log" 2>&1
  grep -h "ms/step" "$WORK/paper_compiled.log"
  say "step profiles, eager 1K (issue vs wall time: host- or GPU-bound)"
  for batch in 256 32; do
    timeout -k 5 "$(left 5)" python3 scripts/h200/profile_step.py --attentions flash sdpa --seq-len 1024 \
        --batch $batch --out "$WORK/profiles" 2>&1 | grep "ms/step"
  done
  say "done"
}

(export CUDA_VISIBLE_DEVICES=$ONE_GPU; lane) > "$WORK/lane0.log" 2>&1
pack
