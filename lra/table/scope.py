"""What a set of runs is: the presets they used, the devices they ran on, and whether our Triton kernels
ran through Triton's CPU interpreter. One line of it heads every table and figure made from run
records, so that a table of CPU runs of a small preset never reads as a reproduction of the papers'
GPU setting.
"""
from __future__ import annotations

import pandas as pd

from lra import published as pub
from lra.table.format import is_missing
from lra.table.setting import PAPER_PRESET


def _counted(values: pd.Series, noun: str) -> str:
    """`smoke` for one value; `paper (12 runs), smoke (5 runs)` for several."""
    counts = values.value_counts(sort=False)
    if len(counts) == 1:
        return f"{noun} {counts.index[0]}"
    return f"{noun}s " + ", ".join(f"{value} ({count} run{'s' if count > 1 else ''})"
                                   for value, count in counts.items())


def _kernels(df: pd.DataFrame) -> str:
    from lra.attention import uses_kernels

    interpreted = df[df["interpreted"]]
    if len(interpreted):
        labels = ", ".join(dict.fromkeys(map(pub.attention_label, interpreted["attention"])))
        return (f"Triton kernels ({labels}) through Triton's CPU interpreter: correct results, "
                "timings not a speed measurement")
    if df["attention"].map(uses_kernels).any():
        return "Triton kernels compiled for the GPU"
    return "no run used our Triton kernels"


def _comparison(df: pd.DataFrame) -> str:
    paper = (df["preset"] == PAPER_PRESET) & ~df["on_cpu"]
    if paper.all():
        return "the papers' setting (preset paper on a GPU): paper numbers shown"
    if paper.any():
        return "paper numbers only beside runs of preset paper on a GPU"
    return "not the papers' setting (preset paper on a GPU): no paper numbers"


def scope_line(df: pd.DataFrame) -> str:
    """`Runs: preset smoke; device cpu (x86_64); ...` for normalised run records (lra.table.load);
    "" without records."""
    if df is None or df.empty:
        return ""
    presets = df["preset"].map(lambda p: p or "not recorded")
    devices = df["device"].map(lambda d: "not recorded" if is_missing(d) or not str(d).strip() else str(d))
    parts = [_counted(presets, "preset"), _counted(devices, "device"), _kernels(df), _comparison(df)]
    return "Runs: " + "; ".join(parts) + "."
