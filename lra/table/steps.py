"""The model-step headline: the training step's time per batch regime and mode (rows) and sequence
length (columns) from `lra bench models` CSVs (scripts/model_step_grid.sh), one figure per attention
in each cell, the fastest in bold, and in brackets the speed-up of our dense kernel (`flash`) over the
baseline -- the compact view the README shows. `lra table efficiency` holds the full detail
(throughput, every ratio, memory).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lra import published as pub
from lra.table.bench import mode_text
from lra.table.format import NO_VALUE, format_ratio, format_seq_len
from lra.table.render import Section

FOCUS = "flash"  # the attention whose speed-up each cell states: our dense kernel
STEPS_COLUMNS = ["setting", "regime", "tokens_per_batch", "compile", "compile_mode", "seq_len", "attention",
                 "ms_per_step", "status", "focus_speedup"]
_REGIME_LABELS = {"paper": "Pathfinder", "small": "small"}
_SETTING = ["file", "regime", "tokens_per_batch", "compile", "compile_mode"]


def _setting_label(regime: str, tokens, compiled: bool, compile_mode: str) -> str:
    size = f" ({int(tokens) // 1024}K)" if np.isfinite(tokens) else ""
    return f"{_REGIME_LABELS.get(regime, regime)}{size}, {mode_text(compiled, compile_mode)}"


def steps_summary(bench: pd.DataFrame, baseline: str = "sdpa") -> pd.DataFrame:
    """One row per (benchmark file, batch regime, mode, length, attention) of the benchmark rows (the
    last measurement of a cell counts), with the step time, the status and, on the cell's rows, `flash`'s speed-up over
    `baseline` (NaN where either lacks a measurement)."""
    if bench.empty:
        return pd.DataFrame(columns=STEPS_COLUMNS)
    df = bench.drop_duplicates([*_SETTING, "seq_len", "attention"], keep="last").copy()
    df["setting"] = [_setting_label(r, t, c, m) for r, t, c, m in
                     zip(df["regime"], df["tokens_per_batch"], df["compile"], df["compile_mode"])]
    # two files of the same batch and mode (e.g. another model's benchmark) stay apart, named by file
    files = df.groupby("setting")["file"].nunique()
    df["setting"] = [f"{s} ({Path(f).stem})" if files[s] > 1 else s for s, f in zip(df["setting"], df["file"])]
    ok = df[df["status"] == "ok"].set_index(["setting", "seq_len", "attention"])["ms_per_step"]

    def speedup(setting, seq_len) -> float:
        try:
            return float(ok.loc[(setting, seq_len, baseline)] / ok.loc[(setting, seq_len, FOCUS)])
        except KeyError:
            return np.nan

    df["focus_speedup"] = [speedup(s, n) for s, n in zip(df["setting"], df["seq_len"])]
    return df[STEPS_COLUMNS].reset_index(drop=True)


def _cell(rows: pd.DataFrame, attentions: list[str], with_ratio: bool) -> str:
    by_attention = rows.set_index("attention")
    ok = by_attention[by_attention["status"] == "ok"]["ms_per_step"]
    fastest = ok.idxmin() if len(ok) else None
    parts = []
    for attention in attentions:
        if attention not in by_attention.index:
            parts.append(NO_VALUE)
        elif (status := str(by_attention.loc[attention, "status"])) != "ok":
            parts.append("OOM" if status == "oom" else status)
        else:
            text = f"{by_attention.loc[attention, 'ms_per_step']:.2f}"
            parts.append(f"**{text}**" if attention == fastest and len(ok) > 1 else text)
    text = " / ".join(parts)
    ratio = rows["focus_speedup"].iloc[0]
    return text + (f" ({format_ratio(ratio)})" if with_ratio and np.isfinite(ratio) else "")


def steps_sections(summary: pd.DataFrame, baseline: str = "sdpa") -> list[Section]:
    """The headline for display: settings down, lengths across, `a / b / c (speed-up)` per cell."""
    if summary.empty:
        return [Section("Model step", pd.DataFrame(), ["No `lra bench models` rows (--bench FILE)."])]
    attentions = sorted(summary["attention"].unique(), key=pub.attention_sort_key)
    lengths = sorted(summary["seq_len"].dropna().unique())
    with_ratio = FOCUS in attentions and baseline in attentions and baseline != FOCUS
    rows = []
    for setting, group in summary.groupby("setting", sort=False):
        row = {"batch (tokens per step), mode": setting}
        for n in lengths:
            cell = group[group["seq_len"] == n]
            row[format_seq_len(n)] = _cell(cell, attentions, with_ratio) if len(cell) else NO_VALUE
        rows.append(row)
    names = " / ".join(pub.attention_label(a) for a in attentions)
    notes = [f"ms per training step: {names}; the fastest in bold"
             + (f"; in brackets the speed-up of {pub.attention_label(FOCUS)} over "
                f"{pub.attention_label(baseline)}" if with_ratio else "")
             + ". OOM = out of memory; – = not measured. The full figures (throughput, every ratio, peak "
             "memory): `lra table efficiency` on the same CSVs."]
    return [Section("Model step", pd.DataFrame(rows), notes)]
