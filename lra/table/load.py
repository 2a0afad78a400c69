"""Run records -> one pandas DataFrame, one row per run, with the typed and derived columns the tables
and plots compute with.

Records are found in run trees (`<runs>/<task>/<attention>/<run id>/result.json`) and in folders of
committed records (`results/**/<anything>.json` holding a run record), so `--runs-dir` takes either.

Derived columns:
- `variant`: what distinguishes the run from other runs of its attention (lra.table.variants);
- `data_id`, `data_source`, `data_description`, `data_label`: the data the run trained on (record
  `data`; older records: id `unknown`, source from `config.data.source`);
- `runs_per_gpu`, `sharing_known`, `solo`: how many runs shared the GPU (record `sharing`; older
  records: 1, with `sharing_known` False). Only solo runs' timings are speed measurements;
- `batch_size`, `model_key`, `on_cpu`: what a throughput ratio must hold equal;
- `interpreted`: the run's attention ran our Triton kernels on a CPU, which only Triton's interpreter
  does (correct, but orders of magnitude slower than compiled kernels);
- `timed`: the run's timings measure its attention: it had its device to itself and did not run
  through the interpreter. Speed figures come from timed runs only;
- `chance_pct`, `at_chance`, `best_step`: chance accuracy of the task (1 / classes), whether the run's
  best validation accuracy stayed within `CHANCE_MARGIN_PTS` of it, and the step of that best.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from lra.records import RECORD_NAME, read_record
from lra.seq_len import parse_seq_len
from lra.table.format import is_missing
from lra.table.variants import variants

# Columns the tables read from run records (missing ones are added as empty).
RECORD_COLUMNS = ("run_id", "task", "attention", "seq_len", "seed", "preset", "status", "error", "test_acc",
                  "best_val_acc", "train_tokens_per_s", "train_samples_per_s", "step_time_ms", "peak_mem_gb",
                  "wall_time_s", "time_to_best_s", "steps", "batch_size", "device", "devices", "precision",
                  "compile", "created", "path", "config", "val_acc_curve")
NUMERIC_COLUMNS = ("test_acc", "best_val_acc", "train_tokens_per_s", "train_samples_per_s", "step_time_ms",
                   "peak_mem_gb", "wall_time_s", "time_to_best_s", "steps", "batch_size", "devices")
RECORD_MEM_UNIT_BYTES = 2**30   # the unit of a run record's peak_mem_gb (lra.callbacks.GIB)
# The derived columns (and their dtypes, for an empty frame).
DERIVED_COLUMNS = {"variant": object, "data_id": object, "data_source": object, "data_description": object,
                   "data_label": object, "sharing_known": bool, "runs_per_gpu": int, "solo": bool,
                   "model_key": object, "on_cpu": bool, "interpreted": bool, "timed": bool, "chance_pct": float,
                   "at_chance": bool, "best_step": float}
UNKNOWN_DATA_ID = "unknown"
# A run whose best validation accuracy is at most this many points above chance learned nothing.
CHANCE_MARGIN_PTS = 2.0
# Keys a JSON file must hold to be read as a run record when it is not named result.json.
_RECORD_KEYS = ("task", "attention", "status")


# --------------------------------------------------------------------------------------------- finding
def record_files(root: str | Path) -> list[Path]:
    """Candidate record files under `root` (or `root` itself if it is a file): every `*.json` except
    `*.meta.json` provenance files."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.json") if not p.name.endswith(".meta.json"))


def _is_record_candidate(path: Path) -> bool:
    """result.json and result*.json always (a torn one is reported); other JSON files only if they
    hold the keys of a run record (sweep plans, tuning caches and the like are not records)."""
    if path.name.startswith("result"):
        return True
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(key in data for key in _RECORD_KEYS)


def iter_run_records(roots: Iterable[str | Path], *, warn: bool = True):
    """Yield (path, record) for every readable run record under the roots; corrupt ones are reported
    (a warning naming the file) and skipped."""
    for root in roots:
        for path in record_files(root):
            if path.name != RECORD_NAME and not _is_record_candidate(path):
                continue
            try:
                yield path, read_record(path)
            except (OSError, ValueError) as err:
                if warn:
                    warnings.warn(f"skipping corrupt run record: {err}", stacklevel=2)


def load_run_records(*roots: str | Path, warn: bool = True) -> pd.DataFrame:
    """All run records under `roots` as one DataFrame, one row per record file; nested dicts are
    flattened with dots (`data.id`, `attention_options.nb_features`); `path` is the record's file."""
    rows = []
    for path, record in iter_run_records(roots, warn=warn):
        curve = record.pop("val_acc_curve", None)
        config = record.pop("config", None)
        row = pd.json_normalize(record, sep=".").iloc[0].to_dict() if record else {}
        row.update(path=str(path), val_acc_curve=curve, config=config)
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------- typing
def normalise_records(records: pd.DataFrame | None) -> pd.DataFrame:
    """Records frame (`load_run_records`) with every column the tables use, one row per file."""
    df = records.copy() if records is not None else pd.DataFrame()
    for column in RECORD_COLUMNS:
        if column not in df.columns:
            df[column] = np.nan
    if df.empty:
        for column, dtype in DERIVED_COLUMNS.items():
            df[column] = pd.Series(dtype=dtype)
        return df
    df["path"] = df["path"].astype(str)
    df = df.loc[~df["path"].map(os.path.realpath).duplicated(keep="last")].copy()
    df["status"] = _text(df["status"], "unknown")
    df["preset"] = _text(df["preset"], "")
    df["task"] = df["task"].astype(str)
    df["attention"] = df["attention"].astype(str)
    df["seq_len"] = pd.to_numeric(df["seq_len"], errors="coerce").astype("Int64")
    configs = df["config"].map(lambda c: c if isinstance(c, dict) else {})
    df["batch_size"] = df["batch_size"].where(df["batch_size"].notna(),
                                              configs.map(lambda c: (c.get("train") or {}).get("batch_size")))
    for column in NUMERIC_COLUMNS:
        df[column] = pd.to_numeric(df[column], errors="coerce")
    # Run records store peak memory in GiB (2^30 bytes: lra.callbacks); `lra bench models` CSVs and the
    # tables and plots use GB (1e9 bytes), so both sources read alike under one "peak GB" label.
    df["peak_mem_gb"] = df["peak_mem_gb"] * RECORD_MEM_UNIT_BYTES / 1e9
    _add_data(df, configs)
    _add_sharing(df)
    df["model_key"] = configs.map(lambda c: json.dumps(c.get("model") or {}, sort_keys=True, default=str))
    df["on_cpu"] = df["device"].map(lambda d: isinstance(d, str) and d.strip().lower().startswith("cpu"))
    _add_interpreted(df)
    _add_chance(df)
    df["variant"] = variants(df)
    return df.reset_index(drop=True)


def _text(values: pd.Series, default: str) -> pd.Series:
    return pd.Series([default if is_missing(v) else str(v) for v in values], index=values.index, dtype=object)


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(np.nan, index=df.index, dtype=object)


def _add_data(df: pd.DataFrame, configs: pd.Series) -> None:
    """`data_*` columns from the record's `data`; an older record without it reads as id `unknown`
    with the source its config asked for."""
    asked = configs.map(lambda c: (c.get("data") or {}).get("source"))
    ids, sources = _column(df, "data.id"), _column(df, "data.source")
    df["data_id"] = [UNKNOWN_DATA_ID if is_missing(i) or not str(i) else str(i) for i in ids]
    df["data_source"] = [str(s) if not is_missing(s) else (str(a) if not is_missing(a) else "unknown")
                         for s, a in zip(sources, asked)]
    df["data_description"] = [("" if is_missing(d) else str(d)) for d in _column(df, "data.description")]
    df["data_label"] = [data_label(s, i) for s, i in zip(df["data_source"], df["data_id"])]


def data_label(source: str, data_id: str) -> str:
    """`generated a1b2c3d4e5f6`, or `auto (data id not recorded)` for an older record."""
    return f"{source} (data id not recorded)" if data_id == UNKNOWN_DATA_ID else f"{source} {data_id}"


def _add_sharing(df: pd.DataFrame) -> None:
    shared = pd.to_numeric(_column(df, "sharing.runs_per_gpu"), errors="coerce")
    df["sharing_known"] = shared.notna()
    df["runs_per_gpu"] = shared.fillna(1).astype(int)
    df["solo"] = df["runs_per_gpu"] == 1


def _add_interpreted(df: pd.DataFrame) -> None:
    from lra.attention import uses_kernels

    df["interpreted"] = df["on_cpu"] & df["attention"].map(uses_kernels)
    df["timed"] = df["solo"] & ~df["interpreted"]


def _add_chance(df: pd.DataFrame) -> None:
    from tasks.registry import TASKS

    df["chance_pct"] = [100.0 / TASKS[t].num_classes if t in TASKS else np.nan for t in df["task"]]
    best = df["best_val_acc"].where(df["best_val_acc"].notna(), df["test_acc"]) * 100.0
    df["at_chance"] = (df["status"] == "completed") & (best <= df["chance_pct"] + CHANCE_MARGIN_PTS)
    df["best_step"] = df["val_acc_curve"].map(best_step)


def best_step(curve) -> float:
    """The step of the first maximum of a validation curve ([{step, val_acc, ...}]); NaN without one."""
    if not isinstance(curve, list):
        return np.nan
    points = [(p["val_acc"], -p["step"]) for p in curve
              if isinstance(p, dict) and p.get("val_acc") is not None and p.get("step") is not None]
    return float(-max(points)[1]) if points else np.nan


# --------------------------------------------------------------------------------------------- selecting
def filter_frame(df: pd.DataFrame, *, task=None, attention=None, seq_len=None, preset=None) -> pd.DataFrame:
    """Keep rows matching every given filter (lists = any of); filters on columns the frame lacks are ignored."""
    mask = pd.Series(True, index=df.index)
    for column, wanted in (("task", task), ("attention", attention), ("preset", preset)):
        if wanted and column in df.columns:
            mask &= df[column].astype(str).isin([str(w) for w in wanted])
    if seq_len and "seq_len" in df.columns:
        mask &= df["seq_len"].isin([parse_seq_len(n) for n in seq_len])
    return df.loc[mask]
