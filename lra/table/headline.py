"""The headline of the table of record: one row per attention, and for each task with runs its test
accuracy over seeds (the paper's number in brackets), its training speed-up over the Transformer and
its peak memory -- the compact view the README shows. Every figure is a cell of the table of record
(`lra.table.record`), so both always agree; the record keeps the detail (setting, data, speed source,
time to best, notes).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from lra import published as pub
from lra.table.format import NO_VALUE, format_published, format_ratio, format_seq_len, is_missing
from lra.table.load import normalise_records
from lra.table.render import Section
from lra.table.scope import scope_line

# the tidy frame (`--format csv`): one row per task x attention of the tasks with runs
_UNFINISHED = ("oom", "diverged", "failed", "interrupted", "running")  # run counts by status, shown without a result
HEADLINE_COLUMNS = ["task", "seq_len", "attention", "label", "ran", "n", "mean", "std", "at_chance", *_UNFINISHED,
                    "published", "published_failed", "speedup", "peak_mem_gb"]


def headline_summary(record: pd.DataFrame) -> pd.DataFrame:
    """The rows of the table of record (`record_summary`) of the tasks with runs (an attention not run
    on such a task keeps its row: the paper's number, no result), reduced to the headline's columns.
    ValueError when a task and attention hold more than one row (runs of several presets, lengths,
    variants or data sets): the headline has one cell per task and attention, so narrow the runs with
    the filters (--presets, --seq-lens, --tasks) or read the full table of record."""
    ran = record[record["ran"].astype(bool)] if not record.empty else record
    if ran.empty:
        return pd.DataFrame(columns=HEADLINE_COLUMNS)
    # the tasks with runs, with their attentions that have none (the paper's number, no result)
    cells = record[record["task"].isin(set(ran["task"]))]
    rows = cells.groupby(["task", "attention"], sort=False).size()
    several = rows[rows > 1]
    if len(several):
        (task, attention), count = next(iter(several.items()))
        rows = cells[(cells["task"] == task) & (cells["attention"] == attention)]
        apart = "; ".join(_rows_apart(rows))
        raise ValueError(f"the headline has one cell per task and attention, but {task}/{attention} has {count} "
                         f"rows in the table of record ({apart}): narrow the runs with --presets / --seq-lens / "
                         "--tasks (a variant: --runs-dir a folder without the others' runs), or read "
                         "`lra table record`")
    return cells[HEADLINE_COLUMNS].reset_index(drop=True)


def _rows_apart(rows: pd.DataFrame) -> list[str]:
    """What sets each of these rows of the table of record apart: those of preset, length, variant and
    data that differ among them."""
    parts = pd.DataFrame({
        "preset": [f"preset {p or '?'}" for p in rows["preset"]],
        "seq_len": [f"N={format_seq_len(n)}" if not is_missing(n) else "" for n in rows["seq_len"]],
        "variant": list(rows["variant"].fillna("")),
        "data": [f"data {d}" if d else "" for d in rows["data_id"]]})
    differing = [c for c in parts.columns if parts[c].nunique() > 1]
    return [", ".join(p for p in row if p) or "?" for row in parts[differing].itertuples(index=False)]


def _accuracy(row, typical_n: int, compare: bool) -> str:
    if row["n"] == 0:  # no completed seed: why, as the table of record says it
        status = next((st for st in _UNFINISHED if row["ran"] and row[st]), None)
        text = NO_VALUE if status is None else "OOM" if status == "oom" else status
    else:
        text = f"{row['mean']:.1f}" + (f" ± {row['std']:.1f}" if row["n"] > 1 else "")
        if row["n"] != typical_n:
            text += f", n = {row['n']}"
        if row["at_chance"] == row["n"]:
            text += ", at chance"
    if compare:
        paper = "fail" if row["published_failed"] else (
            format_published(row["published"]) if np.isfinite(row["published"]) else NO_VALUE)
        text += f" ({paper})"
    return text


def headline_sections(summary: pd.DataFrame, record: pd.DataFrame, records: pd.DataFrame | None = None,
                      baseline: str = "softmax") -> list[Section]:
    """The headline for display: attentions down, for each task its accuracy, speed-up and peak GB.
    `record`: the table of record it was taken from; `records`: the run records (the scope line)."""
    if summary.empty:
        return [Section("LRA headline", pd.DataFrame(), ["No completed or running cells: nothing to show."])]
    compare = bool(record.loc[record["ran"].astype(bool), "paper_compared"].any())
    typical_n = int(summary.loc[summary["n"] > 0, "n"].mode().max()) if (summary["n"] > 0).any() else 0
    tasks = sorted(summary["task"].unique(), key=pub.task_sort_key)
    attentions = sorted(summary["attention"].unique(), key=pub.attention_sort_key)
    cells = summary.set_index(["task", "attention"])
    base = pub.attention_label(baseline)
    columns: dict[str, list[str]] = {"Attention": [pub.attention_label(a) for a in attentions]}
    for task in tasks:
        lengths = summary.loc[summary["task"] == task, "seq_len"].dropna().unique()
        name = pub.task_label(task) + (f" ({format_seq_len(lengths[0])})" if len(lengths) == 1 else "")
        got = [cells.loc[(task, a)] if (task, a) in cells.index else None for a in attentions]
        columns[f"{name} %"] = [NO_VALUE if r is None else _accuracy(r, typical_n, compare) for r in got]
        columns[f"{name} speed-up"] = [NO_VALUE if r is None else format_ratio(r["speedup"]) for r in got]
        columns[f"{name} GB"] = [NO_VALUE if r is None or is_missing(r["peak_mem_gb"])
                                       or not np.isfinite(r["peak_mem_gb"]) else f"{r['peak_mem_gb']:.2f}"
                                       for r in got]
    notes = [f"% = test accuracy of the best-validation checkpoint, mean ± sample std over n = {typical_n} "
             "seeds unless the cell says otherwise"
             + ("; the FlashAttention paper's number in brackets (fail = at chance there)" if compare else "")
             + f". Speed-up = training throughput over {base} (`{baseline}`; solo timings only). GB = peak GPU "
             "memory (1e9 bytes). Each figure is a cell of the table of record (`lra table record`), which says "
             "where each comes from and where the setting departs from the paper's."]
    unrun = record.loc[~record["ran"].astype(bool), "task"].unique() if not record.empty else []
    unrun = [pub.task_label(t) for t in sorted(set(unrun) - set(tasks), key=pub.task_sort_key)]
    if unrun:
        notes.append("Not run here: " + ", ".join(unrun) + " (the table of record lists the paper's numbers).")
    subtitle = scope_line(normalise_records(records)) if records is not None and not records.empty else ""
    return [Section("LRA headline", pd.DataFrame(columns), notes, subtitle)]
