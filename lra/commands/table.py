"""`lra table [record|headline|accuracy|efficiency|steps|kernels]`: results tables from run records and
benchmark CSVs."""
from __future__ import annotations

import difflib
import sys
import warnings
from pathlib import Path

from lra.bench.kernel_options import PASSES as KERNEL_PASSES
from lra.commands.parser import Parser, seq_len

TABLES = ("record", "headline", "accuracy", "efficiency", "steps", "kernels")
DEFAULT_TABLES = ("record",)
FORMAT_ALIASES = {"md": "markdown", "tex": "latex"}


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "table", help="the LRA table of record, accuracy and efficiency tables from run records",
        description="record (default): the LRA table of record, one row per task × attention: test accuracy "
                    "mean ± std over seeds beside the FlashAttention paper's number, speed relative to the "
                    "softmax Transformer, time to best validation, peak memory, and where the setting departs "
                    "from the paper's. headline: its compact view, attention × task (test accuracy with the "
                    "paper's number, speed-up, peak memory), as the README shows it. accuracy: the papers' layout "
                    "(attention × task, with both papers' numbers and Δ). efficiency: attention × sequence length "
                    "(throughput, speedup over softmax, peak memory, training time) from run records and "
                    "`lra bench models` CSVs. steps: the model-step "
                    "benchmark's compact view, batch and mode × length, ms per step of each attention (--bench "
                    "CSVs) and flash's speed-up over --baseline, as the README shows it. kernels: the kernels' "
                    "headlines from `lra bench kernels` CSVs (--kernels): per head dim and pass, the range over N "
                    "of our dense TFLOP/s and speed-up over each anchor; per layout, our block-sparse speed-up over "
                    "FlexAttention and time against the dense kernel's.")
    parser.add_argument("tables", nargs="*", default=[], metavar="TABLE",
                        help=f"any of {', '.join(TABLES)} (default: record)")
    add_source_arguments(parser)
    parser.add_argument("--format", choices=("markdown", "md", "csv", "latex", "tex"), default="markdown",
                        help="markdown / md (default), csv (tidy numeric rows, one per cell) or latex / tex "
                             "(booktabs)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write to this file instead of the terminal "
                        "(csv with several tables: FILE-<table>.csv each)")
    parser.add_argument("--baseline", default="softmax", metavar="ATTENTION",
                        help="attention the speedups are relative to (default: softmax, the Transformer)")
    parser.add_argument("--published", type=Path, default=None, metavar="DIR",
                        help="folder of published-number CSVs (default: results/published of this checkout)")
    parser.add_argument("--kernels", action="append", type=Path, default=[], metavar="FILE",
                        help="kernels table: CSV written by `lra bench kernels` (repeatable)")
    parser.add_argument("--passes", nargs="+", choices=KERNEL_PASSES, default=None, metavar="PASS",
                        help="kernels table: only these passes (fwd, bwd, fwd_bwd; default all)")
    add_filter_arguments(parser)
    parser.set_defaults(func=run)


def add_source_arguments(parser: Parser) -> None:
    parser.add_argument("--runs-dir", action="append", type=Path, metavar="DIR",
                        help="run tree (**/result.json) or folder of committed run records (results/**/*.json), "
                             "or one record file (repeatable; default: runs)")
    parser.rename("--runs", "--runs-dir")
    parser.add_argument("--bench", action="append", type=Path, default=[], metavar="FILE",
                        help="CSV written by `lra bench models`, for the efficiency views (repeatable)")
    parser.add_argument("--speed", action="append", type=Path, default=[], metavar="FILE",
                        help="table of record and speedup plot: take speed figures from this `lra bench models` "
                             "CSV (rows of the same attention, length and batch size) before the runs' own "
                             "timings (repeatable)")


def add_filter_arguments(parser: Parser) -> None:
    parser.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks")
    parser.add_argument("--attentions", nargs="+", metavar="NAME", help="only these attentions")
    parser.add_argument("--seq-lens", nargs="+", type=seq_len, metavar="N",
                        help="only these sequence lengths (4096 or 4K)")
    parser.add_argument("--presets", nargs="+", metavar="PRESET", help="only runs of these presets")
    for old in ("--task", "--attention", "--seq-len", "--preset"):
        parser.rename(old, old + "s")


def load_records(args):
    """Run records under --runs-dir (default runs/), corrupt files reported on stderr and skipped."""
    from lra.table import load_run_records

    roots = args.runs_dir or [Path("runs")]
    for root in roots:
        if not root.exists() and args.runs_dir:
            raise FileNotFoundError(f"--runs-dir {root}: no such folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_run_records(*[r for r in roots if r.exists()]) if any(r.exists() for r in roots) else None
    for warning in caught:
        print(f"lra {args.command}: warning: {warning.message}", file=sys.stderr)
    import pandas as pd

    return records if records is not None else pd.DataFrame()


def filtered_inputs(args):
    """(records, bench) after the --tasks/--attentions/--seq-lens/--presets filters."""
    from lra import table

    records = load_records(args)
    bench = table.load_bench(args.bench)
    check_filter_names(args, records, bench)
    filters = dict(task=args.tasks, attention=args.attentions, seq_len=args.seq_lens, preset=args.presets)
    records = table.filter_frame(records, **filters) if not records.empty else records
    bench = table.filter_frame(bench, attention=args.attentions, seq_len=args.seq_lens) if not bench.empty else bench
    return records, bench


def _known(column: str, records, bench) -> set[str]:
    """The registered attentions (``column`` "attention") or tasks ("task"), and those the records /
    benchmark CSVs hold (e.g. a benchmark's own names, such as sdpa_flash)."""
    if column == "attention":
        from lra import attention

        known = set(attention.names())
    else:
        from tasks.registry import TASKS

        known = set(TASKS)
    for frame in (records, bench):
        if not frame.empty and column in frame.columns:
            known |= {str(a) for a in frame[column].dropna().unique()}
    return known


def _unknown_name(option: str, name: str, what: str, known: set[str]) -> ValueError:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return ValueError(f"{option} {name!r}: no such {what}; available: {', '.join(sorted(known))}"
                      + (f" (did you mean {close[0]!r}?)" if close else ""))


def check_filter_names(args, records, bench) -> None:
    """--tasks / --attentions name registered tasks and attentions or ones the records / CSVs hold: a
    typo would otherwise filter everything out, and the command say only that nothing matched."""
    for option, values, column in (("--tasks", args.tasks, "task"), ("--attentions", args.attentions, "attention")):
        if values:
            known = _known(column, records, bench)
            unknown = [v for v in values if v not in known]
            if unknown:
                raise _unknown_name(option, unknown[0], column, known)


def check_baseline(baseline: str, records, bench) -> None:
    """`--baseline`: a registered attention or one the records / benchmark CSVs hold; a typo would
    otherwise leave every speedup empty without a word."""
    known = _known("attention", records, bench)
    if baseline not in known:
        raise _unknown_name("--baseline", baseline, "attention", known)


def run(args) -> int:
    from lra import published as pub
    from lra import table

    wanted = list(dict.fromkeys(args.tables)) or list(DEFAULT_TABLES)
    fmt = FORMAT_ALIASES.get(args.format, args.format)
    unknown = [t for t in wanted if t not in TABLES]
    if unknown:
        raise ValueError(f"unknown table {unknown[0]!r}: choose from {', '.join(TABLES)}")
    if args.out is not None and args.out.is_dir():
        raise ValueError(f"--out {args.out}: is a folder; give a file name, e.g. {args.out / 'table.md'}")
    if "kernels" in wanted and not args.kernels:
        raise ValueError("the kernels table reads `lra bench kernels` CSVs: pass --kernels FILE")
    if args.kernels and wanted != ["kernels"]:
        raise ValueError("--kernels feeds the kernels table only: `lra table kernels --kernels FILE`")
    if wanted == ["kernels"]:
        kernels = table.load_kernels(args.kernels)
        if args.seq_lens:
            kernels = kernels[kernels["seq_len"].isin(args.seq_lens)]
        sections = table.kernel_sections(kernels, args.passes or KERNEL_PASSES)
        if fmt == "csv":  # one CSV: each section's rows under its title
            import pandas as pd

            text = pd.concat([s.table.assign(table=s.title) for s in sections], ignore_index=True).to_csv(index=False)
        else:
            text = table.render(sections, fmt)
        return _write(args, {"kernels": text}, fmt)
    records, bench = filtered_inputs(args)
    check_baseline(args.baseline, records, bench)
    if records.empty and bench.empty:
        where = ", ".join(str(r) for r in (args.runs_dir or [Path("runs")]))
        filtered = any([args.tasks, args.attentions, args.seq_lens, args.presets])
        print(f"lra table: nothing to tabulate: no run records under {where}"
              + (" match the filters" if filtered else "")
              + (" and no --bench CSV rows do" if args.bench and filtered else
                 " and the --bench CSVs have no rows" if args.bench else " and no --bench CSV")
              + " (run `lra train` / `lra sweep`, or `lra bench models`)", file=sys.stderr)
        return 1

    published = None
    if {"accuracy", "record", "headline"} & set(wanted):
        try:
            published = pub.load_accuracy(args.published)
        except FileNotFoundError as err:
            if args.published is not None:
                raise
            print(f"lra table: warning: {err}; showing our numbers only", file=sys.stderr)

    speed = table.load_bench(args.speed) if args.speed else None
    outputs: dict[str, str] = {}
    for name in wanted:
        if name == "record":
            summary = table.record_summary(records, published, baseline=args.baseline, speed=speed,
                                           tasks=args.tasks, attentions=args.attentions)
            sections = table.record_sections(summary, published, records, baseline=args.baseline)
        elif name == "headline":
            record = table.record_summary(records, published, baseline=args.baseline, speed=speed,
                                          tasks=args.tasks, attentions=args.attentions)
            summary = table.headline_summary(record)
            sections = table.headline_sections(summary, record, records, baseline=args.baseline)
        elif name == "accuracy":
            summary = table.accuracy_summary(records, published, baseline=args.baseline)
            sections = table.accuracy_sections(summary, published, records)
        elif name == "steps":
            summary = table.steps_summary(bench, baseline=args.baseline)
            sections = table.steps_sections(summary, baseline=args.baseline)
        else:
            summary = table.efficiency_summary(records, bench, baseline=args.baseline)
            sections = table.efficiency_sections(summary, args.baseline, records)
        outputs[name] = table.to_csv(summary) if fmt == "csv" else table.render(sections, fmt)

    return _write(args, outputs, fmt)


def _write(args, outputs: dict[str, str], fmt: str) -> int:
    """The rendered tables on the terminal or in --out (csv with several tables: one file each)."""
    if args.out is None:
        if fmt == "csv" and len(outputs) > 1:
            raise ValueError("--format csv on the terminal prints one table (two CSVs in one stream parse as "
                             "neither): name it (`lra table accuracy --format csv`) or give --out FILE "
                             "(FILE-<table>.csv each)")
        sys.stdout.write("\n".join(outputs.values()))
        return 0
    from lra.records import atomic_write_text

    if fmt == "csv" and len(outputs) > 1:
        for name, text in outputs.items():
            path = args.out.with_name(f"{args.out.stem}-{name}{args.out.suffix or '.csv'}")
            atomic_write_text(path, text)
            print(f"wrote {path}")
    else:
        atomic_write_text(args.out, "\n".join(outputs.values()))
        print(f"wrote {args.out}")
    return 0
