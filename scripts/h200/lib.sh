# Shared by the scripts/h200/*.sh evidence recipes (sourced, not run).
#
# Each recipe is one device call: work split into two "lanes" that run side by side, one per GPU
# (CUDA_VISIBLE_DEVICES), or one after the other on a single GPU. Everything a lane writes goes to
# $WORK (kept on the machine between calls, so a later call can reuse tuned tiles or checkpoints);
# at the end the whole of $WORK is packed into $OUT/<recipe>.tar.gz next to the lane logs (the
# device tool returns at most 8 files).
#
# Environment: OUT (required), KEEP (default /root/lra-keep), DEADLINE (seconds, default 540):
# lanes size their time budgets so that the call ends before it. Two recipes can share an x2 call,
# one per GPU, each in its own OUT subfolder and without the copies beside the archive:
#   (CUDA_VISIBLE_DEVICES=0 OUT=$OUT/a PACK_BESIDE=0 bash scripts/h200/A.sh &
#    CUDA_VISIBLE_DEVICES=1 OUT=$OUT/b PACK_BESIDE=0 bash scripts/h200/B.sh & wait)
set -uo pipefail
OUT=${OUT:?set OUT to the folder that comes back}
KEEP=${KEEP:-/root/lra-keep}
DEADLINE=${DEADLINE:-540}
RECIPE=${RECIPE:?}
WORK=$KEEP/$RECIPE
DATA=${DATA:-$KEEP/data}
RUNS=${RUNS:-$KEEP/runs}
mkdir -p "$WORK" "$DATA" "$RUNS" "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# multi-GPU hosts: NVLink multicast stays off (the device docs: it can take the host's GPUs down)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)

elapsed() { echo $(( $(date +%s) - T0 )); }
# seconds left before DEADLINE minus a margin ($1, default 15)
left() { local l=$(( DEADLINE - $(elapsed) - ${1:-15} )); (( l < 1 )) && l=1; echo $l; }
lra() { python3 -m lra "$@"; }
# until_deadline SECONDS CMD...: CMD with $LRA_STOP_AT set SECONDS from now -- `lra train` (also under
# `lra transfer` / `lra sweep`) stops there as on Ctrl-C, saving last.ckpt at that step, so that the
# next call's --resume loses nothing -- and `timeout` as a backstop 30 s later (SIGINT, then SIGKILL).
# (Session 9: a bare `timeout -s INT` at the deadline ended a run without its graceful shutdown.)
until_deadline() {
  local s=$1; shift
  LRA_STOP_AT=$(( $(date +%s) + s )) timeout -s INT -k 30 "$(( s + 30 ))" "$@"
}
# train_until_deadline NAME CMD...: an `lra train` command until 70 s before DEADLINE, its output in
# $WORK/NAME.log; then one line: completed, or interrupted (the next call's --resume continues it),
# and the run's best validation accuracy so far
train_until_deadline() {
  local name=$1; shift
  say "$name: $(left 70) s"
  until_deadline "$(left 70)" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  say "$name: exit $rc ($( (( rc == 0 )) && echo completed || echo 'interrupted: run the call again')); $(grep -h 'best val' "$WORK/$name.log" | tail -1)"
}
say() { echo "[$(elapsed)s] $*"; }

# The GPU of a one-GPU run: the one the caller made visible (so that two recipes can share an x2
# machine, each started with its own CUDA_VISIBLE_DEVICES), else GPU 0.
ONE_GPU=${CUDA_VISIBLE_DEVICES:-0}

# run_lanes FN0 FN1: FN0 on GPU 0 and FN1 on GPU 1 at once. One GPU: FN0 then FN1 on $ONE_GPU, FN0
# ending by its share of the time left (LANE0_SHARE percent, default 50) so that FN1 gets the rest.
run_lanes() {
  if (( NGPU >= 2 )); then
    (export CUDA_VISIBLE_DEVICES=0; "$1") > "$WORK/lane0.log" 2>&1 &
    local p0=$!
    (export CUDA_VISIBLE_DEVICES=1; "$2") > "$WORK/lane1.log" 2>&1 &
    local p1=$!
    wait $p0 $p1
  else
    local lane0_deadline=$(( $(elapsed) + (DEADLINE - $(elapsed)) * ${LANE0_SHARE:-50} / 100 ))
    (export CUDA_VISIBLE_DEVICES=$ONE_GPU; DEADLINE=$lane0_deadline; "$1") > "$WORK/lane0.log" 2>&1
    (export CUDA_VISIBLE_DEVICES=$ONE_GPU; "$2") > "$WORK/lane1.log" 2>&1
  fi
}

# collect_results [DIR]: every run record under DIR (default $RUNS) into $WORK as
# result_<attention>_<run id>.json, so that pack() brings them back
collect_results() {
  local f
  for f in $(find "${1:-$RUNS}" -name result.json 2>/dev/null); do
    cp "$f" "$WORK/result_$(basename "$(dirname "$(dirname "$f")")")_$(basename "$(dirname "$f")").json"
  done
}

# join_metrics RUN_DIR OUT_CSV: the Lightning metrics.csv of every version under RUN_DIR (one version
# per call of a run spread over calls), joined in version order (the name
# scripts/pathfinder_fit_report.py pairs with the run's <NAME>.log is metrics_<NAME>.csv)
join_metrics() {
  python3 - "$1" "$2" <<'PY'
import sys
from pathlib import Path
import pandas as pd
files = sorted(Path(sys.argv[1]).rglob("metrics.csv"), key=lambda p: int(p.parent.name.split("_")[-1]))
if files:
    pd.concat([pd.read_csv(f) for f in files], ignore_index=True).to_csv(sys.argv[2], index=False)
PY
}

# pack_runs [SUBFOLDER ...]: the run tree ($RUNS: records, logs and checkpoints; only these folders of
# it when named) as $OUT/<recipe>_runs.tar.gz.part-*,
# so that a later session can build on it: unpack it into a folder that .git/info/exclude ignores
# (e.g. .keep/runs), name that folder in the device tool's `carry`, and run with RUNS=.keep/runs:
# completed stages are skipped and later stages start from their checkpoints; a run that was killed
# resumes from its last.ckpt. (A stage stopped by train.max_minutes counts as completed, and
# max_minutes is part of the run id: a longer cap is a new run.) The `paper` model with its
# optimizer state is ~2.5 MB per checkpoint.
# The device tool returns files of at most 16 MiB: the archive comes back in parts of 15 MiB,
# ${RECIPE}_runs.tar.gz.part-aa, -ab, ...; join them with `cat ${RECIPE}_runs.tar.gz.part-* | tar xz`.
# (Session 4's transfer_mini run tree, 23 MB in one file, did not come back.)
# It returns at most 64 MiB in all: name the runs a call trained (session 10's Path-X call packed its
# carried input runs too and lost its last part).
pack_runs() {
  (( $# )) || set -- .
  tar czf - -C "$RUNS" "$@" 2>/dev/null | split -b 15M - "$OUT/${RECIPE}_runs.tar.gz.part-"
}

pack() {
  {
    echo "recipe $RECIPE, $(date -u +%FT%TZ), git ${LRA_GIT_REV:-?}, $(elapsed) s, $NGPU GPU(s)"
    nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  } > "$WORK/machine.txt"
  # lane logs and machine.txt are also inside the archive; copied beside it while the device
  # tool's limit of 8 files allows (run-tree parts from pack_runs come first; PACK_BESIDE=0: none,
  # for two recipes sharing one call)
  local f
  for f in "$WORK/machine.txt" "$WORK"/lane*.log; do
    (( $(find "$OUT" -maxdepth 1 -type f | wc -l) < ${PACK_BESIDE:-7} )) && cp "$f" "$OUT/"
  done
  tar czf "$OUT/$RECIPE.tar.gz" -C "$WORK" --exclude='*.ckpt' . 2>/dev/null
  ls -la "$OUT"
}

# bench_cell NAME RESERVE ARGS...: one `lra bench models` run (interleaved attentions, 10 warm-up steps,
# resumable) with ARGS, until RESERVE seconds before DEADLINE; CSV, Markdown and log as $WORK/NAME.*;
# prints its ms/step lines. Environment set before the call reaches the run.
bench_cell() {
  local name=$1 reserve=$2; shift 2
  timeout -k 5 "$(left "$reserve")" python3 -m lra bench models --interleave --warmup 10 --resume "$@" \
      --out "$WORK/$name.csv" > "$WORK/$name.log" 2>&1
  grep -h "ms/step" "$WORK/$name.log"
}

# compile_checks SECONDS: the torch.compile tests on CUDA (log $WORK/pytest.log), then how our kernels run
# under torch.compile and eagerly (`lra info`'s kernels / inductor / launches lines)
compile_checks() {
  cuda_tests "$1" -n 8 tests/kernels/test_compile.py tests/kernels/test_gpu_compile.py tests/lra/test_model_compile.py \
      tests/kernels/test_compile_triton_op.py
  python3 -m lra info 2>&1 | grep -E "^(kernels|inductor|launches)"
}

# compiled_profile SECONDS ATTENTION...: scripts/h200/profile_step.py --compile of the small batch's step
# (32K tokens: 32 x 1K unless PROFILE_N / PROFILE_BATCH say otherwise) per attention into $WORK/profiles;
# prints each step's issue / wall / GPU-busy times, the kernels Inductor did not launch statically, and
# how many of Inductor's launches went through its static launcher (static_triton_launcher ... run) of
# all (triton_heuristics ... run). Its stderr (e.g. TORCH_LOGS=output_code's log) goes to
# $WORK/profiles/stderr_N<n>_B<b>.log.
compiled_profile() {
  local s=$1; shift
  local n=${PROFILE_N:-1024} b=${PROFILE_BATCH:-32}
  say "compiled step profile, N=$n batch $b: $*"
  mkdir -p "$WORK/profiles"
  timeout -k 5 "$s" python3 scripts/h200/profile_step.py --compile --attentions "$@" --seq-len "$n" --batch "$b" \
      --out "$WORK/profiles" 2> "$WORK/profiles/stderr_N${n}_B${b}.log" | grep "ms/step"
  grep -H -A3 "without its static launcher" "$WORK"/profiles/*_N"${n}"_B"${b}"_compiled.txt
  grep -HE "triton_heuristics.py:[0-9]+\(run\)|static_triton_launcher.py:[0-9]+\(run\)" \
      "$WORK"/profiles/*_N"${n}"_B"${b}"_compiled.txt
}

# cuda_tests SECONDS PYTEST_ARGS...: pytest on this machine's GPU (quiet, no cache dir), its log in
# $WORK/pytest.log; then one line: the exit status and pytest's summary
cuda_tests() {
  local s=$1; shift
  say "tests on CUDA"
  timeout -k 5 "$s" python3 -m pytest -q -p no:cacheprovider "$@" > "$WORK/pytest.log" 2>&1
  say "tests: exit $? ($(tail -1 "$WORK/pytest.log"))"
}

# triton_op_compile_tests SECONDS: the torch.compile tests (dense and block-sparse, aot_eager and
# Inductor) with our ops in the triton_op form, log in $WORK/pytest_triton_op.log; sets tests_rc
triton_op_compile_tests() {
  say "torch.compile tests with the triton_op form"
  LRA_KERNELS_COMPILE_OP=triton_op timeout -k 5 "$1" python3 -m pytest -q -p no:cacheprovider \
      tests/kernels/test_compile.py tests/lra/test_model_compile.py > "$WORK/pytest_triton_op.log" 2>&1
  tests_rc=$?
  tail -8 "$WORK/pytest_triton_op.log"
  say "triton_op tests: exit $tests_rc"
}

# tuned tiles left on this machine by kernels.sh, for every later kernel call (kernels.tiles reads them)
tiles=""
for f in "$KEEP/tuning.json" "$KEEP/tuning128.json" "$KEEP/tuning_dropout.json"; do
  [[ -f "$f" ]] && tiles="${tiles:+$tiles,}$f"
done
[[ -z "${LRA_KERNEL_TILES:-}" && -n "$tiles" ]] && export LRA_KERNEL_TILES=$tiles
