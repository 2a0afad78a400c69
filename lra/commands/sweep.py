"""`lra sweep`: a grid of `lra train` runs (tasks x seq lens x attentions x seeds)."""
from __future__ import annotations

import argparse
import functools
import sys
import threading
import time

from lra.attention_names import ATTENTION_OPTIONS
from lra.commands.train import add_run_arguments, attention_options_from_args
from lra.seq_len import parse_seq_len
from tasks.registry import TASKS

EPILOG = """\
examples:
  lra sweep --preset cpu --tasks listops --attentions flash softmax performer linformer bigbird --seeds 0
      # the README's CPU main job: minutes on 2 cores
  lra sweep --tasks listops --attentions flash softmax --seeds 0 1 2 --parallel 4      # 4 GPUs
  lra sweep --tasks listops --attentions flash softmax performer --seeds 0 1 2 --runs-per-gpu 9 \
      --budget-minutes 60        # 9 runs share one GPU; rerun to continue after the hour
  lra sweep --tasks pathx --attentions flash --launcher slurm --slurm-gpus-per-node 4 --slurm-partition gpu

Before anything starts (local launcher), each task's data is read once per data source: cells whose
data are missing or corrupt are planned invalid, with the error (a released file's name and line).
Runs whose completed result.json exists are skipped; interrupted runs resume from last.ckpt, and
runs with a checkpoint start before new ones, the furthest along first; failed and OOM runs are
recorded and retried on the next sweep (unless --skip-failed).
exit status: 0 every run completed (or was skipped), 1 some run failed, ran out of memory or
diverged, stopped at --budget-minutes, did not start in it, or its cell is invalid, 2 bad input, or
runs that would take long through the CPU interpreter without --yes (nothing was run).
"""


def add_parser(sub) -> None:
    parser = sub.add_parser("sweep", help="run a grid of trainings (skips finished runs)",
                            description="Expand a grid of runs, print the plan, skip completed "
                                        "runs and train the rest, locally or on SLURM.",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", required=True, metavar="TASK", help=f"LRA tasks: {', '.join(TASKS)}")
    parser.add_argument("--attentions", nargs="+", required=True, metavar="ATTENTION",
                        help=f"attentions from the registry: {', '.join(ATTENTION_OPTIONS)}")
    parser.add_argument("--seq-lens", nargs="+", default=None, metavar="N",
                        help="sequence lengths, 4096 or 4K (default: each preset's)")
    parser.add_argument("--seeds", nargs="+", default=[0], metavar="SEED", help="random seeds (default: 0)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan (configs and the attentions' limits checked, no data read) and exit")
    parser.add_argument("--yes", action="store_true",
                        help="start even when runs would take long on this machine (Triton kernels through "
                             "the CPU interpreter)")
    parser.add_argument("--skip-failed", action="store_true",
                        help="do not retry runs whose record says failed or oom (interrupted runs still resume)")
    parser.add_argument("--parallel", type=int, default=1, metavar="K",
                        help="local launcher: K runs at once, each pinned to its own GPU")
    parser.add_argument("--runs-per-gpu", type=int, default=1, metavar="K",
                        help="local launcher: K runs share each GPU at once (LRA models leave a large GPU "
                             "mostly idle); each record says how many runs shared its GPU, and speed "
                             "tables take step times from solo runs only (default 1)")
    parser.add_argument("--budget-minutes", type=float, default=None, metavar="M",
                        help="local launcher: stop every run resumably M minutes from now (each saves "
                             "last.ckpt and records itself interrupted) and start no run after that; "
                             "the same command run again continues where this one stopped")
    parser.add_argument("--gpus", nargs="+", default=None, metavar="GPU",
                        help="GPUs for --parallel, as CUDA_VISIBLE_DEVICES names them, e.g. 0 1 2 3 "
                             "(default: all visible GPUs)")
    parser.add_argument("--heartbeat", type=float, default=60.0, metavar="SECONDS",
                        help="local launcher without a terminal: every SECONDS, one line per running run "
                             "with its latest validation (step, val_acc) from its train.log (default 60; 0: off)")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="local: train on this machine; slurm: one job per run (default: local)")
    slurm = parser.add_argument_group("SLURM (--launcher slurm)")
    slurm.add_argument("--slurm-backend", choices=("auto", "submitit", "sbatch"), default="auto",
                       help="submitit when installed (pip install 'lra[slurm]'), else sbatch scripts")
    slurm.add_argument("--slurm-partition", default=None, help="partition of the jobs (default: the cluster's)")
    slurm.add_argument("--slurm-account", default=None, help="account the jobs are charged to (default: yours)")
    slurm.add_argument("--slurm-time", type=int, default=240, metavar="MINUTES", help="time limit per run")
    slurm.add_argument("--slurm-gpus-per-node", type=int, default=1,
                       help="GPUs (= DDP processes) per node for each run")
    slurm.add_argument("--slurm-cpus-per-task", type=int, default=8, help="CPU cores per process (default 8)")
    slurm.add_argument("--slurm-mem-gb", type=int, default=None,
                       help="memory per node in GB (default: the partition's)")
    slurm.add_argument("--slurm-setup", action="append", default=[], metavar="LINE",
                       help="shell line to run in the job before training (repeatable), "
                            "e.g. 'source .venv/bin/activate'")
    slurm.add_argument("--no-submit", action="store_true",
                       help="write the job scripts / show the submissions without submitting")
    add_run_arguments(parser)
    parser.set_defaults(func=run)


def _gpu_list(args) -> list[str] | None:
    import torch

    if args.gpus is not None:
        if not torch.cuda.is_available():
            raise ValueError(f"--gpus {' '.join(args.gpus)}: no CUDA GPU is visible here (torch.cuda.is_available() "
                             "is False); leave --gpus out to train on the CPU")
        return list(args.gpus)
    if torch.cuda.is_available():
        return [str(i) for i in range(torch.cuda.device_count())]
    return None  # CPU: nothing to pin


def _local_gpus(args) -> list[str] | None:
    """The GPUs the local launcher pins runs to (None on the CPU), checked against --parallel and
    --runs-per-gpu before anything is planned."""
    gpus = _gpu_list(args)
    if gpus is not None and args.parallel > len(gpus):
        raise ValueError(f"--parallel {args.parallel} needs {args.parallel} GPUs; visible: {','.join(gpus)}")
    if gpus is None and args.runs_per_gpu > 1:
        raise ValueError(f"--runs-per-gpu {args.runs_per_gpu}: no GPU is visible; on the CPU use --parallel K")
    return gpus


def _split_overrides(args: argparse.Namespace) -> None:
    """`--attentions flash softmax model.dim=64`: the list options take every word up to the next
    option, so KEY=VALUE overrides written after them (as after `lra train`'s options) land in those
    lists; move them to the overrides, type the numeric lists and refuse comma-separated GPUs."""
    moved = []
    for name in ("tasks", "attentions", "seq_lens", "seeds", "gpus"):
        values = getattr(args, name)
        if values is None:
            continue
        moved += [v for v in values if "=" in str(v)]
        values = [v for v in values if "=" not in str(v)]
        flag = "--" + name.replace("_", "-")
        if not values:
            raise ValueError(f"{flag}: expected at least one value before the KEY=VALUE overrides")
        if name == "seq_lens":
            try:
                values = [parse_seq_len(v) for v in values]
            except ValueError as err:
                raise ValueError(f"{flag}: {err}") from None
        elif name == "gpus" and any("," in g for g in values):
            items = " ".join(p for g in values for p in g.split(",") if p)
            raise ValueError(f"{flag} {' '.join(values)}: a list is space-separated: {flag} {items}")
        elif name == "seeds":
            try:
                values = [int(v) for v in values]
            except ValueError:
                bad = next(v for v in values if not str(v).lstrip("-").isdigit())
                raise ValueError(f"{flag}: expected integers, got {bad!r}") from None
        setattr(args, name, values)
    args.overrides = [*moved, *args.overrides]


def run(args: argparse.Namespace) -> int:
    from lra.sweep import (SlurmOptions, SweepSpec, check_data, describe_outcome, format_plan, pending_runs,
                           plan_sweep, record_invalid, require_slurm, run_local, run_slurm, was_stopped)

    _split_overrides(args)
    spec = SweepSpec(tasks=args.tasks, attentions=args.attentions,
                     seq_lens=args.seq_lens or [None], seeds=args.seeds, preset=args.preset,
                     overrides=list(args.overrides), attention_options=attention_options_from_args(args),
                     runs_dir=args.runs_dir, data_dir=args.data_dir, devices=args.devices,
                     num_nodes=args.num_nodes, strategy=args.strategy, compile=args.compile,
                     compile_mode=args.compile_mode, skip_failed=args.skip_failed, runs_per_gpu=args.runs_per_gpu)
    if args.parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {args.parallel}")
    if args.runs_per_gpu < 1:
        raise ValueError(f"--runs-per-gpu must be >= 1, got {args.runs_per_gpu}")
    if args.budget_minutes is not None and not args.budget_minutes > 0:
        raise ValueError(f"--budget-minutes must be > 0, got {args.budget_minutes}")
    if args.launcher == "slurm" and (args.runs_per_gpu != 1 or args.budget_minutes is not None):
        raise ValueError("--runs-per-gpu and --budget-minutes are options of the local launcher; with SLURM "
                         "use --slurm-time for the time limit")
    if not args.heartbeat >= 0:
        raise ValueError(f"--heartbeat must be >= 0 seconds (0: off), got {args.heartbeat}")
    if args.launcher == "slurm" and not (args.no_submit or args.dry_run):
        require_slurm()
    gpus = _local_gpus(args) if args.launcher == "local" else None
    plan = plan_sweep(spec)
    refusal = _long_on_this_machine(plan) if args.launcher == "local" else None
    if args.launcher == "local" and not args.dry_run and not (refusal and not args.yes):
        check_data(plan)
    print(format_plan(plan), flush=True)
    if args.dry_run:
        if refusal:
            print(refusal, file=sys.stderr)
        return 0
    if refusal and not args.yes:
        print(refusal, file=sys.stderr)
        return 2
    record_invalid(plan)
    pending = pending_runs(plan)

    if args.launcher == "slurm":
        opts = SlurmOptions(partition=args.slurm_partition, account=args.slurm_account,
                            time_min=args.slurm_time, gpus_per_node=args.slurm_gpus_per_node,
                            cpus_per_task=args.slurm_cpus_per_task, mem_gb=args.slurm_mem_gb,
                            setup=list(args.slurm_setup), backend=args.slurm_backend,
                            submit=not args.no_submit)
        run_slurm(plan, spec, opts)
        return 0

    deadline = time.time() + 60 * args.budget_minutes if args.budget_minutes is not None else None
    start = time.perf_counter()
    outcomes = _run_with_progress(plan, spec, pending, args.parallel, gpus, run_local, describe_outcome,
                                  heartbeat_s=args.heartbeat, deadline=deadline)
    not_started = len(pending) - len(outcomes)
    invalid = sum(r.state == "invalid" for r in plan)
    done = sum(r.state == "done" for r in plan)
    elsewhere = sum(r.state == "running" for r in plan) + sum(o.status == "running" for o in outcomes)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("completed", "failed", "oom", "diverged")}
    stopped = sum(map(was_stopped, outcomes))
    counts["failed"] -= sum(was_stopped(o) and o.status == "failed" for o in outcomes)
    print(f"sweep finished in {time.perf_counter() - start:.0f}s: {counts['completed']} completed, "
          f"{counts['failed']} failed, {counts['oom']} oom, "
          + (f"{counts['diverged']} diverged, " if counts["diverged"] else "")
          + (f"{stopped} stopped (they resume on the next sweep), " if stopped else "")
          + (f"{not_started} not started (out of time), " if not_started else "")
          + (f"{elsewhere} running elsewhere (left to the process that holds them), " if elsewhere else "")
          + f"{done} already done, {invalid} invalid "
          f"(recorded as failed). Records: {spec.runs_dir}/<task>/<attention>/<run-id>/result.json — "
          f"`lra table` summarises them.")
    return 0 if counts["failed"] + counts["oom"] + counts["diverged"] + stopped + invalid + not_started == 0 else 1


def _long_on_this_machine(plan) -> str | None:
    """The refusal of a sweep whose pending runs would take long through the Triton interpreter."""
    from lra.interpreter_cost import long_run_warning, refusal
    from lra.train import resolve_runtime

    warnings = [w for r in plan if r.state in ("new", "resume", "retry")
                for w in [long_run_warning(r.config, resolve_runtime(r.config).cuda)] if w]
    return refusal(warnings, "lra sweep") if warnings else None


class _Running:
    """The runs in flight (label, train.log, start time), what each last reported, and the
    steps and seconds of the finished ones (for the sweep's ETA)."""

    def __init__(self, pending: list = (), slots: int = 1):
        self.lock = threading.Lock()
        self.runs: dict = {}   # label -> (run, log path, gpu, start time)
        self.pending = list(pending)
        self.slots = slots
        self.ended: set[str] = set()
        self.finished: list = []   # lra.sweep_eta.Run of the runs this sweep trained
        self.first_step: dict = {}  # label -> (time, step) when a running run's first step was seen

    def start(self, run, log_path, gpu) -> None:
        with self.lock:
            self.runs[run.label] = (run, log_path, gpu, time.perf_counter())

    def stop(self, outcome) -> None:
        with self.lock:
            self.runs.pop(outcome.run.label, None)
            seen = self.first_step.pop(outcome.run.label, None)
            self.ended.add(outcome.run.label)
            if outcome.status != "running":   # a run another process holds says nothing of this sweep's pace
                steps = (outcome.record or {}).get("steps")
                steps = steps if isinstance(steps, int) else None
                seconds = outcome.seconds
                if getattr(outcome.run, "resumes", False) and seen and steps is not None and steps > seen[1]:
                    # a resumed run's record counts its earlier segments' steps: take those seen in this sweep
                    seen_at, seen_step = seen
                    steps, seconds = steps - seen_step, time.perf_counter() - seen_at
                self.finished.append(_eta_run(outcome.run, seconds, steps))

    def eta(self) -> str:
        """'ETA 12m30s' for the whole sweep (lra.sweep_eta), 'ETA ?' before anything tells."""
        from lra.run_progress import read_progress
        from lra.sweep_eta import estimate, format_eta

        with self.lock:
            items = list(self.runs.values())
            finished = list(self.finished)
            queued = [_eta_run(r) for r in self.pending if r.label not in self.ended and r.label not in self.runs]
        now = time.perf_counter()
        running = []
        for run, log_path, _, started in items:
            progress = read_progress(log_path)
            step = progress.step if progress else None
            recent = None
            if step:
                seen_at, seen_step = self.first_step.setdefault(run.label, (now, step))
                if step > seen_step and now > seen_at:
                    recent = (step - seen_step) / (now - seen_at)
            running.append(_eta_run(run, now - started, step, recent))
        return format_eta(estimate(finished, running, queued, self.slots))

    def lines(self, short: bool = False) -> list[str]:
        """One line per running run; `short` (for the progress bar's width): task/attention/seed,
        step/max_steps and the latest val acc."""
        from lra.run_progress import read_progress

        with self.lock:
            items = list(self.runs.items())
        now = time.perf_counter()
        out = []
        for label, (run, log_path, gpu, started) in items:
            progress = read_progress(log_path)
            if short:
                latest = progress.short() if progress else f"starting ({now - started:.0f}s)"
                out.append(f"{run.task}/{run.attention}/s{run.seed} {latest}")
                continue
            where = f" gpu {gpu}" if gpu is not None else ""
            latest = progress.long() if progress else f"no training step yet (log: {log_path})"
            out.append(f"{label}{where}  {now - started:.0f}s  {latest}")
        return out


def _eta_run(run, elapsed_s: float = 0.0, step: int | None = None, recent_pace: float | None = None):
    """A planned run as the ETA sees it: runs of one task, length and attention go at one pace; runs
    through the Triton interpreter and native ones are groups whose paces say nothing of each other."""
    from lra.interpreter_cost import runs_through_interpreter
    from lra.sweep_eta import Run

    kind = (run.config.task, run.config.data.seq_len, run.config.attention)
    group = runs_through_interpreter(run.config, _cuda())
    return Run(kind, run.config.train.max_steps, elapsed_s, step, recent_pace, group)


@functools.lru_cache(maxsize=None)
def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _every(seconds: float, action, stop: threading.Event) -> threading.Thread:
    def loop():
        while not stop.wait(seconds):
            action()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _run_with_progress(plan, spec, pending, parallel, gpus, run_local, describe_outcome, heartbeat_s=60.0,
                       deadline=None):
    """Run the pending cells, reporting as they start, while they train and as they end: plain lines
    without a terminal (a `[running]` heartbeat every `heartbeat_s` seconds with each run's latest
    validation from its train.log), a rich progress bar with the running runs' latest validation in a
    terminal."""
    if not pending:
        return []
    running = _Running(pending, parallel * getattr(spec, "runs_per_gpu", 1))
    stop = threading.Event()
    interactive = sys.stdout.isatty()
    if not interactive:
        finished = [0]
        printing = threading.Lock()  # a heartbeat's lines and count describe one moment: no run ends between them

        def on_start(run, log_path, gpu):
            with printing:
                running.start(run, log_path, gpu)
                print(f"[start] {run.label}  (log: {log_path})", flush=True)

        def on_done(outcome):
            with printing:
                running.stop(outcome)
                finished[0] += 1
                print(f"[{finished[0]}/{len(pending)}] {describe_outcome(outcome)}", flush=True)

        def heartbeat():
            with printing:
                lines = running.lines()
                for line in lines:
                    print(f"[running] {line}", flush=True)
                if lines:
                    print(f"[sweep] {finished[0]}/{len(pending)} done, {running.eta()}", flush=True)

        if heartbeat_s > 0:
            _every(heartbeat_s, heartbeat, stop)
        try:
            return run_local(plan, spec, parallel=parallel, gpus=gpus, on_start=on_start, on_done=on_done,
                             deadline=deadline)
        finally:
            stop.set()

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[eta]}"), TextColumn("{task.description}")) as progress:
        bar = progress.add_task("", total=len(pending), eta="ETA ?")

        def show_running():
            progress.update(bar, description=" | ".join(running.lines(short=True)), eta=running.eta())

        def on_start(run, log_path, gpu):
            running.start(run, log_path, gpu)
            show_running()

        def on_done(outcome):
            running.stop(outcome)
            progress.console.print(describe_outcome(outcome))
            progress.update(bar, advance=1)
            show_running()

        _every(2.0, show_running, stop)
        try:
            return run_local(plan, spec, parallel=parallel, gpus=gpus, on_start=on_start, on_done=on_done,
                             deadline=deadline)
        finally:
            stop.set()
