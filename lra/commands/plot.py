"""`lra plot [accuracy|efficiency|kernels|curves|speedup|val_curves]`: seaborn figures (PNG + PDF) from
records and benchmarks."""
from __future__ import annotations

import sys
from pathlib import Path

from lra.commands.table import add_filter_arguments, add_source_arguments, check_baseline, filtered_inputs

PLOTS = {
    "accuracy": "test accuracy vs training throughput per task, bubble = peak memory (run records)",
    "efficiency": "throughput and peak memory vs sequence length per attention (--bench CSVs, run records)",
    "kernels": "kernel TFLOP/s vs sequence length per implementation (--kernels CSVs)",
    "curves": "validation accuracy vs wall-clock time per attention, one figure per task (run records; "
              "--train adds the logged training accuracy)",
    "speedup": "test accuracy vs training speed-up over softmax per task, one point per attention, seed std as "
               "error bars (run records alone on their GPU, or --speed CSVs)",
    "val_curves": "validation accuracy vs optimizer step per attention, mean over seeds with a ±1 std band, one "
                  "figure per task (run records)",
}


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "plot", help="figures (PNG + PDF) from run records and benchmark CSVs",
        description="Figures at paper size: " + "; ".join(f"{k}: {v}" for k, v in PLOTS.items()) +
                    ". Plots whose data is absent are skipped with a message.")
    parser.add_argument("plots", nargs="*", default=[], metavar="PLOT",
                        help=f"which plots ({', '.join(PLOTS)}; default: all)")
    parser.add_argument("--out", type=Path, default=Path("plots"), metavar="DIR",
                        help="folder the figures are written to (default: plots)")
    add_source_arguments(parser)
    parser.add_argument("--kernels", action="append", type=Path, default=[], metavar="FILE",
                        help="CSV written by `lra bench kernels` (repeatable)")
    parser.add_argument("--baseline", default="softmax", metavar="ATTENTION",
                        help="attention speedups are relative to (default: softmax)")
    parser.add_argument("--train", action="store_true",
                        help="curves: also the training accuracy each run logged (logs/*/metrics.csv), in a "
                             "second row of panels")
    add_filter_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from lra import plot, table

    wanted = list(dict.fromkeys(args.plots)) or list(PLOTS)
    unknown = [p for p in wanted if p not in PLOTS]
    if unknown:
        raise ValueError(f"unknown plot {unknown[0]!r}: choose from {', '.join(PLOTS)}")
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out}: is a file; the figures go into a folder")
    records, bench = filtered_inputs(args)
    check_baseline(args.baseline, records, bench)
    kernels = table.load_kernels(args.kernels)
    if not kernels.empty and args.seq_lens:
        kernels = kernels[kernels["seq_len"].isin(args.seq_lens)]

    results = []
    if "accuracy" in wanted:
        results.append(plot.accuracy_vs_throughput(records, args.out))
    if "efficiency" in wanted:
        results.extend(plot.efficiency_vs_length(records, bench, args.out, baseline=args.baseline))
    if "kernels" in wanted:
        results.append(plot.kernel_tflops(kernels, args.out))
    if "curves" in wanted:
        results.extend(plot.training_curves(records, args.out, tasks=args.tasks, train=args.train))
    if "speedup" in wanted:
        from lra.table import load_bench

        speed = load_bench(args.speed) if args.speed else None
        results.append(plot.accuracy_vs_speedup(records, args.out, baseline=args.baseline, speed=speed))
    if "val_curves" in wanted:
        results.extend(plot.validation_curves(records, args.out, tasks=args.tasks))

    written = 0
    for result in results:
        if result.skipped:
            print(f"skipped {result.name}: {result.skipped}", file=sys.stderr)
        for path in result.files:
            print(f"wrote {path}")
            written += 1
    if not written:
        print("lra plot: no figure written: none of the requested plots has data "
              "(pass --runs-dir DIR, --bench FILE or --kernels FILE)", file=sys.stderr)
        return 1
    return 0
