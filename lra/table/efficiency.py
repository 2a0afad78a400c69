"""The efficiency tables: per setting, attention × sequence length — throughput, ratios to anchor
attentions measured in the same setting, peak memory, training time.

A *setting* is a training configuration from run records (task + preset) or a model-benchmark
configuration (file, batch regime, eager/compiled). Timings of runs that shared a GPU with other
runs, or that ran our Triton kernels through the CPU interpreter, are not speed measurements and are
left out (their peak memory, a per-process figure, stays).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lra import published as pub
from lra.table.aggregate import dedupe_seeds, first_error, worst_status
from lra.table.bench import load_bench_frame, mode_text
from lra.table.format import NO_VALUE, format_duration, format_rate, format_ratio, format_seq_len, int_or, is_missing
from lra.table.load import normalise_records
from lra.table.render import Section
from lra.table.scope import scope_line

EFFICIENCY_COLUMNS = ["kind", "setting", "task", "preset", "regime", "compile", "file", "attention", "label",
                      "variant", "seq_len", "data_id", "status", "n", "batch_size", "tokens_per_s", "samples_per_s",
                      "ms_per_step", "speedup", "speedup_sdpa", "speedup_eager", "peak_mem_gb", "wall_time_s",
                      "time_to_best_s", "shared", "note"]
_REGIME_ORDER = ("paper", "small")
_RUN_KEY = ["task", "preset", "attention", "variant", "seq_len", "data_id"]


def efficiency_summary(records: pd.DataFrame | None = None, bench: pd.DataFrame | None = None,
                       baseline: str = "softmax") -> pd.DataFrame:
    """Tidy efficiency table, one row per (setting, attention, variant, seq_len).

    Ratios of tokens/s at the same length: `speedup` over `baseline` in the same setting,
    `speedup_sdpa` over `sdpa` in the same setting, and (compiled benchmark settings) `speedup_eager`
    over the eager `baseline` of the same file and regime. Run-record cells are means over the
    completed timed seeds (load.py: alone on their GPU, not through the Triton interpreter).
    """
    parts = []
    df = normalise_records(records) if records is not None else pd.DataFrame()
    if not df.empty:
        parts.append(_run_rows(df))
    if bench is not None and not bench.empty:
        parts.append(_bench_rows(load_bench_frame(bench)))
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
    order = [(o, pub.attention_sort_key(a), v, int_or(n, -1))
             for o, a, v, n in zip(out["_order"], out["attention"], out["variant"], out["seq_len"])]
    out = out.iloc[sorted(range(len(out)), key=order.__getitem__)].reset_index(drop=True)
    return out.reindex(columns=EFFICIENCY_COLUMNS)


def _run_rows(df: pd.DataFrame) -> pd.DataFrame:
    df, _ = dedupe_seeds(df)
    many_presets = df["preset"].nunique() > 1
    data_count = df.groupby("task")["data_id"].nunique()
    rows = []
    for key, group in df.groupby(_RUN_KEY, dropna=False, sort=False):
        task, preset, attention, variant, seq_len, data_id = key
        done = group[group["status"] == "completed"]
        timed = done[done["timed"]]
        status = ("ok" if len(timed) else "interpreted" if done["interpreted"].any() else "shared" if len(done)
                  else worst_status(group["status"]))
        setting = (f"{pub.task_label(task)}: training runs" + (f", preset {preset or '?'}" if many_presets else "")
                   + (f", data {data_id}" if data_count[task] > 1 else ""))
        rows.append(dict(kind="runs", setting=setting, task=task, preset=preset, regime=None, compile=None,
                         file=None, attention=attention, variant=variant, seq_len=seq_len, data_id=data_id,
                         status=status, n=len(timed), tokens_per_s=timed["train_tokens_per_s"].mean(),
                         samples_per_s=timed["train_samples_per_s"].mean(), ms_per_step=timed["step_time_ms"].mean(),
                         peak_mem_gb=done["peak_mem_gb"].mean(), wall_time_s=timed["wall_time_s"].mean(),
                         time_to_best_s=timed["time_to_best_s"].mean(), shared=int((~done["solo"]).sum()),
                         note=first_error(group),
                         _order=(1, pub.task_sort_key(task), preset)))
    return pd.DataFrame(rows)


def _bench_rows(bench: pd.DataFrame) -> pd.DataFrame:
    files = list(dict.fromkeys(bench["file"]))
    rows = []
    # Later rows (a rerun in the same or a later file) replace earlier ones.
    latest = bench.drop_duplicates(["file", "regime", "compile", "attention", "seq_len"], keep="last")
    for _, r in latest.iterrows():
        setting = f"model benchmark: {r['regime']} batch, {mode_text(r['compile'], r['compile_mode'])}"
        if len(files) > 1:
            setting = f"{Path(str(r['file'])).stem} — {setting}"
        status = str(r["status"])
        ok = status == "ok"
        regime_rank = _REGIME_ORDER.index(r["regime"]) if r["regime"] in _REGIME_ORDER else len(_REGIME_ORDER)
        rows.append(dict(kind="bench", setting=setting, task=None, preset=None, regime=r["regime"],
                         compile=bool(r["compile"]), file=r["file"], attention=r["attention"], variant="",
                         seq_len=r["seq_len"], data_id="", status=status, n=1 if ok else 0,
                         batch_size=r["batch_size"], tokens_per_s=r["tokens_per_s"] if ok else np.nan,
                         samples_per_s=r["samples_per_s"] if ok else np.nan,
                         ms_per_step=r["ms_per_step"] if ok else np.nan,
                         peak_mem_gb=r["peak_mem_gb"] if ok else np.nan, wall_time_s=np.nan, time_to_best_s=np.nan,
                         shared=0,
                         note="" if is_missing(r["note"]) else str(r["note"]),
                         _order=(0, (files.index(r["file"]), ""), f"{regime_rank}{r['regime']}{int(r['compile'])}")))
    return pd.DataFrame(rows)


_STATUS_CELLS = {"oom": "OOM", "unsupported": "n/a", "error": "error", "failed": "failed", "running": "running",
                 "diverged": "diverged", "interrupted": "interrupted", "shared": "shared GPU",
                 "interpreted": "interpreter"}
# (row label, summary column, formatter); "{baseline}" is filled in.
_RUN_METRICS = (("tokens/s", "tokens_per_s", format_rate), ("vs {baseline}", "speedup", format_ratio),
                ("peak GB", "peak_mem_gb", lambda v: f"{v:.2f}"), ("train time", "wall_time_s", format_duration),
                ("time to best", "time_to_best_s", format_duration))
_BENCH_METRICS = (("ms/step", "ms_per_step", lambda v: f"{v:.2f}"), ("tokens/s", "tokens_per_s", format_rate),
                  ("vs {baseline}", "speedup", format_ratio), ("vs sdpa", "speedup_sdpa", format_ratio),
                  ("vs eager {baseline}", "speedup_eager", format_ratio), ("peak GB", "peak_mem_gb", lambda v: f"{v:.2f}"))


def efficiency_sections(summary: pd.DataFrame, baseline: str = "softmax", records=None) -> list[Section]:
    """One display table per setting: rows (attention, metric), columns sequence lengths; a setting of
    training runs is headed by what its `records` are (lra.table.scope)."""
    if summary.empty:
        return [Section("Efficiency", pd.DataFrame(), [
            "No run records or model-benchmark CSVs match (pass --runs-dir DIR and/or --bench FILE from `lra bench models`)."])]
    df = normalise_records(records) if records is not None else pd.DataFrame()
    sections = []
    for setting, group in summary.groupby("setting", sort=False):
        section = _setting_section(setting, group, baseline)
        if group["kind"].iloc[0] == "runs" and not df.empty:
            section.subtitle = scope_line(df[df["task"].isin(group["task"]) & df["preset"].isin(group["preset"])])
        sections.append(section)
    return sections


def _setting_section(setting: str, group: pd.DataFrame, baseline: str) -> Section:
    kind = group["kind"].iloc[0]
    metrics = [(label.format(baseline=baseline), column, fmt)
               for label, column, fmt in (_BENCH_METRICS if kind == "bench" else _RUN_METRICS)]
    # Ratio rows only where they exist (no SDPA row without an sdpa run, no eager ratio for eager rows).
    metrics = [m for m in metrics if m[1] == "speedup" or not m[1].startswith("speedup") or group[m[1]].notna().any()]
    if kind == "runs":
        metrics = [m for m in metrics if m[1] in ("tokens_per_s", "speedup", "peak_mem_gb")
                   or group[m[1]].notna().any()]
    lengths = sorted({int_or(n, -1) for n in group["seq_len"]})  # -1: length not recorded
    many_variants = group.groupby("attention")["variant"].nunique()
    rows = []
    for (attention, variant), cells in group.groupby(["attention", "variant"], sort=False):
        label = pub.attention_label(attention) + (f" ({variant})" if many_variants.get(attention, 0) > 1 else "")
        by_len = {int_or(r["seq_len"], -1): r for _, r in cells.iterrows()}
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
                    row[key] = fmt(value) if not is_missing(value) and np.isfinite(value) else NO_VALUE
            rows.append(row)
    notes = [f"vs X = tokens/s over attention X in the same setting at the same length "
             f"({baseline} = {pub.attention_label(baseline)}); {NO_VALUE} where X has no measurement there "
             "(e.g. it ran out of memory). OOM = out of memory; n/a = the attention cannot run that length here."]
    if kind == "runs":
        notes.append("Means over completed seeds; throughput excludes warm-up steps; peak GB = peak GPU memory.")
        shared = group[group["shared"] > 0]
        if not shared.empty:
            notes.append(f"Timings leave out the {int(shared['shared'].sum())} run(s) that shared their GPU with "
                         "other runs (record sharing.runs_per_gpu > 1); shared GPU = every run of that cell did.")
        if (group["status"] == "interpreted").any():
            notes.append("interpreter = every run of that cell ran our Triton kernels through the CPU interpreter: "
                         "its timings are not speed measurements and are left out.")
    else:
        batches = group.dropna(subset=["batch_size"])
        if not batches.empty:
            notes.append("Batch size per length: " + ", ".join(
                f"{format_seq_len(n)}: {int(b)}" for n, b in batches.groupby("seq_len")["batch_size"].first().items()))
    problems = group[(group["status"] != "ok") & (group["note"].fillna("").astype(str) != "")]
    for (label, status, note), rows_ in problems.groupby(["label", "status", "note"], sort=False):
        lengths_ = ", ".join(format_seq_len(n) for n in rows_["seq_len"])
        notes.append(f"{label} at {lengths_}: {status} — {note}")
    return Section(f"Efficiency — {setting}", pd.DataFrame(rows), notes)
