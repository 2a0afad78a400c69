"""Grouping runs into cells: one run per seed, statistics over seeds, the status of a cell.

A *cell* is the set of runs that differ only by seed: same attention, variant, preset, task, length
and data (`CELL`). Runs on different data are never pooled.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from lra.table.format import format_seq_len, int_or, is_missing

CELL = ["attention", "variant", "preset", "task", "seq_len", "data_id"]
# Statuses of runs that did not complete, worst first.
PROBLEM_STATUSES = ("oom", "diverged", "failed", "interrupted", "running")


def dedupe_seeds(df: pd.DataFrame, cell: list[str] = CELL) -> tuple[pd.DataFrame, dict]:
    """Keep one completed run per (cell, seed) — the newest; reruns of a seed would bias mean and std.
    Returns the frame and {cell key: number of runs dropped}."""
    completed = df[(df["status"] == "completed") & df["seed"].notna()]
    ordered = completed.sort_values("created", na_position="first", kind="stable")
    dropped = ordered[ordered.duplicated([*cell, "seed"], keep="last")]
    counts = dropped.groupby(cell, dropna=False, sort=False).size().to_dict() if not dropped.empty else {}
    return df.drop(index=dropped.index), counts


def seed_stats(values: pd.Series) -> tuple[int, float, float]:
    """(n, mean, sample std) of per-seed values; one seed has no std (ddof=1)."""
    values = values.dropna()
    n = len(values)
    return n, values.mean() if n else np.nan, values.std(ddof=1) if n > 1 else np.nan


def seed_values(seeds: pd.Series) -> list:
    return sorted(int(s) if float(s).is_integer() else s for s in seeds.dropna())


def status_counts(statuses: pd.Series) -> dict[str, int]:
    """{status: runs} for the statuses of runs that did not complete (zero counts left out)."""
    return {s: int((statuses == s).sum()) for s in PROBLEM_STATUSES if (statuses == s).any()}


def worst_status(statuses: pd.Series) -> str:
    for status in PROBLEM_STATUSES:
        if (statuses == status).any():
            return status
    return str(statuses.iloc[0])


def first_error(group: pd.DataFrame) -> str:
    errors = [str(e).strip().splitlines()[0] for e in group["error"] if not is_missing(e) and str(e).strip()]
    return errors[0][:160] if errors else ""


def not_counted_notes(df: pd.DataFrame) -> list[str]:
    """One note per run (normalised records) that did not complete, with its path and first error line."""
    bad = df[df["status"] != "completed"]
    notes = []
    for _, r in bad.sort_values(["task", "attention", "seq_len", "seed"], na_position="last").iterrows():
        error = str(r["error"]).strip() if not is_missing(r["error"]) else ""
        error = f": {error.splitlines()[0][:160]}" if error else ""
        seed = "" if is_missing(r["seed"]) else f" seed {int_or(r['seed'], 0)}"
        notes.append(f"Not counted — {r['status'].upper() if r['status'] == 'oom' else r['status']}: {r['task']} / "
                     f"{r['attention']} N={format_seq_len(r['seq_len'])}{seed} ({r['path']}){error}")
    return notes
