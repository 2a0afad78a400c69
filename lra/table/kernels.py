"""`lra bench kernels` CSVs: loading, and the dense kernels' headline -- per head dim and pass, the
range over N of our kernel's TFLOP/s and of its speed-up over each anchor (cells where both ran).
The benchmark's own report opens with it (`lra.bench.kernels`); `lra table kernels` renders it
alone, for one pass or several, as the README shows it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from lra.bench.kernel_options import PASSES as KERNEL_PASSES
from lra.table.bench import read_csv_file
from lra.table.render import Section

KERNEL_COLUMNS = ("impl", "pass", "seq_len", "head_dim", "tflops", "status")
# the anchors of the dense comparison, in the report's order (lra.bench.kernels times them)
KERNEL_ANCHORS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "softmax")
_K = 1024


def load_kernels(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate `lra bench kernels` CSVs; a file of the wrong kind is one clear error naming it."""
    frames = []
    for path in map(Path, paths):
        frame = read_csv_file(path, "write one with `lra bench kernels`")
        missing = [c for c in KERNEL_COLUMNS if c not in frame.columns]
        if missing:
            hint = ""
            if {"ms_per_step", "regime"} <= set(frame.columns):
                hint = " (it looks like a `lra bench models` CSV: pass it with --bench)"
            elif "attention" in frame.columns:
                hint = " (it has an attention column but no kernel timings: `lra bench kernels` writes those)"
            raise ValueError(f"{path}: not a `lra bench kernels` CSV, missing column(s) {', '.join(missing)}{hint}")
        frame["file"] = str(path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*KERNEL_COLUMNS, "file"])


def kernel_ranges(kernels: pd.DataFrame, passes: Iterable[str] = KERNEL_PASSES) -> tuple[pd.DataFrame, str]:
    """(table, span): per (head dim, pass) of the dense cells, the range over N of ours' TFLOP/s and
    of ours' speed-up (anchor ms / ours ms) over each anchor that ran; span names the lengths, e.g.
    "1K–16K". Empty without `ours` cells."""
    pattern = kernels["pattern"] if "pattern" in kernels.columns else pd.Series("dense", index=kernels.index)
    ok = kernels[(pattern == "dense") & (kernels["status"] == "ok")]
    if ok.empty or "ours" not in set(ok["impl"]):
        return pd.DataFrame(), ""
    ms = ok.pivot_table(index=["head_dim", "pass", "seq_len"], columns="impl", values="ms")
    tf = ok.pivot_table(index=["head_dim", "pass", "seq_len"], columns="impl", values="tflops")
    anchors = [a for a in KERNEL_ANCHORS if a in ms]
    lengths = sorted(ok["seq_len"].unique())
    span = (f"{lengths[0] // _K}K–{lengths[-1] // _K}K" if lengths[0] % _K == 0 and lengths[-1] % _K == 0
            else f"{lengths[0]}–{lengths[-1]}")

    def span_of(values, fmt) -> str:
        values = values.dropna()
        return "" if values.empty else f"{fmt(values.min())}–{fmt(values.max())}"

    rows = []
    present = set(ms.index.droplevel("seq_len"))
    for d in ok["head_dim"].drop_duplicates():
        for p in (p for p in KERNEL_PASSES if p in set(passes)):
            if (d, p) not in present:
                continue
            cell = ms.loc[(d, p)]
            row = {"d": str(d), "pass": p, "ours TFLOP/s": span_of(tf.loc[(d, p), "ours"], lambda x: f"{x:.0f}")}
            row.update({f"vs {a}": span_of(cell[a] / cell["ours"], lambda x: f"{x:.2f}×") for a in anchors})
            rows.append(row)
    return pd.DataFrame(rows), span


def kernel_sections(kernels: pd.DataFrame, passes: Iterable[str] = KERNEL_PASSES) -> list[Section]:
    """The dense kernels' headline for display (`lra table kernels`)."""
    table, span = kernel_ranges(kernels, passes)
    if table.empty:
        return [Section("Kernels", table, ["No dense `ours` cells in the --kernels CSVs."])]
    notes = [f"Ranges over N = {span}: ours' TFLOP/s and ours' speed-up over each anchor (anchor ms ÷ ours ms, "
             "same run, same inputs; cells where both ran). The benchmark's report (its `.md`) has every cell."]
    return [Section(f"Kernels: ranges over N = {span}", table, notes)]
