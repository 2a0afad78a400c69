"""Sweeps: a grid of `lra train` runs, planned, skipped when done, launched locally or on SLURM.

A sweep is only a grid over run configs plus a launcher:
- `plan_sweep` resolves every (task, seq_len, attention, seed) cell to its `RunConfig` and run
  folder (the same deterministic run id `lra train` computes) and classifies it: `new`, `resume`
  (an interrupted run with a last.ckpt), `retry` (a failed/oom record), `done` (a completed record:
  skipped), `invalid` (the combination cannot run, e.g. a sequence too short for BigBird's
  pattern; recorded as a failed run with the reason, without starting anything), or `running`
  (another process trains it now: it holds the run folder's lock; left alone).
- `check_data` reads the data of the cells to be trained once per task and data source
  (`lra.data_check`) before anything is launched: cells whose data are missing or corrupt become
  `invalid`, with the error (a released file's name and line).
- `run_local` runs the cells as `python -m lra train ... --resume` subprocesses, K at a time, each
  pinned to its own GPU through CUDA_VISIBLE_DEVICES, with its output in `<run>/train.log`; a run
  that dies without writing its record (killed, crashed interpreter) gets a `failed` record with
  the end of its log. Failures and OOMs never stop the sweep. Each child dies with the sweep
  (SIGTERM when the sweep's process ends, however it ends), so a killed sweep leaves no orphans.
- `run_slurm` submits one cluster job per cell: through submitit when it is installed (the
  `slurm` extra), otherwise as generated sbatch scripts submitted with `sbatch`. It refuses to
  submit where no SLURM cluster answers (`require_slurm`), and never runs the jobs here instead.
  Multi-GPU / multi-node runs use Lightning's DDP inside the job (`--devices`, `--num-nodes`).
"""
from __future__ import annotations

import datetime as _dt
import itertools
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lra.callbacks import STOP_AT_ENV
from lra.config import RunConfig, RunLocation, resolve
from lra import run_lock
from lra.records import RECORD_NAME, read_record, write_record

STATES = ("new", "resume", "retry", "done", "invalid", "skipped", "running")
# A cell whose run folder another trainer holds (`lra.run_lock`): left to it, neither trained nor recorded.
ELSEWHERE = "running elsewhere"
# How the error of a run stopped by Ctrl-C or $LRA_STOP_AT begins (`lra.train._error_text`, and
# `run_local` for a run interrupted before it could record itself): such runs are resumed.
INTERRUPTED = "interrupted"
FINAL = ("completed", "failed", "oom", "diverged", INTERRUPTED)  # the statuses a run ends with


@dataclass
class SweepSpec:
    tasks: list[str]
    attentions: list[str]
    seq_lens: list[int | None] = field(default_factory=lambda: [None])
    seeds: list[int] = field(default_factory=lambda: [0])
    preset: str = "paper"
    overrides: list[str] = field(default_factory=list)
    attention_options: dict = field(default_factory=dict)
    runs_dir: str = "runs"
    data_dir: str | None = None
    devices: str | None = None
    num_nodes: int | None = None
    strategy: str | None = None
    compile: bool | None = None
    compile_mode: str | None = None  # torch.compile mode (train.compile_mode): a speed setting, not in the run id
    skip_failed: bool = False
    runs_per_gpu: int = 1      # concurrent runs sharing each GPU (local launcher)


@dataclass
class PlannedRun(RunLocation):
    task: str
    attention: str
    seq_len: int | None
    seed: int
    config: RunConfig
    state: str
    reason: str = ""
    resumes: bool = False   # training continues from the run's last checkpoint (seen when planned)
    done_fraction: float = 0.0  # of the schedule's steps, by the run's record (resuming runs)

    @property
    def label(self) -> str:
        return f"{self.task}/{self.attention}/{self.config.run_id()}"


def pending_runs(plan: list[PlannedRun]) -> list[PlannedRun]:
    """The cells a sweep trains, in the order it starts them: those that resume from a checkpoint
    first, the furthest along first, then the others in plan order. A campaign spread over short
    allocations so finishes what it has started before it starts new cells, and leaves fewer runs
    half-trained at each deadline."""
    todo = [r for r in plan if r.state in ("new", "resume", "retry")]
    return sorted(todo, key=lambda r: (not r.resumes, -r.done_fraction))   # stable: plan order on ties


def expand_grid(spec: SweepSpec) -> list[tuple[str, int | None, str, int]]:
    """Every (task, seq_len, attention, seed) cell, in that nesting order."""
    return list(itertools.product(spec.tasks, spec.seq_lens, spec.attentions, spec.seeds))


def _check_names(spec: SweepSpec) -> None:
    import tasks

    from lra import attention

    unknown_tasks = [t for t in spec.tasks if t not in tasks.TASKS]
    if unknown_tasks:
        raise ValueError(f"unknown task(s) {unknown_tasks}; available: {', '.join(tasks.TASKS)}")
    names = attention.available()
    unknown = [a for a in spec.attentions if a not in names]
    if unknown:
        raise ValueError(f"unknown attention(s) {unknown}; available: {', '.join(names)}")


def plan_sweep(spec: SweepSpec) -> list[PlannedRun]:
    """Resolve and classify every cell. Config typos are a ValueError for the whole sweep."""
    from lra.train import resolve_runtime, validate_run

    _check_names(spec)
    plan = []
    seen: set[Path] = set()
    for task, seq_len, attention, seed in expand_grid(spec):
        config = resolve(task, attention, preset=spec.preset, seed=seed, seq_len=seq_len,
                         overrides=spec.overrides, attention_options=spec.attention_options,
                         runs_dir=spec.runs_dir, data_dir=spec.data_dir, devices=spec.devices,
                         num_nodes=spec.num_nodes, strategy=spec.strategy, compile=spec.compile,
                         compile_mode=spec.compile_mode)
        state, reason = "new", ""
        try:
            validate_run(config, resolve_runtime(config))
        except FileNotFoundError as err:   # missing data (how to get it): this cell only, not the sweep
            state, reason = "invalid", f"data: {err}"
        except ValueError as err:
            state, reason = "invalid", str(err)
        run_dir = config.run_dir()
        # A cell repeated on the command line (--seeds 0 0, or --seq-lens naming the preset's own
        # length twice) is the same run folder: train it once, never twice at the same time.
        if run_dir in seen:
            continue
        seen.add(run_dir)
        if state != "invalid":
            state, reason = _classify(run_dir, spec.skip_failed)
        resumes = state in ("resume", "retry") and _last_checkpoint(run_dir).exists()
        done = _done_fraction(run_dir) if resumes else 0.0
        plan.append(PlannedRun(task, attention, seq_len, seed, config, state, reason, resumes, done))
    return plan


def check_data(plan: list[PlannedRun]) -> None:
    """Prepare and read the data of the `new`/`resume`/`retry` cells, once per task and data source;
    the cells whose data fail become `invalid` with the error."""
    import json

    from lra import data_check
    from lra.train import build_datamodule, resolve_runtime

    problems: dict[tuple, str | None] = {}
    for run in plan:
        if run.state not in ("new", "resume", "retry"):
            continue
        config = run.config
        key = (config.task, config.data.data_dir,
               json.dumps(config.resolve_data_identity(), sort_keys=True, default=str))
        if key not in problems:
            try:
                data_check.check_data(build_datamodule(config, resolve_runtime(config)))
                problems[key] = None
            except (ValueError, OSError) as err:
                problems[key] = f"data: {err}"
        if problems[key] is not None:
            run.state, run.reason = "invalid", problems[key]


def _last_checkpoint(run_dir: Path) -> Path:
    """The checkpoint an interrupted run resumes from (lra.checkpoints: CHECKPOINT_DIR / LAST)."""
    return run_dir / "checkpoints" / "last.ckpt"


def _progress(record: dict) -> str:
    """How far a recorded run got, for the plan: "step 50,763 of 62,400, best val 82.2 %" (the parts
    the record has; "" before its first step)."""
    steps = record.get("steps")
    if not isinstance(steps, int) or steps < 1:
        return ""
    max_steps = _max_steps(record)
    text = f"step {steps:,}" + (f" of {max_steps:,}" if isinstance(max_steps, int) else "")
    best = record.get("best_val_acc")
    return text + (f", best val {100 * best:.1f} %" if isinstance(best, (int, float)) else "")


def _done_fraction(run_dir: Path) -> float:
    """The fraction of its schedule (steps of train.max_steps) a run's record says it trained; 0 when
    the record does not say."""
    try:
        record = read_record(run_dir / RECORD_NAME)
    except (OSError, ValueError):
        return 0.0
    steps = record.get("steps")
    max_steps = _max_steps(record)
    if not isinstance(steps, int) or not isinstance(max_steps, int) or max_steps < 1:
        return 0.0
    return min(steps / max_steps, 1.0)


def _max_steps(record: dict):
    """The run's schedule length (its config's train.max_steps) as the record has it, or None."""
    return ((record.get("config") or {}).get("train") or {}).get("max_steps")


def _classify(run_dir: Path, skip_failed: bool) -> tuple[str, str]:
    held_by = run_lock.holder(run_dir)
    if held_by is not None:
        return "running", f"{ELSEWHERE} ({held_by})"
    record_path = run_dir / RECORD_NAME
    last = _last_checkpoint(run_dir)
    record: dict = {}
    if record_path.exists():
        try:
            record = read_record(record_path)
        except (OSError, ValueError) as err:
            return "retry", f"unreadable record ({err})"
    status, error = record.get("status"), record.get("error")
    progress = _progress(record)
    at = f" at {progress}" if progress else ""
    if status == "completed":
        test = record.get("test_acc")
        return "done", "completed record exists" + (f": test {100 * test:.1f} %" if isinstance(test, (int, float)) else "")
    if status == INTERRUPTED or (status == "failed" and str(error or "").startswith(INTERRUPTED)):
        # Stopped by Ctrl-C (an interrupted sweep) or $LRA_STOP_AT: not a failure of the run, so it
        # continues even with --skip-failed.
        if last.exists():
            return "resume", f"interrupted{at or ' run'}, resuming from last.ckpt"
        return "retry", "interrupted before its first checkpoint, starting again"
    if status in ("failed", "oom", "diverged"):
        if skip_failed:
            return "skipped", f"previous run {status}{at} (--skip-failed)"
        return "retry", f"previous run {status}{at}" + (", resuming from last.ckpt" if last.exists() else "")
    if last.exists():  # a record that still says running (its trainer died; its step is stale) or none
        return "resume", "interrupted run, resuming from last.ckpt"
    return "new", ""


def format_plan(plan: list[PlannedRun]) -> str:
    """The plan as the sweep prints it: the cells it trains in the order they start, then the others."""
    counts = {s: sum(r.state == s for r in plan) for s in STATES}
    lines = [f"sweep plan: {len(plan)} runs — " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)]
    width = max((len(r.label) for r in plan), default=10)
    pending = pending_runs(plan)
    trained = {id(r) for r in pending}
    for r in pending + [r for r in plan if id(r) not in trained]:
        lines.append(f"  {r.state:<8} {r.label:<{width}}  {r.reason}")
    return "\n".join(lines)


def record_invalid(plan: list[PlannedRun]) -> None:
    """Invalid cells get a `failed` record with the reason, so tables show why they are missing."""
    from lra.train import write_status_record

    for run in plan:
        if run.state == "invalid":
            write_status_record(run.config, "failed", run.reason)


# ---- the command line of one run ------------------------------------------------------------------
def train_argv(run: PlannedRun, spec: SweepSpec, *, python: str | None = None) -> list[str]:
    """`python -m lra train ...` for one cell; resolves to exactly `run.config`."""
    argv = [python or sys.executable, "-m", "lra", "train", "--task", run.task, "--attention", run.attention,
            "--preset", spec.preset, "--seed", str(run.seed), "--runs-dir", str(spec.runs_dir),
            "--resume", "--no-progress", "--yes"]   # the sweep asked for --yes in its plan
    if spec.runs_per_gpu != 1:
        argv += ["--runs-per-gpu", str(spec.runs_per_gpu)]
    if run.seq_len is not None:
        argv += ["--seq-len", str(run.seq_len)]
    if spec.data_dir is not None:
        argv += ["--data-dir", str(spec.data_dir)]
    if spec.devices is not None:
        argv += ["--devices", str(spec.devices)]
    if spec.num_nodes is not None:
        argv += ["--num-nodes", str(spec.num_nodes)]
    if spec.strategy is not None:
        argv += ["--strategy", str(spec.strategy)]
    if spec.compile is not None:
        argv += ["--compile" if spec.compile else "--no-compile"]
    if spec.compile_mode is not None:
        argv += ["--compile-mode", spec.compile_mode]
    argv += list(spec.overrides)
    argv += [f"attention.{k}={v}" for k, v in spec.attention_options.items()]
    return argv


# ---- local launcher -------------------------------------------------------------------------------
@dataclass
class Outcome:
    run: PlannedRun
    status: str
    seconds: float
    gpu: str | None
    record: dict | None = None
    note: str = ""


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
try:  # resolved here, not in the forked child (no dynamic loading between fork and exec)
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (ImportError, OSError, AttributeError):  # not Linux: children are not tied to the sweep
    _prctl = None


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive SIGTERM when the sweep dies, even by SIGKILL
    (`subprocess` lacks such an option). The child's Lightning run then stops as on a cluster's time
    limit: last.ckpt, record `interrupted`. The signal comes when the thread that started the child
    ends; `run_local`'s threads wait for their child, so that is the sweep's death."""
    if _prctl is None:
        return None

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the sweep died before the line above: follow it now
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _default_runner(argv: list[str], env: dict, log_path: Path) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {shlex.join(argv)}\n")
        log.flush()
        return subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent(os.getpid())).returncode


def gpu_slots(parallel: int, gpus: list[str] | None, runs_per_gpu: int = 1) -> list[str | None]:
    """The launch slots: `parallel` GPUs (None on CPU), each taken by `runs_per_gpu` runs at once."""
    if parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {parallel}")
    if isinstance(runs_per_gpu, bool) or not isinstance(runs_per_gpu, int) or runs_per_gpu < 1:
        raise ValueError(f"--runs-per-gpu must be an integer >= 1, got {runs_per_gpu!r}")
    if gpus is not None and len(gpus) < parallel:
        raise ValueError(f"--parallel {parallel} needs {parallel} GPUs, but only {len(gpus)} are given "
                         f"({','.join(gpus) or 'none'}); each parallel run is pinned to its own GPU")
    if gpus is None and runs_per_gpu > 1:
        raise ValueError(f"--runs-per-gpu {runs_per_gpu} shares GPUs, but none is visible; on the CPU run "
                         "runs side by side with --parallel K instead")
    chosen = list(gpus[:parallel]) if gpus is not None else [None] * parallel
    return [gpu for _ in range(runs_per_gpu) for gpu in chosen]


def run_local(plan: list[PlannedRun], spec: SweepSpec, *, parallel: int = 1, gpus: list[str] | None = None,
              runner: Callable[[list[str], dict, Path], int] | None = None,
              on_start: Callable[[PlannedRun, Path, str | None], None] | None = None,
              on_done: Callable[[Outcome], None] | None = None,
              deadline: float | None = None) -> list[Outcome]:
    """Run the `new`/`resume`/`retry` cells on `parallel` GPU slots, `spec.runs_per_gpu` runs per GPU
    at a time. `on_start(run, log path, gpu)` is called as a run starts, `on_done(outcome)` as it
    ends. `deadline` (Unix seconds): every run stops resumably there (`lra.callbacks.StopAt`: it
    saves last.ckpt and records itself interrupted) and no run starts after it. Cells start in
    `pending_runs` order."""
    from lra.train import write_status_record

    todo = pending_runs(plan)
    slot_list = gpu_slots(parallel, gpus, spec.runs_per_gpu)
    slots: queue.Queue = queue.Queue()
    for gpu in slot_list:
        slots.put(gpu)
    runner = runner or _default_runner
    cpu_threads = max(1, (os.cpu_count() or 1) // len(slot_list))
    lock = threading.Lock()
    outcomes: list[Outcome] = []

    def finished(outcome: Outcome) -> Outcome:
        with lock:
            outcomes.append(outcome)
            if on_done:
                on_done(outcome)
        return outcome

    def elsewhere(run: PlannedRun, held_by: str, seconds: float = 0.0, gpu=None) -> Outcome:
        record = None
        try:
            record = read_record(run.record_path)
        except (OSError, ValueError):
            pass
        return finished(Outcome(run, "running", seconds, gpu, record, f"{ELSEWHERE} ({held_by})"))

    def one(run: PlannedRun) -> Outcome | None:
        gpu = slots.get()
        if deadline is not None and time.time() >= deadline:
            slots.put(gpu)
            return None  # out of time: the run stays as planned and starts on the next sweep
        held_by = run_lock.holder(run.run_dir)
        if held_by is not None:  # another trainer took it since the plan was made
            slots.put(gpu)
            return elsewhere(run, held_by)
        try:
            env = dict(os.environ)
            if deadline is not None:
                env[STOP_AT_ENV] = f"{deadline:.0f}"
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            if len(slot_list) > 1:  # runs side by side: share the host's cores instead of oversubscribing
                env.setdefault("OMP_NUM_THREADS", str(cpu_threads))
            run.run_dir.mkdir(parents=True, exist_ok=True)
            log_path = run.run_dir / "train.log"
            if on_start:
                with lock:
                    on_start(run, log_path, gpu)
            start = time.perf_counter()
            code = runner(train_argv(run, spec), env, log_path)
            seconds = time.perf_counter() - start
        finally:
            slots.put(gpu)
        record = None
        try:
            record = read_record(run.record_path)
        except (OSError, ValueError):
            pass
        status = record.get("status") if record else None
        note = ""
        held_by = run_lock.holder(run.run_dir) if status not in FINAL else None
        if held_by is not None:  # the child found the run folder taken by another trainer and left it
            return elsewhere(run, held_by, seconds, gpu)
        if status not in FINAL:
            # The run died before it could record itself (exit 2 on bad input, killed, crashed).
            tail = _log_tail(log_path)
            status = "failed"
            note = f"exit code {code} without a final record"
            if code in (-signal.SIGINT, -signal.SIGTERM, 130):  # a signal came before it could record itself
                status, note = INTERRUPTED, f"{INTERRUPTED} ({note})"
            error = f"{note}; end of {log_path}:\n{tail}"
            if record is not None:  # keep what the run recorded before it died (curve, steps)
                write_record(run.record_path, {**record, "status": status, "error": error})
            else:
                write_status_record(run.config, status, error)
            record = read_record(run.record_path)
        return finished(Outcome(run, status, seconds, gpu, record, note))

    with ThreadPoolExecutor(max_workers=len(slot_list)) as pool:
        list(pool.map(one, todo))
    return outcomes


def was_stopped(o: Outcome) -> bool:
    """A run interrupted (Ctrl-C, $LRA_STOP_AT) rather than failed: it resumes on the next sweep."""
    return o.status == INTERRUPTED or (
        o.status == "failed" and str((o.record or {}).get("error") or o.note or "").startswith(INTERRUPTED))


def describe_outcome(o: Outcome) -> str:
    rec = o.record or {}

    def pct(key):
        value = rec.get(key)
        return f"{value:.1%}" if isinstance(value, (int, float)) else "-"

    where = f" gpu {o.gpu}" if o.gpu is not None else ""
    shown = "stopped" if was_stopped(o) else o.status
    text = f"{shown:<9} {o.run.label}  val {pct('best_val_acc')} test {pct('test_acc')}  {o.seconds:.0f}s{where}"
    if o.status != "completed":
        err = (rec.get("error") or o.note or "").splitlines()
        text += f"  ({err[0] if err else 'see train.log'})"
    return text


# ---- SLURM launcher -------------------------------------------------------------------------------
@dataclass
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    time_min: int = 240
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int | None = None
    setup: list[str] = field(default_factory=list)   # shell lines run before training (venv, modules)
    backend: str = "auto"                              # auto | submitit | sbatch
    submit: bool = True


def sbatch_script(run: PlannedRun, spec: SweepSpec, opts: SlurmOptions, *, python: str | None = None,
                  cwd: str | None = None) -> str:
    """An sbatch script for one cell: `srun` starts one task per GPU, Lightning's DDP joins them."""
    nodes = spec.num_nodes or 1
    gpus = opts.gpus_per_node
    spec_for_run = SweepSpec(**{**spec.__dict__, "devices": str(gpus), "num_nodes": nodes})
    argv = train_argv(run, spec_for_run, python=python)
    hours, minutes = divmod(int(opts.time_min), 60)
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name=lra-{run.task}-{run.attention}-{run.config.run_id()}",
             f"#SBATCH --output={shlex.quote(f'{run.run_dir.resolve()}/slurm-%j.out')}",
             f"#SBATCH --nodes={nodes}",
             f"#SBATCH --ntasks-per-node={gpus}",
             f"#SBATCH --gpus-per-node={gpus}",
             f"#SBATCH --cpus-per-task={opts.cpus_per_task}",
             f"#SBATCH --time={hours:02d}:{minutes:02d}:00"]
    if opts.partition:
        lines.append(f"#SBATCH --partition={opts.partition}")
    if opts.account:
        lines.append(f"#SBATCH --account={opts.account}")
    if opts.mem_gb:
        lines.append(f"#SBATCH --mem={opts.mem_gb}G")
    lines += ["", "set -euo pipefail", f"cd {shlex.quote(cwd or os.getcwd())}", *opts.setup,
              "# one task per GPU; Lightning reads the SLURM environment and forms the DDP group",
              "srun " + shlex.join(argv), ""]
    return "\n".join(lines)


def require_slurm() -> None:
    """Raise ValueError unless a SLURM cluster answers here: `sbatch` and `squeue` on PATH and
    `squeue` reaching the controller."""
    missing = [name for name in ("sbatch", "squeue") if shutil.which(name) is None]
    why = f"{' and '.join(missing)} not on PATH" if missing else None
    if why is None:
        import getpass

        try:
            out = subprocess.run([shutil.which("squeue"), "--noheader", "--user", getpass.getuser()],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                first = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[0]
                why = f"squeue failed: {first}"
        except (OSError, subprocess.TimeoutExpired) as err:
            why = f"squeue failed: {err}"
    if why is not None:
        raise ValueError(f"--launcher slurm: no SLURM cluster is reachable from here ({why}). To train on this "
                         "machine use --launcher local; to write the job scripts without submitting them, "
                         "--no-submit")


def run_slurm(plan: list[PlannedRun], spec: SweepSpec, opts: SlurmOptions, *,
              echo: Callable[[str], None] = print) -> list[str]:
    """Submit the pending cells; returns job ids (or script paths when not submitted). Without a
    reachable cluster it raises ValueError (`require_slurm`) before anything is written."""
    todo = [r for r in plan if r.state in ("new", "resume", "retry")]
    if not todo:
        return []
    if opts.submit:
        require_slurm()
    backend = opts.backend
    if backend == "auto":
        try:
            import submitit  # noqa: F401

            backend = "submitit"
        except ImportError:
            backend = "sbatch"
    if backend == "submitit":
        return _submit_submitit(todo, spec, opts, echo)
    if backend != "sbatch":
        raise ValueError(f"unknown SLURM backend {backend!r}; use auto, submitit or sbatch")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    script_dir = Path(spec.runs_dir) / ".slurm" / stamp
    script_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for run in todo:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        path = script_dir / f"{run.task}-{run.attention}-{run.config.run_id()}.sbatch"
        path.write_text(sbatch_script(run, spec, opts))
        paths.append(path)
    if not opts.submit:
        echo(f"{len(paths)} sbatch scripts written to {script_dir} (--no-submit); submit them on the cluster "
             f"with:\n  for f in {shlex.quote(str(script_dir))}/*.sbatch; do sbatch \"$f\"; done")
        return [str(p) for p in paths]
    sbatch = shutil.which("sbatch")
    job_ids = []
    for run, path in zip(todo, paths):
        out = subprocess.run([sbatch, "--parsable", str(path)], capture_output=True, text=True)
        if out.returncode != 0:
            echo(f"sbatch failed for {run.label}: {out.stderr.strip()}")
            continue
        job_id = out.stdout.strip().split(";")[0]
        job_ids.append(job_id)
        echo(f"submitted {run.label} as job {job_id}")
    return job_ids


def _submit_submitit(todo: list[PlannedRun], spec: SweepSpec, opts: SlurmOptions,
                     echo: Callable[[str], None]) -> list[str]:
    import submitit

    nodes = spec.num_nodes or 1
    gpus = opts.gpus_per_node
    spec_for_run = SweepSpec(**{**spec.__dict__, "devices": str(gpus), "num_nodes": nodes})
    if not opts.submit:
        for run in todo:
            echo("would submit: " + shlex.join(train_argv(run, spec_for_run)))
        return []
    # cluster="slurm": submitit's own choice would run the jobs on this machine where SLURM is absent
    executor = submitit.AutoExecutor(folder=str(Path(spec.runs_dir) / ".slurm" / "%j"), cluster="slurm")
    params = {"timeout_min": opts.time_min, "nodes": nodes, "tasks_per_node": gpus,
              "gpus_per_node": gpus, "cpus_per_task": opts.cpus_per_task}
    if opts.mem_gb:
        params["mem_gb"] = opts.mem_gb
    if opts.partition:
        params["slurm_partition"] = opts.partition
    if opts.account:
        params["slurm_account"] = opts.account
    if opts.setup:
        params["slurm_setup"] = list(opts.setup)
    executor.update_parameters(**params)
    job_ids = []
    for run in todo:
        executor.update_parameters(name=f"lra-{run.task}-{run.attention}-{run.config.run_id()}")
        job = executor.submit(submitit.helpers.CommandFunction(train_argv(run, spec_for_run), cwd=os.getcwd()))
        job_ids.append(str(job.job_id))
        echo(f"submitted {run.label} as job {job.job_id}")
    return job_ids
