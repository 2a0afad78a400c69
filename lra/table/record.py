"""The LRA table of record: one row per task × attention (× variant, preset, length, data), with our
test accuracy over seeds beside the FlashAttention paper's number, the training speed relative to the
materialised softmax Transformer, the time to the best validation accuracy and the peak memory.

Rules the rows follow:
- runs on different data (`data_id`) are never pooled: they are separate rows;
- in a table that compares with the paper (it holds runs of the `paper` preset on a GPU), every task
  the paper reports appears, also without runs: its row carries the paper's number and says why it
  was not run here;
- a run whose best validation accuracy stays within 2 points of chance is marked "at chance" and
  still counted, never dropped;
- the paper's number and our Δ to it only for runs of the `paper` preset on a GPU, and the paper
  columns only in a table that holds such runs; the setting column says where a row departs from
  the paper's setting (lra.table.setting);
- speed figures only from runs that had the GPU to themselves and did not run our kernels through
  Triton's CPU interpreter, or from a `lra bench models` CSV (`--speed`) row of the same attention,
  length and batch size; the row names the source.

`record_summary` is the tidy frame (`--format csv`), `record_sections` the display table.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from lra import published as pub
from lra.table.aggregate import CELL, dedupe_seeds, not_counted_notes, seed_stats, seed_values, status_counts
from lra.table.bench import load_bench_frame, mode_text
from lra.table.format import (NO_VALUE, format_duration, format_published, format_ratio, format_seq_len, int_or,
                              is_missing)
from lra.table.load import CHANCE_MARGIN_PTS, UNKNOWN_DATA_ID, data_label, normalise_records
from lra.table.render import Section
from lra.table.scope import scope_line
from lra.table.setting import deviations, paper_comparable

# The paper the table of record compares with: FlashAttention (Dao et al. 2022), Table 3 for the five
# LRA tasks and Table 6 for Path-X / Path-256 (results/published/flashattention_table{3,6}.csv).
RECORD_PAPER = "fa"
# What a throughput ratio holds equal between an attention and the baseline.
SPEED_KEY = ("task", "seq_len", "batch_size", "device", "precision", "compile", "model_key")

RECORD_COLUMNS = [
    "task", "attention", "label", "variant", "preset", "seq_len", "data_id", "data_source", "data_description",
    "ran", "setting", "paper_setting", "paper_compared", "n", "mean", "std", "seeds", "chance_pct", "at_chance",
    "completed", "failed", "oom", "diverged", "interrupted", "running", "duplicates", "published", "published_failed",
    "delta", "speedup", "step_ms", "speed_source", "best_step", "time_to_best_s", "time_to_best_estimated",
    "peak_mem_gb", "notes",
]


def record_summary(records: pd.DataFrame | None, published: pd.DataFrame | None = None, *,
                   baseline: str = "softmax", speed: pd.DataFrame | None = None,
                   tasks=None, attentions=None) -> pd.DataFrame:
    """The table of record as a tidy frame (RECORD_COLUMNS), one row per cell plus one per (task,
    attention) without runs. `speed`: `lra bench models` rows to take speed figures from; `tasks` /
    `attentions`: the rows wanted (default: every task run, and the paper's tasks where the table
    compares with the paper; every attention run).
    Accuracies are percentages; `speedup` is throughput over `baseline`."""
    published = published if published is not None else pd.DataFrame(columns=["id", "task", "model"])
    df = normalise_records(records)
    speed = load_bench_frame(speed) if speed is not None and not speed.empty else None
    rows = []
    if not df.empty:
        df, duplicates = dedupe_seeds(df)
        anchors = _run_anchors(df, baseline)
        for key, cell in df.groupby(CELL, dropna=False, sort=False):
            rows.append(_cell_row(dict(zip(CELL, key)), cell, int(duplicates.get(key, 0)), anchors, speed,
                                  baseline, published))
    ran = {(r["task"], r["attention"]) for r in rows}
    compare = any(r["paper_compared"] for r in rows)
    paper_tasks = set(pub.paper_tasks(published, RECORD_PAPER)) if compare else set()
    wanted_tasks = list(tasks) if tasks else sorted(paper_tasks | {r["task"] for r in rows}, key=pub.task_sort_key)
    wanted_attentions = list(dict.fromkeys([*(attentions or []), *sorted({r["attention"] for r in rows})]))
    for task in wanted_tasks:
        for attention in wanted_attentions:
            if (task, attention) not in ran:
                rows.append(_missing_row(task, attention, published if compare else None))
    out = pd.DataFrame(rows, columns=RECORD_COLUMNS)
    if out.empty:
        return out
    out["seq_len"] = out["seq_len"].astype("Int64")
    order = [(pub.task_sort_key(t), pub.attention_sort_key(a), v, p, int_or(n, -1), d) for t, a, v, p, n, d in
             zip(out["task"], out["attention"], out["variant"], out["preset"], out["seq_len"], out["data_id"])]
    return out.iloc[sorted(range(len(out)), key=order.__getitem__)].reset_index(drop=True)


# --------------------------------------------------------------------------------------------- cells
def _cell_row(key: dict, cell: pd.DataFrame, duplicates: int, anchors: dict, speed, baseline: str,
              published: pd.DataFrame) -> dict:
    done = cell[(cell["status"] == "completed") & cell["test_acc"].notna()]
    n, mean, std = seed_stats(done["test_acc"] * 100.0)
    counts = status_counts(cell["status"])
    comparable = paper_comparable(cell)
    value, failed = pub.lookup(published, RECORD_PAPER, key["attention"], key["task"])
    if not comparable:
        value, failed = np.nan, False
    speedup, step_ms, source, speed_notes = _speed(cell, anchors, speed, baseline)
    timed = done[done["timed"]]
    best_step = done["best_step"].mean() if n else np.nan
    time_to_best = timed["time_to_best_s"].mean() if len(timed) else np.nan
    # no timed run (they shared a GPU): the best step at the solo benchmark's step time, validation left out
    estimated = bool(not np.isfinite(time_to_best) and source.startswith("bench") and np.isfinite(best_step)
                     and np.isfinite(step_ms))
    if estimated:
        time_to_best = best_step * step_ms / 1000.0
    at_chance = int(done["at_chance"].sum())
    notes = []
    if 0 < at_chance < n:
        notes.append(f"{at_chance} of {n} seeds at chance")
    notes += [f"{count} {status.upper() if status == 'oom' else status}" for status, count in counts.items()]
    if duplicates:
        notes.append(f"{duplicates} rerun(s) of a counted seed ignored")
    if not comparable:
        notes.append("no paper comparison: " + ("CPU run" if cell["on_cpu"].any() else f"preset {key['preset']}"))
    notes += speed_notes
    setting = deviations(cell)
    return dict(
        key, label=pub.attention_label(key["attention"]), data_source=_first(cell["data_source"]),
        data_description=_first(cell["data_description"]), ran=True, setting="; ".join(setting) or "paper",
        paper_setting=not setting, paper_compared=comparable, n=n, mean=mean, std=std,
        seeds=" ".join(map(str, seed_values(done["seed"]))),
        chance_pct=_first(cell["chance_pct"]), at_chance=at_chance,
        completed=int((cell["status"] == "completed").sum()),
        **{s: counts.get(s, 0) for s in ("failed", "oom", "diverged", "interrupted", "running")},
        duplicates=duplicates, published=value, published_failed=failed,
        delta=mean - value if comparable and n and np.isfinite(value) else np.nan,
        speedup=speedup, step_ms=step_ms, speed_source=source,
        best_step=best_step, time_to_best_s=time_to_best, time_to_best_estimated=estimated,
        peak_mem_gb=done["peak_mem_gb"].mean() if n else np.nan, notes="; ".join(notes))


def _first(values: pd.Series):
    values = values.dropna()
    return values.iloc[0] if len(values) else np.nan


def _missing_row(task: str, attention: str, published: pd.DataFrame | None) -> dict:
    """The row of a (task, attention) without runs; with the paper's number unless `published` is None
    (a table that does not compare with the paper)."""
    from tasks.registry import TASKS

    value, failed = (np.nan, False) if published is None else pub.lookup(published, RECORD_PAPER, attention, task)
    offline = task in TASKS and "generated" in TASKS[task].sources
    reason = "not run here" if offline or task not in TASKS else "not run here: data not available offline"
    row = {c: np.nan for c in RECORD_COLUMNS}
    row.update(task=task, attention=attention, label=pub.attention_label(attention), variant="", preset="",
               seq_len=pd.NA, data_id="", data_source="", data_description="", ran=False, setting="",
               paper_setting=False, paper_compared=published is not None, n=0, seeds="", at_chance=0,
               published=value, published_failed=failed,
               speed_source="", time_to_best_estimated=False, notes=reason,
               chance_pct=100.0 / TASKS[task].num_classes if task in TASKS else np.nan,
               **{c: 0 for c in ("completed", "failed", "oom", "diverged", "interrupted", "running", "duplicates")})
    return row


# --------------------------------------------------------------------------------------------- speed
def _speed_key(run: pd.Series) -> tuple:
    return tuple("" if is_missing(run[c]) else run[c] for c in SPEED_KEY)


def _timed_speed(cell: pd.DataFrame) -> tuple[tuple | None, pd.DataFrame]:
    """The completed timed runs (load.py) of a cell measured under its most common speed key, and that key."""
    timed = cell[(cell["status"] == "completed") & cell["timed"] & cell["train_tokens_per_s"].notna()]
    if timed.empty:
        return None, timed
    keys = [_speed_key(r) for _, r in timed.iterrows()]
    key = Counter(keys).most_common(1)[0][0]
    return key, timed[[k == key for k in keys]]


def _run_anchors(df: pd.DataFrame, baseline: str) -> dict:
    """{speed key: mean tokens/s of the baseline's timed runs}."""
    anchors: dict = {}
    base = df[df["attention"] == baseline]
    for _, cell in base.groupby(CELL, dropna=False, sort=False):
        key, timed = _timed_speed(cell)
        if key is not None:
            anchors.setdefault(key, []).extend(timed["train_tokens_per_s"].tolist())
    return {key: float(np.mean(values)) for key, values in anchors.items()}


def _speed(cell: pd.DataFrame, anchors: dict, speed, baseline: str) -> tuple[float, float, str, list[str]]:
    """(speed-up over baseline, step ms, source, notes) of one cell: a matching `lra bench models` row
    first, else the cell's timed runs; never the timings of runs that shared a GPU or ran through the
    interpreter."""
    done = cell[cell["status"] == "completed"]
    shared = done[~done["solo"]]
    interpreted = done[done["interpreted"]]
    notes = []
    if len(shared):
        per_gpu = "/".join(str(k) for k in sorted(set(shared["runs_per_gpu"])))
        notes.append(f"timings of {len(shared)} run(s) sharing a GPU ({per_gpu} runs per GPU) left out")
    if len(interpreted):
        notes.append(f"timings of {len(interpreted)} run(s) through the Triton interpreter left out "
                     "(not a speed measurement)")
    if speed is not None:
        hit = _bench_speed(cell, speed, baseline)
        if hit is not None:
            return (*hit, notes)
    key, timed = _timed_speed(cell)
    if key is None:
        source = "interpreter: not shown" if len(interpreted) else "shared GPU: not shown" if len(shared) else ""
        return np.nan, np.nan, source, notes
    anchor = anchors.get(key)
    speedup = timed["train_tokens_per_s"].mean() / anchor if anchor else np.nan
    known = "" if timed["sharing_known"].all() else ", sharing not recorded"
    return speedup, timed["step_time_ms"].mean(), f"runs (n={len(timed)}{known})", notes


def _bench_speed(cell: pd.DataFrame, speed: pd.DataFrame, baseline: str) -> tuple[float, float, str] | None:
    """The benchmark row of the cell's attention at its length and batch size (the same eager/compiled
    mode where the runs recorded one), its ratio to the baseline's row of the same file, regime and
    mode, and its source text; None without a match."""
    attention, seq_len = cell["attention"].iloc[0], cell["seq_len"].iloc[0]
    batches = set(cell["batch_size"].dropna().astype(int))
    if is_missing(seq_len) or len(batches) != 1:
        return None
    ok = speed[(speed["status"] == "ok") & (speed["seq_len"] == seq_len) & (speed["batch_size"] == batches.pop())]
    rows = ok[ok["attention"] == attention]
    modes = set(cell["compile"].dropna().map(bool))
    if len(modes) == 1:
        rows = rows[rows["compile"] == modes.pop()]
    if rows.empty:
        return None
    row = rows.iloc[-1]
    same = ["file", "regime", "compile", "compile_mode"]
    anchor = ok[(ok["attention"] == baseline) & (ok[same] == row[same]).all(axis=1)]
    ratio = anchor["ms_per_step"].iloc[-1] / row["ms_per_step"] if len(anchor) else np.nan
    source = (f"bench {Path(str(row['file'])).name} ({row['regime']} batch {int(row['batch_size'])}, "
              f"{mode_text(row['compile'], row['compile_mode'])})")
    return ratio, float(row["ms_per_step"]), source


# --------------------------------------------------------------------------------------------- display
def _accuracy_cell(row) -> str:
    if not row["ran"]:
        return NO_VALUE
    if row["n"] == 0:
        for status in ("oom", "diverged", "failed", "interrupted", "running"):
            if row[status]:
                return "OOM" if status == "oom" else status
        return NO_VALUE
    text = f"{row['mean']:.1f}" + (f" ± {row['std']:.1f}" if row["n"] > 1 else "")
    return text + (" (at chance)" if row["at_chance"] == row["n"] else "")


def _paper_cell(row) -> str:
    if row["published_failed"]:
        return "fail"
    return format_published(row["published"]) if np.isfinite(row["published"]) else NO_VALUE


def _task_labels(summary: pd.DataFrame) -> pd.Series:
    lengths = summary[summary["ran"]].groupby("task")["seq_len"].nunique()
    return pd.Series([pub.task_label(t) + (f" ({format_seq_len(n)})" if lengths.get(t, 0) > 1 else "")
                      for t, n in zip(summary["task"], summary["seq_len"])], index=summary.index)


def _value(fmt):
    return lambda v: fmt(v) if not is_missing(v) and np.isfinite(v) else NO_VALUE


def record_sections(summary: pd.DataFrame, published: pd.DataFrame | None = None, records=None,
                    baseline: str = "softmax") -> list[Section]:
    """The table of record for display, with notes on what its columns mean and where they come from."""
    if summary.empty:
        return [Section("LRA table of record", pd.DataFrame(), ["No run records match."])]
    published = published if published is not None else pd.DataFrame(columns=["id", "citation"])
    base = pub.attention_label(baseline)
    ran = summary["ran"]
    compare = bool(summary["paper_compared"].any())
    table = pd.DataFrame({
        "Task": _task_labels(summary),
        # runs that differ in a setting (a variant: `optim.lr=0.001`) are rows of their own; name it
        "Attention": [f"{label} ({variant})" if variant else label
                      for label, variant in zip(summary["label"], summary["variant"].fillna(""))],
        "Data": [data_label(s, i) if r else NO_VALUE for s, i, r in
                 zip(summary["data_source"], summary["data_id"], ran)],
        "Setting": [s if r else NO_VALUE for s, r in zip(summary["setting"], ran)],
        "Test acc. (%)": summary.apply(_accuracy_cell, axis=1),
        "n": summary["n"].astype(int).astype(str),
        **({"Paper (%)": summary.apply(_paper_cell, axis=1),
            "Δ": summary["delta"].map(_value(lambda v: f"{v:+.1f}"))} if compare else {}),
        f"Speed vs {base}": summary["speedup"].map(_value(format_ratio)),
        "Speed from": summary["speed_source"].fillna("").replace("", NO_VALUE),
        "Step (ms)": summary["step_ms"].map(_value(lambda v: f"{v:.1f}")),
        "Best at step": summary["best_step"].map(_value(lambda v: f"{v:,.0f}")),
        "Time to best": [("≈ " if estimated else "") + _value(format_duration)(t)
                         for t, estimated in zip(summary["time_to_best_s"], summary["time_to_best_estimated"])],
        "Peak GB": summary["peak_mem_gb"].map(_value(lambda v: f"{v:.2f}")),
        "Notes": summary["notes"].fillna(""),
    })
    subtitle = scope_line(normalise_records(records)) if records is not None and not records.empty else ""
    return [Section("LRA table of record", table, _notes(summary, published, records, base, baseline, compare),
                    subtitle)]


def _notes(summary, published, records, base: str, baseline: str, compare: bool) -> list[str]:
    chances = summary.dropna(subset=["chance_pct"]).drop_duplicates("task")
    notes = [
        "Test acc. = test accuracy (%) of the best-validation checkpoint: mean ± sample std over completed seeds "
        "(n; the newest run of each seed counts). At chance = best validation accuracy ≤ chance + "
        f"{CHANCE_MARGIN_PTS:g} points, chance = 1 / classes ("
        + ", ".join(f"{pub.task_label(t)} {c:g} %" for t, c in zip(chances["task"], chances["chance_pct"])) + ").",
        (f"Paper = {pub.citation_text(published, RECORD_PAPER) or 'the FlashAttention paper'} (fail = at chance "
         "there). Paper and Δ (ours − paper) only for runs of the `paper` preset on a GPU.") if compare else
        ("No paper columns: no run here used the `paper` preset on a GPU, the only setting compared with the "
         "FlashAttention paper."),
        "Setting = where the runs depart from the paper's: another preset, augmentation, generated instead of "
        "official data, a subset of the data, fewer or more optimizer steps than the preset's max_steps, a CPU run.",
        f"Speed vs {base} = training throughput over `{baseline}` (attention matrix materialised) at the same task, "
        "length, batch size, device, precision and compile mode. Speed from: runs = runs that had their device to "
        "themselves (no other run of ours beside them); bench = a `lra bench models` CSV row of the same "
        "attention, length and batch size (--speed). Timings of runs that shared a GPU or ran our Triton kernels "
        f"through the CPU interpreter are never shown; – = no such measurement of the attention or of `{baseline}`. "
        "Step = training step time.",
        "Best at step = optimizer step of the best validation accuracy; time to best = its wall-clock time "
        "(timed runs only, as for speed), or ≈ best step × the benchmark's step time where the runs shared a GPU "
        "and the speed comes from a benchmark (training steps only, validation left out); peak GB = peak GPU "
        "memory (1e9 bytes).",
    ]
    paper_speed = [(label, pub.lookup(published, RECORD_PAPER, attention, "speedup")[0]) for attention, label in
                   summary[["attention", "label"]].drop_duplicates("attention").itertuples(index=False)]
    paper_speed = [f"{label} {value:.1f}×" for label, value in paper_speed if np.isfinite(value)]
    if paper_speed and summary["paper_setting"].any():
        notes.append("The paper's training speed-ups over the Transformer (averaged over the five tasks, its "
                     "Table 3): " + ", ".join(paper_speed) + ".")
    described = summary[summary["ran"] & (summary["data_id"] != UNKNOWN_DATA_ID)].drop_duplicates("data_id")
    for _, row in described.iterrows():
        if row["data_description"]:
            notes.append(f"Data {row['data_id']}: {row['data_description']}")
    if records is not None and not records.empty:
        notes += not_counted_notes(normalise_records(records))
    return notes
