"""Accuracy and efficiency tables from run records and model-benchmark CSVs (pandas).

Two layers:
- *summaries* (`accuracy_summary`, `efficiency_summary`) are tidy numeric frames, one row per cell, which
  `--format csv` writes as they are;
- *sections* (`accuracy_sections`, `efficiency_sections`) are the display tables (strings, `OOM`,
  `37.6 ± 0.4 (n=3)`) with notes, which `render` turns into Markdown or LaTeX.

Accuracies in run records are fractions; tables show percentages. Standard deviations are sample
standard deviations over seeds (ddof=1), so one seed has none.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from lra import published as pub
from lra.config import identity_of

FORMATS = ("markdown", "csv", "latex")
NO_VALUE = "–"

# Columns the tables read from run records (missing ones are added as empty).
RECORD_COLUMNS = ("run_id", "task", "attention", "seq_len", "seed", "preset", "status", "error", "test_acc",
                  "best_val_acc", "train_tokens_per_s", "train_samples_per_s", "step_time_ms", "peak_mem_gb",
                  "wall_time_s", "time_to_best_s", "created", "path")
# Columns of `lra bench models` CSVs (docs/interfaces.md).
BENCH_COLUMNS = ("attention", "seq_len", "batch_size", "tokens_per_batch", "regime", "compile", "compile_mode",
                 "ms_per_step", "ms_p10", "ms_p90", "samples_per_s", "tokens_per_s", "peak_mem_gb", "status", "note")
RECORD_MEM_UNIT_BYTES = 2**30   # the unit of a run record's peak_mem_gb (lra.callbacks.GIB)
BENCH_REQUIRED = ("attention", "seq_len", "regime", "compile", "tokens_per_s", "peak_mem_gb", "status")

GROUP = ["attention", "variant", "preset", "task", "seq_len"]


# --------------------------------------------------------------------------------------------- parsing
def parse_seq_len(text: str | int) -> int:
    """'1K' / '16k' -> 1024 / 16384; '1000' -> 1000."""
    if isinstance(text, (int, np.integer)):
        return int(text)
    match = re.fullmatch(r"\s*(\d+)\s*([kK]?)\s*", str(text))
    if not match:
        raise ValueError(f"bad sequence length {text!r}: use a number of tokens (4096) or a multiple of 1K (4K)")
    value = int(match.group(1))
    return value * 1024 if match.group(2) else value


def format_seq_len(n) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)) or n is pd.NA:
        return "?"
    n = int(n)
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def format_rate(value: float) -> str:
    if value is None or not np.isfinite(value):
        return NO_VALUE
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def format_duration(seconds: float) -> str:
    if seconds is None or not np.isfinite(seconds):
        return NO_VALUE
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _format_published(value: float) -> str:
    # The papers print one (FlashAttention) or two (LRA) decimals; keep what the number needs.
    return f"{value:.1f}" if round(value, 1) == round(value, 2) else f"{value:.2f}"


# --------------------------------------------------------------------------------------------- inputs
def normalise_records(records: pd.DataFrame) -> pd.DataFrame:
    """Records frame from `lra.records.load_records` with every column the tables use, one row per file."""
    df = records.copy() if records is not None else pd.DataFrame()
    for column in RECORD_COLUMNS:
        if column not in df.columns:
            df[column] = np.nan
    if df.empty:
        df["variant"] = pd.Series(dtype=str)
        return df
    df["path"] = df["path"].astype(str)
    df = df.loc[~df["path"].map(os.path.realpath).duplicated(keep="last")].copy()
    df["status"] = df["status"].fillna("unknown").astype(str)
    df["preset"] = df["preset"].fillna("").astype(str)
    df["task"] = df["task"].astype(str)
    df["attention"] = df["attention"].astype(str)
    df["seq_len"] = pd.to_numeric(df["seq_len"], errors="coerce").astype("Int64")
    for column in ("test_acc", "best_val_acc", "train_tokens_per_s", "train_samples_per_s", "step_time_ms",
                   "peak_mem_gb", "wall_time_s", "time_to_best_s"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    # Run records store peak memory in GiB (2^30 bytes: lra.callbacks); `lra bench models` CSVs and the
    # tables and plots use GB (1e9 bytes), so both sources read alike under one "peak GB" label.
    df["peak_mem_gb"] = df["peak_mem_gb"] * RECORD_MEM_UNIT_BYTES / 1e9
    df["variant"] = _variants(df)
    return df.reset_index(drop=True)


def _variants(df: pd.DataFrame) -> pd.Series:
    """Per run, what distinguishes it from other runs ('' if nothing): the attention options that differ
    among runs of the same attention, then the config settings that differ among runs of the same
    (attention, preset, task), e.g. `optim.lr=0.001` for a learning-rate variant recorded under the
    `paper` preset — so that such runs get their own rows instead of being averaged with (or dropped
    as reruns of) the preset's own."""
    option_columns = sorted(c for c in df.columns if c.startswith("attention_options."))
    parts: dict = {index: [] for index in df.index}
    for _, group in df.groupby("attention", sort=False):
        differing = [c for c in option_columns if group[c].astype(str).nunique(dropna=False) > 1]
        for index, row in group.iterrows():
            parts[index] += [f"{c.split('.', 1)[1]}={_plain(row[c])}" for c in differing if not _missing(row[c])]
    if "config" in df.columns:
        settings = df["config"].map(_config_settings)
        for _, group in df.groupby(["attention", "preset", "task"], sort=False):
            known = [settings[i] for i in group.index if settings[i] is not None]
            keys = sorted({k for one in known for k in one})
            differing = [k for k in keys if len({repr(one.get(k)) for one in known}) > 1]
            for index in group.index:
                if settings[index] is not None:
                    parts[index] += [_setting_text(k, settings[index].get(k)) for k in differing]
    return pd.Series({index: ", ".join(p) for index, p in parts.items()}, index=df.index, dtype=object)


def _setting_text(key: str, value) -> str:
    """`key=value`, except the starting checkpoint of a fine-tune: `from scratch`, or `from <task> <file>`
    for a checkpoint in a run folder (`.../<task>/<attention>/<run id>/checkpoints/<file>.ckpt`) --
    the path itself is too long for a legend."""
    if key != "train.init_from":
        return f"{key}={_plain(value)}"
    if _missing(value) or not value:
        return "from scratch"
    path = Path(str(value))
    parts = path.parts
    if len(parts) >= 5 and parts[-2] == "checkpoints":
        return f"from {parts[-5]} {path.stem}"
    return f"from {path.name}"


def _config_settings(config) -> dict | None:
    """A record's config flattened to {"optim.lr": 0.001, ...}: the settings that change what a run
    computes (`lra.config.identity_of`) apart from the attention options (compared on their own);
    None for a record without one."""
    if not isinstance(config, dict):
        return None
    settings = identity_of(config)
    settings.pop("attention_options", None)
    return pd.json_normalize(settings, sep=".").iloc[0].to_dict() if settings else {}


def _plain(value):
    """256.0 -> 256 (option columns become floats when some records lack the option)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return value


def _missing(value) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def read_csv_file(path: Path, how_to_make: str) -> pd.DataFrame:
    """Read one benchmark CSV (`#` lines are comments); a missing or unreadable file is one clear error."""
    if not path.is_file():
        raise FileNotFoundError(f"benchmark CSV not found: {path} ({how_to_make})")
    try:
        return pd.read_csv(path, comment="#")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable CSV ({err})") from None


def load_bench(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate `lra bench models` CSVs; a file of the wrong kind is one clear error naming it."""
    frames = []
    paths = [Path(p) for p in paths]
    for path in paths:
        frame = read_csv_file(path, f"write one with `lra bench models --out {path}`")
        if "impl" in frame.columns and "attention" not in frame.columns:
            raise ValueError(f"{path} is a `lra bench kernels` CSV; tables read `lra bench models` CSVs "
                             "(kernel results go to `lra plot --kernels`)")
        missing = [c for c in BENCH_REQUIRED if c not in frame.columns]
        if missing:
            raise ValueError(f"{path}: not a `lra bench models` CSV, missing column(s) {', '.join(missing)}")
        if "compile_mode" not in frame.columns:  # written before session 14: the mode is in the provenance file
            frame["compile_mode"] = _meta_compile_mode(path)
        for column in BENCH_COLUMNS:
            if column not in frame.columns:
                frame[column] = np.nan
        frame["file"] = str(path)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[*BENCH_COLUMNS, "file"])
    return load_bench_frame(pd.concat(frames, ignore_index=True))


def _meta_compile_mode(csv_path: Path):
    """The torch.compile mode recorded in a benchmark CSV's provenance file (``<stem>.meta.json``,
    ``settings.compile_mode``), or NaN (read as the default mode) without one."""
    import json

    meta_path = csv_path.with_name(csv_path.stem + ".meta.json")
    try:
        return json.loads(meta_path.read_text())["settings"]["compile_mode"]
    except (OSError, ValueError, KeyError, TypeError):
        return np.nan


def load_bench_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Typed columns for a frame of `lra bench models` rows (a `file` column names where each came from)."""
    df = df.copy()
    for column in (*BENCH_COLUMNS, "file"):
        if column not in df.columns:
            df[column] = np.nan if column != "file" else "bench"
    df["attention"] = df["attention"].astype(str)
    df["regime"] = df["regime"].astype(str)
    df["compile"] = df["compile"].map(_as_bool)
    # files written before session 14 have no compile_mode: their compiled rows ran in the default mode
    mode = df["compile_mode"].map(lambda m: "" if _missing(m) else str(m).strip())
    df["compile_mode"] = [(m or "default") if c else "" for c, m in zip(df["compile"], mode)]
    df["status"] = df["status"].fillna("ok").astype(str)
    df["seq_len"] = pd.to_numeric(df["seq_len"], errors="coerce").astype("Int64")
    for column in ("ms_per_step", "ms_p10", "ms_p90", "samples_per_s", "tokens_per_s", "peak_mem_gb", "batch_size",
                   "tokens_per_batch"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    return df


def _as_bool(value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return str(value).strip().lower() in ("true", "1", "yes", "compiled", "compile")


def filter_frame(df: pd.DataFrame, *, task=None, attention=None, seq_len=None, preset=None) -> pd.DataFrame:
    """Keep rows matching every given filter (lists = any of); filters on columns the frame lacks are ignored."""
    mask = pd.Series(True, index=df.index)
    for column, wanted in (("task", task), ("attention", attention), ("preset", preset)):
        if wanted and column in df.columns:
            mask &= df[column].astype(str).isin([str(w) for w in wanted])
    if seq_len and "seq_len" in df.columns:
        mask &= df["seq_len"].isin([parse_seq_len(n) for n in seq_len])
    return df.loc[mask]


# --------------------------------------------------------------------------------------------- accuracy
def accuracy_summary(records: pd.DataFrame, published: pd.DataFrame | None = None,
                     baseline: str = "softmax") -> pd.DataFrame:
    """Tidy accuracy table: one row per (attention, variant, preset, task, seq_len), plus `avg` and
    `speedup` rows per (attention, variant, preset).

    Columns: attention, label, variant, preset, task, column, seq_len, n, mean, std (test accuracy %), seeds,
    val_mean, completed, failed, oom, running, duplicates, then per paper `published_<id>`, `failed_<id>`,
    `delta_<id>` (ours − published). For `avg` rows `n` is the number of tasks averaged; for `speedup`
    rows `mean` is the geometric-mean training-throughput ratio over `baseline` across tasks.
    """
    published = published if published is not None else pd.DataFrame(columns=["id", "source", "task"])
    df = normalise_records(records)
    papers = pub.sources(published)
    rows: list[dict] = []
    if not df.empty:
        df, dup_counts = _dedupe_seeds(df)
        for key, group in df.groupby(GROUP, dropna=False, sort=False):
            done = group[(group["status"] == "completed") & group["test_acc"].notna()]
            acc = done["test_acc"] * 100.0
            row = dict(zip(GROUP, key))
            row.update(
                n=len(acc), mean=acc.mean() if len(acc) else np.nan,
                std=acc.std(ddof=1) if len(acc) > 1 else np.nan,
                seeds=" ".join(str(s) for s in sorted(_seed_values(done["seed"]))),
                val_mean=done["best_val_acc"].mean() * 100.0 if len(done) else np.nan,
                completed=int((group["status"] == "completed").sum()),
                failed=int((group["status"] == "failed").sum()), oom=int((group["status"] == "oom").sum()),
                running=int((group["status"] == "running").sum()), duplicates=int(dup_counts.get(key, 0)),
                tokens_per_s=done["train_tokens_per_s"].mean() if len(done) else np.nan,
            )
            rows.append(row)
    columns = ["attention", "label", "variant", "preset", "task", "column", "seq_len", "n", "mean", "std", "seeds",
               "val_mean", "completed", "failed", "oom", "running", "duplicates"]
    for paper_id, _ in papers:
        columns += [f"published_{paper_id}", f"failed_{paper_id}", f"delta_{paper_id}"]
    if not rows:
        return pd.DataFrame(columns=columns)
    cells = pd.DataFrame(rows)
    cells["seq_len"] = cells["seq_len"].astype("Int64")
    extra = _average_rows(cells) + _speedup_rows(cells, baseline)
    out = pd.concat([cells, pd.DataFrame(extra)], ignore_index=True) if extra else cells
    out["label"] = out["attention"].map(pub.attention_label)
    out["column"] = out["task"].map(lambda t: {"avg": "Avg", "speedup": "Speedup"}.get(t, pub.task_label(t)))
    for paper_id, _ in papers:
        values = [pub.lookup(published, paper_id, a, t) for a, t in zip(out["attention"], out["task"])]
        out[f"published_{paper_id}"] = [v for v, _ in values]
        out[f"failed_{paper_id}"] = [f for _, f in values]
        delta = out["mean"] - out[f"published_{paper_id}"]
        # Δ of a partial average or of a speedup is not meaningful.
        partial_avg = (out["task"] == "avg") & (out["n"] < len(pub.AVERAGE_TASKS))
        out[f"delta_{paper_id}"] = delta.where(~partial_avg & (out["task"] != "speedup"))
    for column in ("n", "completed", "failed", "oom", "running", "duplicates"):
        out[column] = out[column].fillna(0).astype(int)
    out = out.reindex(columns=columns)
    order = out.apply(lambda r: (pub.attention_sort_key(r["attention"]), r["variant"], r["preset"],
                                 _column_sort_key(r["task"]), _int_or(r["seq_len"], -1)), axis=1)
    return out.loc[order.sort_values().index].reset_index(drop=True)


def _seed_values(seeds: pd.Series) -> list:
    values = []
    for seed in seeds.dropna():
        values.append(int(seed) if float(seed).is_integer() else seed)
    return values


def _int_or(value, default: int) -> int:
    return default if _missing(value) else int(value)


def _column_sort_key(task: str) -> tuple:
    return {"avg": (90, ""), "speedup": (91, "")}.get(task, pub.task_sort_key(task))


def _dedupe_seeds(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Keep one completed run per (cell, seed) — the newest; reruns of a seed would bias mean and std."""
    completed = df[(df["status"] == "completed") & df["seed"].notna()]
    key = [*GROUP, "seed"]
    ordered = completed.sort_values("created", na_position="first", kind="stable")
    dropped = ordered[ordered.duplicated(key, keep="last")]
    counts = dropped.groupby(GROUP, dropna=False, sort=False).size().to_dict() if not dropped.empty else {}
    return df.drop(index=dropped.index), counts


def _average_rows(cells: pd.DataFrame) -> list[dict]:
    """Mean of the per-task means over the papers' five tasks, per (attention, variant, preset)."""
    rows = []
    for key, group in cells.groupby(["attention", "variant", "preset"], dropna=False, sort=False):
        present = group[group["task"].isin(pub.AVERAGE_TASKS) & (group["n"] > 0)]
        if present.empty or present["task"].duplicated().any():
            continue  # no task, or a task at two sequence lengths: which one to average is ambiguous
        rows.append(dict(zip(["attention", "variant", "preset"], key), task="avg", seq_len=pd.NA,
                         n=len(present), mean=present["mean"].mean(), std=np.nan,
                         seeds="", completed=0, failed=0, oom=0, running=0, duplicates=0))
    return rows


def _speedup_rows(cells: pd.DataFrame, baseline: str) -> list[dict]:
    """Geometric mean over tasks of training throughput relative to `baseline` on the same task and length."""
    base = cells[(cells["attention"] == baseline) & cells["tokens_per_s"].notna()]
    if base.empty:
        return []
    base = base.groupby(["preset", "task", "seq_len"], dropna=False)["tokens_per_s"].mean()
    rows = []
    for key, group in cells.groupby(["attention", "variant", "preset"], dropna=False, sort=False):
        ratios = []
        for _, cell in group.iterrows():
            anchor = base.get((cell["preset"], cell["task"], cell["seq_len"]))
            if anchor is not None and np.isfinite(cell["tokens_per_s"]) and anchor > 0:
                ratios.append(cell["tokens_per_s"] / anchor)
        if ratios:
            rows.append(dict(zip(["attention", "variant", "preset"], key), task="speedup", seq_len=pd.NA,
                             n=len(ratios), mean=float(np.exp(np.mean(np.log(ratios)))), std=np.nan, seeds="",
                             completed=0, failed=0, oom=0, running=0, duplicates=0))
    return rows


@dataclass
class Section:
    """One display table: a title, the table (strings) and notes printed under it."""
    title: str
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def _row_labels(summary: pd.DataFrame) -> pd.Series:
    """'FlashAttention', plus the variant / preset only where the data has more than one."""
    many_presets = summary["preset"].nunique() > 1
    labels = []
    for _, row in summary.iterrows():
        label = row["label"]
        same = summary[summary["attention"] == row["attention"]]
        extras = []
        if same["variant"].nunique() > 1 and row["variant"]:
            extras.append(row["variant"])
        if many_presets:
            extras.append(f"preset {row['preset'] or '?'}")
        labels.append(f"{label} ({'; '.join(extras)})" if extras else label)
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
    parts = []
    if row["n"] > 0:
        text = f"{row['mean']:.1f}" + (f" ± {row['std']:.1f}" if row["n"] > 1 else "")
        parts.append(f"{text} (n={row['n']})")
    issues = [f"{row[k]} {k}" for k in ("oom", "failed", "running") if row[k]]
    if not parts:
        if row["oom"]:
            return "OOM"
        if row["failed"]:
            return "failed"
        if row["running"]:
            return "running"
        return NO_VALUE
    if issues:
        parts[0] += " [" + ", ".join(issues) + "]"
    return parts[0]


def accuracy_sections(summary: pd.DataFrame, published: pd.DataFrame | None = None,
                      records: pd.DataFrame | None = None) -> list[Section]:
    """Display table: per attention a row of ours, then each paper's numbers and our Δ to them."""
    if summary.empty:
        return [Section("Accuracy", pd.DataFrame(), ["No run records match (run `lra train` or `lra sweep` first, "
                                                     "or point --runs at the folder holding them)."])]
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
        attention = group["attention"].iloc[0]
        for paper_id, paper_label in papers:
            pub_cells, delta_cells, any_value = {}, {}, False
            for column in column_order:
                task = _task_of(summary, column)
                value, failed = pub.lookup(published, paper_id, attention, task) if task else (math.nan, False)
                if failed:
                    pub_cells[column], any_value = "fail", True
                elif np.isfinite(value):
                    pub_cells[column] = f"{value:.1f}×" if task == "speedup" else _format_published(value)
                    any_value = True
                else:
                    pub_cells[column] = NO_VALUE
                ours = group[group["col"] == column]
                delta = ours[f"delta_{paper_id}"].iloc[0] if len(ours) and f"delta_{paper_id}" in ours else math.nan
                delta_cells[column] = f"{delta:+.1f}" if np.isfinite(delta) else NO_VALUE
            if any_value:
                table_rows.append({"Attention": "", "Numbers": paper_label, **pub_cells})
                if any(v != NO_VALUE for v in delta_cells.values()):
                    table_rows.append({"Attention": "", "Numbers": f"Δ vs {paper_label}", **delta_cells})
    notes = [
        "Test accuracy (%): mean ± sample std over seeds (n = completed seeds). "
        f"Avg = mean over {', '.join(pub.task_label(t) for t in pub.AVERAGE_TASKS)}, as in both papers. "
        "Δ = ours − published.",
    ]
    if "Speedup" in column_order:
        notes.append("Speedup = training throughput over the Transformer (`softmax`) on the same task and length, "
                     "geometric mean over tasks.")
    for paper_id, paper_label in papers:
        notes.append(f"{paper_label}: {_merge_citations(published[published['id'] == paper_id]['citation'])}")
    notes += _not_counted(records)
    dups = int(summary["duplicates"].sum())
    if dups:
        notes.append(f"{dups} repeated run(s) of an already-counted seed ignored (the newest run of each seed counts).")
    return [Section("Accuracy (test %)", pd.DataFrame(table_rows), notes)]


def _merge_citations(citations: pd.Series) -> str:
    """'... arXiv:X. Table 3.' + '... arXiv:X. Table 6.' -> '... arXiv:X. Tables 3, 6.'"""
    works: dict[str, list[str]] = {}
    for citation in citations.drop_duplicates():
        match = re.fullmatch(r"(.*?)\s*Table\s+(\S+?)\.?", str(citation).strip())
        base, number = (match.group(1), match.group(2)) if match else (str(citation), None)
        works.setdefault(base, [])
        if number:
            works[base].append(number)
    return "; ".join(base + (f" Table{'s' if len(n) > 1 else ''} {', '.join(n)}." if n else "")
                     for base, n in works.items())


def _paper_has(summary: pd.DataFrame, papers, column: str) -> bool:
    return column == "Avg" and any(summary["task"].isin(pub.AVERAGE_TASKS)) and bool(papers)


def _task_of(summary: pd.DataFrame, column: str) -> str | None:
    if column == "Avg":
        return "avg"
    if column == "Speedup":
        return "speedup"
    hit = summary[summary["col"] == column]
    return None if hit.empty else hit["task"].iloc[0]


def _not_counted(records: pd.DataFrame | None) -> list[str]:
    """One note per run that did not complete: failed / oom / running, with its path and error."""
    if records is None or records.empty:
        return []
    df = normalise_records(records)
    bad = df[df["status"] != "completed"]
    notes = []
    for _, r in bad.sort_values(["task", "attention", "seq_len", "seed"], na_position="last").iterrows():
        error = f": {str(r['error']).strip().splitlines()[0][:160]}" if not _missing(r["error"]) and str(r["error"]).strip() else ""
        seed = "" if _missing(r["seed"]) else f" seed {_int_or(r['seed'], 0)}"
        notes.append(f"Not counted — {r['status'].upper() if r['status'] == 'oom' else r['status']}: {r['task']} / "
                     f"{r['attention']} N={format_seq_len(r['seq_len'])}{seed} ({r['path']}){error}")
    return notes


# --------------------------------------------------------------------------------------------- efficiency
EFFICIENCY_COLUMNS = ["kind", "setting", "task", "preset", "regime", "compile", "file", "attention", "label",
                      "variant", "seq_len", "status", "n", "batch_size", "tokens_per_s", "samples_per_s",
                      "ms_per_step", "speedup", "speedup_sdpa", "speedup_eager", "peak_mem_gb", "wall_time_s",
                      "time_to_best_s", "note"]
_REGIME_ORDER = ("paper", "small")


def _mode_text(compiled: bool, compile_mode: str) -> str:
    """eager; compiled (torch.compile's default mode); compiled, CUDA graphs (reduce-overhead); or e.g.
    compiled (max-autotune)."""
    if not compiled:
        return "eager"
    if compile_mode in ("", "default"):
        return "compiled"
    if compile_mode == "reduce-overhead":
        return "compiled, CUDA graphs (reduce-overhead)"
    return f"compiled ({compile_mode})"


def efficiency_summary(records: pd.DataFrame | None = None, bench: pd.DataFrame | None = None,
                       baseline: str = "softmax") -> pd.DataFrame:
    """Tidy efficiency table, one row per (setting, attention, variant, seq_len).

    A *setting* is a training configuration from run records (task + preset) or a model-benchmark
    configuration (file, batch regime, eager/compiled). Ratios of tokens/s at the same length:
    `speedup` over `baseline` in the same setting, `speedup_sdpa` over `sdpa` in the same setting, and
    (compiled benchmark settings) `speedup_eager` over the eager `baseline` of the same file and regime.
    Run-record cells are means over the completed seeds.
    """
    parts = []
    df = normalise_records(records) if records is not None else pd.DataFrame()
    if not df.empty:
        df, _ = _dedupe_seeds(df)
        many_presets = df["preset"].nunique() > 1
        rows = []
        for key, group in df.groupby(["task", "preset", "attention", "variant", "seq_len"], dropna=False, sort=False):
            task, preset, attention, variant, seq_len = key
            done = group[group["status"] == "completed"]
            status = "ok" if len(done) else _worst_status(group["status"])
            setting = f"{pub.task_label(task)}: training runs" + (f", preset {preset or '?'}" if many_presets else "")
            rows.append(dict(kind="runs", setting=setting, task=task, preset=preset, regime=None, compile=None,
                             file=None, attention=attention, variant=variant, seq_len=seq_len, status=status,
                             n=len(done), tokens_per_s=done["train_tokens_per_s"].mean(),
                             samples_per_s=done["train_samples_per_s"].mean(),
                             ms_per_step=done["step_time_ms"].mean(), peak_mem_gb=done["peak_mem_gb"].mean(),
                             wall_time_s=done["wall_time_s"].mean(), time_to_best_s=done["time_to_best_s"].mean(),
                             note=_first_error(group),
                             _order=(1, pub.task_sort_key(task), preset)))
        parts.append(pd.DataFrame(rows))
    if bench is not None and not bench.empty:
        bench = load_bench_frame(bench)
        files = list(dict.fromkeys(bench["file"]))
        rows = []
        # Later rows (a rerun in the same or a later file) replace earlier ones.
        latest = bench.drop_duplicates(["file", "regime", "compile", "attention", "seq_len"], keep="last")
        for _, r in latest.iterrows():
            setting = f"model benchmark: {r['regime']} batch, {_mode_text(r['compile'], r['compile_mode'])}"
            if len(files) > 1:
                setting = f"{Path(str(r['file'])).stem} — {setting}"
            status = str(r["status"])
            ok = status == "ok"
            regime_rank = _REGIME_ORDER.index(r["regime"]) if r["regime"] in _REGIME_ORDER else len(_REGIME_ORDER)
            rows.append(dict(kind="bench", setting=setting, task=None, preset=None, regime=r["regime"],
                             compile=bool(r["compile"]), file=r["file"], attention=r["attention"], variant="",
                             seq_len=r["seq_len"], status=status, n=1 if ok else 0, batch_size=r["batch_size"],
                             tokens_per_s=r["tokens_per_s"] if ok else np.nan,
                             samples_per_s=r["samples_per_s"] if ok else np.nan,
                             ms_per_step=r["ms_per_step"] if ok else np.nan,
                             peak_mem_gb=r["peak_mem_gb"] if ok else np.nan,
                             wall_time_s=np.nan, time_to_best_s=np.nan,
                             note="" if _missing(r["note"]) else str(r["note"]),
                             _order=(0, (files.index(r["file"]), ""), f"{regime_rank}{r['regime']}{int(r['compile'])}")))
        parts.append(pd.DataFrame(rows))
    if not parts:
        return pd.DataFrame(columns=EFFICIENCY_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    out["seq_len"] = out["seq_len"].astype("Int64")
    out["label"] = out["attention"].map(pub.attention_label)
    out["tokens_per_s"] = out["tokens_per_s"].astype(float)
    ok = out[out["status"] == "ok"]
    base = ok[ok["attention"] == baseline].groupby(["setting", "seq_len"])["tokens_per_s"].mean()
    sdpa = ok[ok["attention"] == "sdpa"].groupby(["setting", "seq_len"])["tokens_per_s"].mean()
    eager = (ok[(ok["kind"] == "bench") & (ok["attention"] == baseline) & (ok["compile"] == False)]  # noqa: E712
             .groupby(["file", "regime", "seq_len"])["tokens_per_s"].mean())
    out["speedup"] = [t / base.get((s, n), np.nan) for s, n, t in zip(out["setting"], out["seq_len"], out["tokens_per_s"])]
    out["speedup_sdpa"] = [t / sdpa.get((s, n), np.nan) for s, n, t in
                           zip(out["setting"], out["seq_len"], out["tokens_per_s"])]
    out["speedup_eager"] = [t / eager.get((f, r, n), np.nan) if k == "bench" and c else np.nan for k, c, f, r, n, t in
                            zip(out["kind"], out["compile"], out["file"], out["regime"], out["seq_len"],
                                out["tokens_per_s"])]
    order = [(o, pub.attention_sort_key(a), v, _int_or(n, -1))
             for o, a, v, n in zip(out["_order"], out["attention"], out["variant"], out["seq_len"])]
    out = out.iloc[sorted(range(len(out)), key=order.__getitem__)].reset_index(drop=True)
    return out.reindex(columns=EFFICIENCY_COLUMNS)


def _worst_status(statuses: pd.Series) -> str:
    for status in ("oom", "failed", "running"):
        if (statuses == status).any():
            return status
    return str(statuses.iloc[0])


def _first_error(group: pd.DataFrame) -> str:
    errors = [str(e).strip().splitlines()[0] for e in group["error"] if not _missing(e) and str(e).strip()]
    return errors[0][:160] if errors else ""


def _ratio(v: float) -> str:
    return f"{v:.2f}×"


_STATUS_CELLS = {"oom": "OOM", "unsupported": "n/a", "error": "error", "failed": "failed", "running": "running"}
# (row label, summary column, formatter); "{baseline}" is filled in.
_RUN_METRICS = (("tokens/s", "tokens_per_s", format_rate), ("vs {baseline}", "speedup", _ratio),
                ("peak GB", "peak_mem_gb", lambda v: f"{v:.2f}"), ("train time", "wall_time_s", format_duration),
                ("time to best", "time_to_best_s", format_duration))
_BENCH_METRICS = (("ms/step", "ms_per_step", lambda v: f"{v:.2f}"), ("tokens/s", "tokens_per_s", format_rate),
                  ("vs {baseline}", "speedup", _ratio), ("vs sdpa", "speedup_sdpa", _ratio),
                  ("vs eager {baseline}", "speedup_eager", _ratio), ("peak GB", "peak_mem_gb", lambda v: f"{v:.2f}"))


def efficiency_sections(summary: pd.DataFrame, baseline: str = "softmax") -> list[Section]:
    """One display table per setting: rows (attention, metric), columns sequence lengths."""
    if summary.empty:
        return [Section("Efficiency", pd.DataFrame(), [
            "No run records or model-benchmark CSVs match (pass --runs DIR and/or --bench FILE from `lra bench models`)."])]
    sections = []
    for setting, group in summary.groupby("setting", sort=False):
        kind = group["kind"].iloc[0]
        metrics = [(label.format(baseline=baseline), column, fmt)
                   for label, column, fmt in (_BENCH_METRICS if kind == "bench" else _RUN_METRICS)]
        # Ratio rows only where they exist (no SDPA row without an sdpa run, no eager ratio for eager rows).
        metrics = [m for m in metrics if m[1] in ("speedup",) or not m[1].startswith("speedup")
                   or group[m[1]].notna().any()]
        if kind == "runs":
            metrics = [m for m in metrics if m[1] in ("tokens_per_s", "speedup", "peak_mem_gb")
                       or group[m[1]].notna().any()]
        lengths = sorted({_int_or(n, -1) for n in group["seq_len"]})  # -1: length not recorded
        many_variants = group.groupby("attention")["variant"].nunique()
        rows = []
        for (attention, variant), cells in group.groupby(["attention", "variant"], sort=False):
            label = pub.attention_label(attention) + (f" ({variant})" if many_variants.get(attention, 0) > 1 else "")
            by_len = {_int_or(r["seq_len"], -1): r for _, r in cells.iterrows()}
            # An attention that measured nothing gets one status row instead of a block of identical cells.
            shown = metrics if (cells["status"] == "ok").any() else [("status", "status", str)]
            for index, (metric, column, fmt) in enumerate(shown):
                row = {"Attention": label if index == 0 else "", "Metric": metric}
                for n in lengths:
                    cell, key = by_len.get(n), format_seq_len(n if n >= 0 else None)
                    if cell is None:
                        row[key] = NO_VALUE
                    elif cell["status"] != "ok":
                        row[key] = _STATUS_CELLS.get(cell["status"], cell["status"])
                    else:
                        value = cell[column]
                        row[key] = fmt(value) if not _missing(value) and np.isfinite(value) else NO_VALUE
                rows.append(row)
        notes = [f"vs X = tokens/s over attention X in the same setting at the same length "
                 f"({baseline} = {pub.attention_label(baseline)}); {NO_VALUE} where X has no measurement there "
                 "(e.g. it ran out of memory). OOM = out of memory; n/a = the attention cannot run that length here."]
        if kind == "runs":
            notes.append("Means over completed seeds; throughput excludes warm-up steps; peak GB = peak GPU memory.")
        else:
            batches = group.dropna(subset=["batch_size"])
            if not batches.empty:
                notes.append("Batch size per length: " + ", ".join(
                    f"{format_seq_len(n)}: {int(b)}" for n, b in
                    batches.groupby("seq_len")["batch_size"].first().items()))
        problems = group[(group["status"] != "ok") & (group["note"].fillna("").astype(str) != "")]
        for (label, status, note), rows_ in problems.groupby(["label", "status", "note"], sort=False):
            lengths_ = ", ".join(format_seq_len(n) for n in rows_["seq_len"])
            notes.append(f"{label} at {lengths_}: {status} — {note}")
        sections.append(Section(f"Efficiency — {setting}", pd.DataFrame(rows), notes))
    return sections


# --------------------------------------------------------------------------------------------- rendering
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "×": r"$\times$", "Δ": r"$\Delta$", "–": "--", "—": "---", "−": "$-$"}


def latex_escape(text) -> str:
    text = re.sub(r"(?<![\w.])-(?=\d)", "−", str(text))  # a negative number gets a real minus sign
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def render(sections: Sequence[Section], fmt: str = "markdown") -> str:
    """Display sections as Markdown (headings + pipe tables + notes) or LaTeX (booktabs tabulars)."""
    if fmt not in ("markdown", "latex"):
        raise ValueError(f"render format must be markdown or latex, got {fmt!r} (csv writes the summaries)")
    chunks = []
    for section in sections:
        if fmt == "markdown":
            chunks.append(f"## {section.title}\n")
            if not section.table.empty:
                chunks.append(section.table.to_markdown(index=False, tablefmt="pipe", disable_numparse=True) + "\n")
            chunks.extend(f"- {note}" for note in section.notes)
        else:
            chunks.append(f"% {section.title}")
            if not section.table.empty:
                table = section.table.map(latex_escape)
                table.columns = [latex_escape(c) for c in table.columns]
                chunks.append(table.to_latex(index=False, escape=False, column_format="ll" + "r" * (table.shape[1] - 2)))
            chunks.extend(f"% {note}" for note in section.notes)
        chunks.append("")
    return "\n".join(chunks).rstrip() + "\n"


def to_csv(summary: pd.DataFrame) -> str:
    return summary.to_csv(index=False, float_format="%.6g")
