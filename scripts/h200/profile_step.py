"""Where the time of one LRA training step goes (issue 8): cProfile + torch.profiler.

Builds `lra bench models`' workload (lra.bench.models.Workload: the paper-size model, optimizer, step;
sdpa pinned to cuDNN as there — until session 17 this script built its own, with sdpa on PyTorch's
default back-end) for each attention at one N and batch, runs warm-up steps, then profiles 10 steps:
cProfile (Python, sorted by cumulative and by own time) and torch.profiler (CPU + CUDA, ops sorted by
self CPU time). Writes <out>/<attention>_N<n>_B<b>.txt.

    python scripts/h200/profile_step.py --attentions flash sdpa --seq-len 1024 --batch 32 --out prof

``--compile``: the model under torch.compile (default mode), as `lra bench models --modes compiled` runs
it; the files are then named <attention>_N<n>_B<b>_compiled.txt. Each compiled report also lists every
kernel Inductor chose *not* to launch through its static launcher, with the reason it logged (compiles
then run in this process, so that the log reaches us).

Each report's first line: the CPU time to issue a step, the wall time of a step and the GPU busy time
(sum of the kernels' durations in torch.profiler, per step): wall well above GPU busy = host-bound.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import logging
import pstats
import time
from pathlib import Path

import torch

from lra.bench.models import DEFAULT_OPTIONS, Cell, Workload


def slowest_with_callers(tp, trace_path: Path, focus: list[str], top: int = 8) -> str:
    """The slowest CPU op events (self duration) with the events enclosing them on the same thread
    (Python frames, modules, autograd nodes): which line of the step pays for them."""
    import json

    tp.export_chrome_trace(str(trace_path))
    events = [e for e in json.loads(trace_path.read_text())["traceEvents"]
              if e.get("ph") == "X" and "dur" in e and e.get("cat") in ("cpu_op", "python_function", "user_annotation")]
    trace_path.unlink()
    ops = sorted((e for e in events if e["cat"] == "cpu_op" and e["name"] in focus), key=lambda e: -e["dur"])
    lines = [f"\nslowest calls of {', '.join(focus)} and their callers:"]
    for e in ops[:top]:
        t0, t1 = e["ts"], e["ts"] + e["dur"]
        outer = [o for o in events if o is not e and o.get("tid") == e.get("tid") and o["ts"] <= t0
                 and o["ts"] + o["dur"] >= t1]
        outer.sort(key=lambda o: o["ts"])
        lines.append(f"{e['dur']:8.0f} us  {e['name']}")
        lines += [f"            <- {o['name'][:150]}" for o in outer[-10:][::-1]]
    return "\n".join(lines) + "\n"


class BypassedStaticLaunch(logging.Handler):
    """Collects Inductor's "Bypassing StaticallyLaunchedCudaKernel due to ..." log lines."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "StaticallyLaunched" in message:
            self.reasons.append(message)


def watch_static_launch() -> BypassedStaticLaunch:
    """Compile in this process (workers' logs do not reach us) and collect Inductor's static-launch bypasses."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    handler = BypassedStaticLaunch()
    logger = logging.getLogger("torch._inductor.runtime.triton_heuristics")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return handler


def gpu_busy_ms(tp, steps: int) -> float:
    """Sum of the kernels' durations torch.profiler recorded, per step (device events only: a CPU op's
    device time repeats the time of the kernels it launched)."""
    from torch.autograd import DeviceType

    total_us = sum(e.self_device_time_total for e in tp.key_averages() if e.device_type == DeviceType.CUDA)
    return total_us / 1e3 / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attentions", nargs="+", default=["flash", "sdpa"])
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    p.add_argument("--focus", nargs="+", default=["aten::fill_", "aten::zero_", "aten::copy_"],
                   help="ops whose slowest calls are listed with their callers")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    bypassed = watch_static_launch() if args.compile else None
    for name in args.attentions:
        if args.compile:
            torch._dynamo.reset()
            bypassed.reasons.clear()
        # `lra bench models`' own step (model, optimizer, clipping, batches; sdpa pinned to cuDNN there)
        cell = Cell(name, args.seq_len, "custom", args.batch * args.seq_len, args.compile)
        work = Workload(cell, device=device, options=DEFAULT_OPTIONS[device.type].get(name, {}), grad_clip=1.0,
                        seed=0, attention_dropout=args.attention_dropout, reset_compiler=False)
        count = itertools.count()

        def step() -> None:
            work.step(next(count))

        for _ in range(5):
            step()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        cpu_ms = (time.perf_counter() - t0) * 1e3 / args.steps  # CPU time to issue one step
        if cuda:
            torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3 / args.steps
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step()
        prof.disable()
        if cuda:
            torch.cuda.synchronize()
        stats_text = io.StringIO()
        for key in ("cumulative", "tottime"):
            stats = pstats.Stats(prof, stream=stats_text)
            stats.sort_stats(key).print_stats(35)
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=activities, with_stack=True) as tp:
            for _ in range(3):
                step()
            if cuda:
                torch.cuda.synchronize()
        gpu = f", GPU busy {gpu_busy_ms(tp, 3):.2f} ms/step" if cuda else ""
        report = io.StringIO()
        report.write(f"{name}{' compiled' if args.compile else ''}: N={args.seq_len} batch={args.batch} issue {cpu_ms:.2f} ms/step, "
                     f"wall {wall_ms:.2f} ms/step{gpu}\n\n")
        if bypassed is not None:
            report.write(f"kernels Inductor launches without its static launcher: {len(bypassed.reasons)}\n")
            report.writelines(f"  {reason}\n" for reason in bypassed.reasons)
            report.write("\n")
        report.write(stats_text.getvalue())
        report.write(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
        if cuda:
            report.write(tp.key_averages().table(sort_by="self_cuda_time_total", row_limit=25))
        report.write(slowest_with_callers(tp, args.out / "trace.json", args.focus))
        path = args.out / f"{name}_N{args.seq_len}_B{args.batch}{'_compiled' if args.compile else ''}.txt"
        path.write_text(report.getvalue())
        print(report.getvalue().splitlines()[0], "->", path)


if __name__ == "__main__":
    main()
