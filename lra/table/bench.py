"""`lra bench models` CSVs -> one typed DataFrame (columns in docs/interfaces.md)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from lra.table.format import is_missing

BENCH_COLUMNS = ("attention", "seq_len", "batch_size", "tokens_per_batch", "regime", "compile", "compile_mode",
                 "ms_per_step", "ms_p10", "ms_p90", "samples_per_s", "tokens_per_s", "peak_mem_gb", "status", "note")
BENCH_REQUIRED = ("attention", "seq_len", "regime", "compile", "tokens_per_s", "peak_mem_gb", "status")


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
    for path in map(Path, paths):
        frame = read_csv_file(path, f"write one with `lra bench models --out {path}`")
        if "impl" in frame.columns and "attention" not in frame.columns:
            raise ValueError(f"{path} is a `lra bench kernels` CSV; tables read `lra bench models` CSVs "
                             "(kernel results go to `lra plot --kernels`)")
        missing = [c for c in BENCH_REQUIRED if c not in frame.columns]
        if missing:
            raise ValueError(f"{path}: not a `lra bench models` CSV, missing column(s) {', '.join(missing)}")
        if "compile_mode" not in frame.columns:  # the mode is then in the provenance file
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
    # a compiled row without a recorded mode ran in torch.compile's default mode
    mode = df["compile_mode"].map(lambda m: "" if is_missing(m) else str(m).strip())
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


def mode_text(compiled: bool, compile_mode: str) -> str:
    """eager; compiled (torch.compile's default mode); compiled, CUDA graphs (reduce-overhead); or e.g.
    compiled (max-autotune)."""
    if not compiled:
        return "eager"
    if compile_mode in ("", "default"):
        return "compiled"
    if compile_mode == "reduce-overhead":
        return "compiled, CUDA graphs (reduce-overhead)"
    return f"compiled ({compile_mode})"
