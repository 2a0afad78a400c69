"""The accuracy table in the papers' layout: one row per attention, one column per task, with each
paper's numbers and our Δ to them below ours, plus the five-task average and the speed-up. The papers'
numbers and Δ appear only for cells of runs in the papers' setting (lra.table.setting.paper_comparable).

`accuracy_summary` is the tidy numeric frame (one row per cell; `--format csv`), `accuracy_sections`
the display table. Accuracies in run records are fractions; tables show percentages.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lra import published as pub
from lra.table.aggregate import CELL, dedupe_seeds, not_counted_notes, seed_stats, seed_values
from lra.table.format import NO_VALUE, format_published, format_seq_len, int_or
from lra.table.load import normalise_records
from lra.table.render import Section
from lra.table.scope import scope_line
from lra.table.setting import paper_comparable

SUMMARY_COLUMNS = ["attention", "label", "variant", "preset", "task", "column", "seq_len", "data_id", "n", "mean",
                   "std", "seeds", "val_mean", "completed", "failed", "oom", "running", "duplicates",
                   "paper_compared"]
_COUNTS = ("completed", "failed", "oom", "running", "duplicates")


def accuracy_summary(records: pd.DataFrame, published: pd.DataFrame | None = None,
                     baseline: str = "softmax") -> pd.DataFrame:
    """Tidy accuracy table: one row per cell (attention, variant, preset, task, seq_len, data), plus
    `avg` and `speedup` rows per (attention, variant, preset).

    Columns: SUMMARY_COLUMNS (mean / std: test accuracy %; `paper_compared`: the cell's runs, or every
    cell an `avg` / `speedup` row summarises, are in the papers' setting), then per paper
    `published_<id>`, `failed_<id>`, `delta_<id>` (ours − published), all three only where
    `paper_compared`. For `avg` rows `n` is the number of tasks averaged; for `speedup` rows `mean` is
    the geometric-mean training-throughput ratio over `baseline` across tasks, from timed runs (alone
    on their device, not through the Triton interpreter).
    """
    published = published if published is not None else pd.DataFrame(columns=["id", "source", "task"])
    df = normalise_records(records)
    papers = pub.sources(published)
    columns = list(SUMMARY_COLUMNS)
    for paper_id, _ in papers:
        columns += [f"published_{paper_id}", f"failed_{paper_id}", f"delta_{paper_id}"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    df, dup_counts = dedupe_seeds(df)
    rows = []
    for key, group in df.groupby(CELL, dropna=False, sort=False):
        done = group[(group["status"] == "completed") & group["test_acc"].notna()]
        n, mean, std = seed_stats(done["test_acc"] * 100.0)
        timed = done[done["timed"]]
        rows.append(dict(zip(CELL, key), n=n, mean=mean, std=std, seeds=" ".join(map(str, seed_values(done["seed"]))),
                         val_mean=done["best_val_acc"].mean() * 100.0 if len(done) else np.nan,
                         completed=int((group["status"] == "completed").sum()),
                         failed=int((group["status"] == "failed").sum()), oom=int((group["status"] == "oom").sum()),
                         running=int((group["status"] == "running").sum()), duplicates=int(dup_counts.get(key, 0)),
                         paper_compared=paper_comparable(group),
                         tokens_per_s=timed["train_tokens_per_s"].mean() if len(timed) else np.nan))
    cells = pd.DataFrame(rows)
    cells["seq_len"] = cells["seq_len"].astype("Int64")
    extra = _average_rows(cells) + _speedup_rows(cells, baseline)
    out = pd.concat([cells, pd.DataFrame(extra)], ignore_index=True) if extra else cells
    out["label"] = out["attention"].map(pub.attention_label)
    out["column"] = out["task"].map(lambda t: {"avg": "Avg", "speedup": "Speedup"}.get(t, pub.task_label(t)))
    out["paper_compared"] = out["paper_compared"].astype(bool)
    for paper_id, _ in papers:
        values = [pub.lookup(published, paper_id, a, t) if compared else (np.nan, False)
                  for a, t, compared in zip(out["attention"], out["task"], out["paper_compared"])]
        out[f"published_{paper_id}"] = [v for v, _ in values]
        out[f"failed_{paper_id}"] = [f for _, f in values]
        delta = out["mean"] - out[f"published_{paper_id}"]
        # Δ of a partial average or of a speedup is not meaningful.
        partial_avg = (out["task"] == "avg") & (out["n"] < len(pub.AVERAGE_TASKS))
        out[f"delta_{paper_id}"] = delta.where(~partial_avg & (out["task"] != "speedup"))
    for column in ("n", *_COUNTS):
        out[column] = out[column].fillna(0).astype(int)
    out = out.reindex(columns=columns)
    order = out.apply(lambda r: (pub.attention_sort_key(r["attention"]), r["variant"], r["preset"],
                                 column_sort_key(r["task"]), int_or(r["seq_len"], -1), str(r["data_id"])), axis=1)
    return out.loc[order.sort_values().index].reset_index(drop=True)


def column_sort_key(task: str) -> tuple:
    return {"avg": (90, ""), "speedup": (91, "")}.get(task, pub.task_sort_key(task))


def _summary_row(key, task: str, n: int, mean: float, compared: bool) -> dict:
    return dict(zip(["attention", "variant", "preset"], key), task=task, seq_len=pd.NA, data_id="", n=n,
                mean=mean, std=np.nan, seeds="", paper_compared=compared, **{c: 0 for c in _COUNTS})


def _average_rows(cells: pd.DataFrame) -> list[dict]:
    """Mean of the per-task means over the papers' five tasks, per (attention, variant, preset)."""
    rows = []
    for key, group in cells.groupby(["attention", "variant", "preset"], dropna=False, sort=False):
        present = group[group["task"].isin(pub.AVERAGE_TASKS) & (group["n"] > 0)]
        if present.empty or present["task"].duplicated().any():
            continue  # no task, or a task at two lengths or on two data sets: which one to average is ambiguous
        rows.append(_summary_row(key, "avg", len(present), present["mean"].mean(),
                                 bool(present["paper_compared"].all())))
    return rows


def _speedup_rows(cells: pd.DataFrame, baseline: str) -> list[dict]:
    """Geometric mean over tasks of training throughput relative to `baseline` on the same task and length."""
    base = cells[(cells["attention"] == baseline) & cells["tokens_per_s"].notna()]
    if base.empty:
        return []
    base = base.groupby(["preset", "task", "seq_len"], dropna=False)["tokens_per_s"].mean()
    rows = []
    for key, group in cells.groupby(["attention", "variant", "preset"], dropna=False, sort=False):
        ratios, compared = [], []
        for _, cell in group.iterrows():
            anchor = base.get((cell["preset"], cell["task"], cell["seq_len"]))
            if anchor is not None and np.isfinite(cell["tokens_per_s"]) and anchor > 0:
                ratios.append(cell["tokens_per_s"] / anchor)
                compared.append(cell["paper_compared"])
        if ratios:
            rows.append(_summary_row(key, "speedup", len(ratios), float(np.exp(np.mean(np.log(ratios)))),
                                     all(compared)))
    return rows


# --------------------------------------------------------------------------------------------- display
def _row_labels(summary: pd.DataFrame) -> pd.Series:
    """'FlashAttention', plus the variant / preset / data only where the summary has more than one
    (data: more than one data set within a task of that attention)."""
    many_presets = summary["preset"].nunique() > 1
    labels = []
    for _, row in summary.iterrows():
        same = summary[summary["attention"] == row["attention"]]
        extras = []
        if same["variant"].nunique() > 1 and row["variant"]:
            extras.append(row["variant"])
        if many_presets:
            extras.append(f"preset {row['preset'] or '?'}")
        # each task reads its own data: the data id tells rows apart only where one task ran on two
        data_per_task = same[~same["task"].isin(["avg", "speedup"])].groupby("task")["data_id"].nunique()
        if (data_per_task > 1).any() and row["data_id"]:
            extras.append(f"data {row['data_id']}")
        labels.append(f"{row['label']} ({'; '.join(extras)})" if extras else row["label"])
    return pd.Series(labels, index=summary.index)


def _column_labels(summary: pd.DataFrame) -> pd.Series:
    """Paper column name, with the sequence length where a task was run at more than one."""
    tasks = summary[~summary["task"].isin(["avg", "speedup"])]
    multi = tasks.groupby("task")["seq_len"].nunique()
    return summary.apply(
        lambda r: f"{r['column']} ({format_seq_len(r['seq_len'])})" if multi.get(r["task"], 0) > 1 else r["column"],
        axis=1)


def _ours_cell(row) -> str:
    if row["task"] == "speedup":
        return f"{row['mean']:.2f}×"
    if row["task"] == "avg":
        total = len(pub.AVERAGE_TASKS)
        return f"{row['mean']:.1f}" + ("" if row["n"] == total else f" ({row['n']}/{total} tasks)")
    issues = [f"{row[k]} {k}" for k in ("oom", "failed", "running") if row[k]]
    if row["n"] == 0:
        for status, text in (("oom", "OOM"), ("failed", "failed"), ("running", "running")):
            if row[status]:
                return text
        return NO_VALUE
    text = f"{row['mean']:.1f}" + (f" ± {row['std']:.1f}" if row["n"] > 1 else "") + f" (n={row['n']})"
    return text + (" [" + ", ".join(issues) + "]" if issues else "")


def accuracy_sections(summary: pd.DataFrame, published: pd.DataFrame | None = None,
                      records: pd.DataFrame | None = None) -> list[Section]:
    """Display table: per attention a row of ours, then each paper's numbers and our Δ to them."""
    if summary.empty:
        return [Section("Accuracy", pd.DataFrame(), ["No run records match (run `lra train` or `lra sweep` first, "
                                                     "or point --runs-dir at the folder holding them)."])]
    published = published if published is not None else pd.DataFrame(columns=["id", "source"])
    papers = pub.sources(published)
    summary = summary.copy()
    summary["row"] = _row_labels(summary)
    summary["col"] = _column_labels(summary)
    column_order = list(dict.fromkeys(summary["col"]))  # summary is already in display order
    column_order = [c for c in column_order if c not in ("Avg", "Speedup")] + \
        [c for c in ("Avg", "Speedup") if c in column_order or _paper_has(summary, papers, c)]
    table_rows = []
    for row_label, group in summary.groupby("row", sort=False):
        cells = {c: NO_VALUE for c in column_order}
        for _, r in group.iterrows():
            cells[r["col"]] = _ours_cell(r)
        table_rows.append({"Attention": row_label, "Numbers": "ours", **cells})
        table_rows += _paper_rows(summary, group, published, papers, column_order)
    compared = bool(summary["paper_compared"].any())
    notes = [
        "Test accuracy (%): mean ± sample std over seeds (n = completed seeds). "
        f"Avg = mean over {', '.join(pub.task_label(t) for t in pub.AVERAGE_TASKS)}, as in both papers. "
        + ("Δ = ours − published; the papers' numbers only beside runs of the `paper` preset on a GPU." if compared
           else "No papers' numbers: no run here used the `paper` preset on a GPU, the papers' setting."),
    ]
    if "Speedup" in column_order:
        notes.append("Speedup = training throughput over the Transformer (`softmax`) on the same task and length, "
                     "geometric mean over tasks; runs that shared a GPU or ran our kernels through the Triton "
                     "interpreter are left out.")
    for paper_id, paper_label in papers if compared else []:
        notes.append(f"{paper_label}: {pub.citation_text(published, paper_id)}")
    subtitle = ""
    if records is not None and not records.empty:
        notes += not_counted_notes(normalise_records(records))
        subtitle = scope_line(normalise_records(records))
    dups = int(summary["duplicates"].sum())
    if dups:
        notes.append(f"{dups} repeated run(s) of an already-counted seed ignored (the newest run of each seed counts).")
    return [Section("Accuracy (test %)", pd.DataFrame(table_rows), notes, subtitle)]


def _paper_rows(summary, group, published, papers, column_order) -> list[dict]:
    """Each paper's numbers for the attention of `group`, and our Δ to them (rows left out when empty,
    or when no cell of the group is in the papers' setting)."""
    attention = group["attention"].iloc[0]
    rows = []
    if not group["paper_compared"].any():
        return rows
    for paper_id, paper_label in papers:
        pub_cells, delta_cells, any_value = {}, {}, False
        for column in column_order:
            task = _task_of(summary, column)
            value, failed = pub.lookup(published, paper_id, attention, task) if task else (math.nan, False)
            if failed:
                pub_cells[column], any_value = "fail", True
            elif np.isfinite(value):
                pub_cells[column] = f"{value:.1f}×" if task == "speedup" else format_published(value)
                any_value = True
            else:
                pub_cells[column] = NO_VALUE
            ours = group[group["col"] == column]
            delta = ours[f"delta_{paper_id}"].iloc[0] if len(ours) and f"delta_{paper_id}" in ours else math.nan
            delta_cells[column] = f"{delta:+.1f}" if np.isfinite(delta) else NO_VALUE
        if any_value:
            rows.append({"Attention": "", "Numbers": paper_label, **pub_cells})
            if any(v != NO_VALUE for v in delta_cells.values()):
                rows.append({"Attention": "", "Numbers": f"Δ vs {paper_label}", **delta_cells})
    return rows


def _paper_has(summary: pd.DataFrame, papers, column: str) -> bool:
    """Whether the papers' rows fill `column` although our runs do not (the papers' five-task average)."""
    compared = summary[summary["paper_compared"]]
    return column == "Avg" and any(compared["task"].isin(pub.AVERAGE_TASKS)) and bool(papers)


def _task_of(summary: pd.DataFrame, column: str) -> str | None:
    if column == "Avg":
        return "avg"
    if column == "Speedup":
        return "speedup"
    hit = summary[summary["col"] == column]
    return None if hit.empty else hit["task"].iloc[0]
