"""Host (CPU) time of one compiled LRA training step per attention (issue #8: block-sparse vs dense at
the host-bound small batch). The step is `lra bench models`' (lra.bench.models.Workload); sdpa is pinned
to cuDNN as there (session 17's calls 3-6 ran an earlier version that left sdpa on PyTorch's default
back-end choice).

At the small batch (32K tokens) the compiled `paper` model's step is bound by the host: the GPU is
busy 1-2 ms of a 5-7 ms step (session 17, scripts/h200/profile_step.py), so which attention is fastest
there is decided by the host time of the step, and step times of one code path drift by tens of
percent between runs. This script measures that host time directly: the model on a batch of one
sequence (GPU work far below the host's), compiled, timed in rotating rounds so that the drift falls
on every attention alike; each round runs --iters steps of one attention and records the mean
wall time per step (at batch 1 the GPU's work is a fraction of the host's, so the wall time is the
host's). Then the same with Dynamo's guard evaluation skipped
(`torch.compiler.set_stance(skip_guard_eval_unsafe=True)`: safe here, nothing changes between calls),
to show the guards' share.

Under the medians, each attention against the first one, paired by round (the two blocks of steps run
back to back, so the drift between rounds cancels): the median per-round ratio of their step times with
a 95 % bootstrap interval, and in how many rounds it was the faster. A per-round CSV goes beside --out.

    PYTHONPATH=. python3 scripts/h200/compiled_host_time.py --seq-len 4096 --out $OUT/host_time.md
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lra import provenance
from lra.bench.models import DEFAULT_OPTIONS, Cell, Workload


def make_step(name: str, seq_len: int, batch: int, mode: str):
    """One training step of `lra bench models`' workload for ``name`` (same model, optimizer, gradient
    clipping and attention options: sdpa pinned to cuDNN) at ``batch`` x ``seq_len`` tokens."""
    cell = Cell(name, seq_len, "custom", batch * seq_len, mode != "eager")
    work = Workload(cell, device=torch.device("cuda"), options=DEFAULT_OPTIONS["cuda"].get(name, {}), grad_clip=1.0,
                    seed=0, compile_mode="default" if mode == "eager" else mode, reset_compiler=False)
    count = itertools.count()
    return lambda: work.step(next(count))


def guards_skipped():
    try:
        return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    except (TypeError, AttributeError):  # a torch without the option
        return None


def paired_ratio(times: list[float], reference: list[float], resamples: int = 2000, seed: int = 0) -> dict:
    """Per-round ratios times[r] / reference[r]: median, 95 % bootstrap interval of the median, and the
    number of rounds where ``times`` was the smaller (faster) of the pair."""
    ratios = np.asarray(times) / np.asarray(reference)
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(ratios, size=(resamples, ratios.size), replace=True), axis=1)
    return {"median": float(np.median(ratios)), "low": float(np.quantile(boot, 0.025)),
            "high": float(np.quantile(boot, 0.975)), "faster": int((ratios < 1).sum()), "rounds": int(ratios.size)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attentions", nargs="+", default=["flash", "flash_sparse", "sdpa"])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--mode", default="default",
                   help="torch.compile mode (reduce-overhead: CUDA graphs), or eager (no torch.compile)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    steps = {}
    for name in args.attentions:
        steps[name] = make_step(name, args.seq_len, args.batch, args.mode)
        for _ in range(args.warmup):
            steps[name]()
    torch.cuda.synchronize()
    results: dict[tuple[str, bool], list[float]] = {}
    for skip in (False, True):
        stance = (None if args.mode == "eager" else guards_skipped()) if skip else contextlib.nullcontext()
        if stance is None:
            continue
        with stance:
            names = list(steps)
            for r in range(args.rounds):
                shift = r % len(names)
                for name in names[shift:] + names[:shift]:
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(args.iters):
                        steps[name]()
                    torch.cuda.synchronize()
                    results.setdefault((name, skip), []).append((time.perf_counter() - t0) * 1e6 / args.iters)
    meta = provenance.collect()
    dev = torch.cuda.get_device_name()
    how = "eager" if args.mode == "eager" else f"torch.compile mode={args.mode}"
    lines = [f"# Wall time of one training step (`paper` model, N={args.seq_len}, batch {args.batch}, {how})", "",
             f"{dev}; torch {torch.__version__}; {args.rounds} rotating rounds of {args.iters} steps per attention; "
             "median over rounds (p10-p90 in brackets), microseconds per step", "",
             f"Command: `{meta['command']}`; git {meta['git_rev']}; {meta['date']}; versions: {meta['versions']}", "",
             "| attention | host µs/step | guards skipped | guards' share |",
             "| --- | --- | --- | --- |"]
    for name in steps:
        def cell(skip: bool) -> str:
            v = results.get((name, skip))
            if not v:
                return "n/a"
            q = statistics.quantiles(v, n=10)
            return f"{statistics.median(v):.0f} [{q[0]:.0f}-{q[-1]:.0f}]"
        on, off = results.get((name, False)), results.get((name, True))
        share = f"{statistics.median(on) - statistics.median(off):.0f}" if on and off else "n/a"
        lines.append(f"| {name} | {cell(False)} | {cell(True)} | {share} |")
    first = next(iter(steps))
    lines += ["", f"Paired by round against {first} (step time ratio, < 1: faster than {first}; median, 95 % "
              f"bootstrap interval, rounds faster):", "",
              "| attention | ratio | guards skipped |", "| --- | --- | --- |"]
    for name in list(steps)[1:]:
        def paired(skip: bool) -> str:
            if (name, skip) not in results:
                return "n/a"
            r = paired_ratio(results[(name, skip)], results[(first, skip)])
            return f"{r['median']:.3f} [{r['low']:.3f}-{r['high']:.3f}], {r['faster']} of {r['rounds']}"
        lines.append(f"| {name} | {paired(False)} | {paired(True)} |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    pd.DataFrame([{"attention": name, "guards_skipped": skip, "round": r, "us_per_step": t}
                  for (name, skip), times in results.items() for r, t in enumerate(times)]
                 ).to_csv(args.out.with_suffix(".csv"), index=False)
    print(text)


if __name__ == "__main__":
    main()
