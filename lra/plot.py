"""Figures from run records and benchmark CSVs (seaborn, Agg backend), each saved as PNG and PDF.

- `accuracy_vs_throughput`: test accuracy vs training throughput per task, bubble area = peak memory
  (like the LRA paper's Figure 3);
- `efficiency_vs_length`: training throughput and peak memory vs sequence length per attention, log
  scales, one row per setting (model-benchmark regime / mode, or a task trained at several lengths);
  OOM drawn as a cross on the top edge;
- `kernel_tflops`: kernel TFLOP/s vs N per implementation, from `lra bench kernels` CSVs;
- `training_curves`: validation accuracy vs wall-clock time per attention, one figure per task;
- `accuracy_vs_speedup`: test accuracy vs training speed-up over the softmax Transformer per task, one
  point per attention (the table of record's cells), seed std as error bars;
- `validation_curves`: validation accuracy vs optimizer step per attention, mean over seeds with a
  ±1 std band, one figure per task.

Every function returns a `PlotResult`; absent data gives a result with `skipped` set, never an error.
A figure made from run records carries, under its panels, what those runs are: presets, devices and
whether our Triton kernels ran through Triton's CPU interpreter (lra.table.scope); the speed figures
leave out runs whose timings are not speed measurements and say so there.
Sizes are for a paper page: 7 in wide (two columns), fonts from seaborn's `paper` context.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")  # files only; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from lra import published as pub  # noqa: E402
from lra import table  # noqa: E402

PAGE_WIDTH_IN = 7.0
PNG_DPI = 200
LABEL_CHARS = 48  # longest legend label of a cell (variants with many differing settings are cut)


@dataclass
class PlotResult:
    name: str
    files: list[Path] = field(default_factory=list)
    skipped: str | None = None
    caption: str = ""  # the text under the panels: what the runs drawn are


def _caption(fig, runs: pd.DataFrame, *, speed: bool = False) -> str:
    """Write what `runs` (normalised records of the runs a figure draws from) are under the figure and
    return the text; `speed`: the figure plots timings, so interpreted runs are not drawn."""
    import textwrap

    text = table.scope_line(runs)
    if not text:
        return ""
    if speed and runs["interpreted"].any():
        text += " Runs through the interpreter are not drawn."
    fig.text(0.5, 0.0, textwrap.fill(text, 150), ha="center", va="top", fontsize="x-small", color="0.3")
    return text


def setup_style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0,
                  rc={"figure.dpi": 100, "savefig.bbox": "tight", "pdf.fonttype": 42, "legend.frameon": False})


def attention_palette(labels: Iterable[str]) -> dict[str, tuple]:
    """A fixed colour per attention, the same in every figure (paper order first)."""
    known = [pub.attention_label(a) for a in pub.ATTENTION_ORDER]
    labels = list(dict.fromkeys(labels))
    extra = sorted(label for label in labels if label not in known)
    base = sns.color_palette("colorblind", 10)
    # Indices into the colour-blind palette chosen so that no two known attentions look alike.
    picks = [0, 1, 2, 3, 4, 5, 9, 7, 8, 6]
    colours = [base[i] for i in picks] + sns.color_palette("husl", max(0, len(known) + len(extra) - len(picks)))
    mapping = {label: colours[i] for i, label in enumerate(known + extra)}
    return {label: mapping[label] for label in labels}


def _hue_order(labels: Iterable[str]) -> list[str]:
    known = [pub.attention_label(a) for a in pub.ATTENTION_ORDER]
    labels = set(labels)
    return [label for label in known if label in labels] + sorted(labels - set(known))


def save(fig, out_dir: str | Path, name: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    # no creation date in the PDF: the same data gives the same bytes, so regenerated figures diff clean
    for suffix, kwargs in ((".png", {"dpi": PNG_DPI}), (".pdf", {"metadata": {"CreationDate": None}})):
        path = out_dir / f"{name}{suffix}"
        tmp = path.with_name(f".{path.name}.tmp{suffix}")
        fig.savefig(tmp, **kwargs)
        tmp.replace(path)  # atomic: a reader never sees half a figure
        files.append(path)
    plt.close(fig)
    return files


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "plot"


def _plain_number(value: float, _pos=None) -> str:
    """A tick label without SI prefixes: 0.24, 1.5, 50 (for quantities in a unit of their own, e.g.
    GB, where an engineering label such as "240m" would read as milli-gigabytes)."""
    return f"{value:.3g}"


def _readable_log_axis(ax, which: str = "y", *, engineering: bool = True) -> None:
    """Log axis with engineering labels (2k, 5M) or, with ``engineering=False``, plain numbers (0.2,
    50); short spans also label the 2x and 5x ticks."""
    from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter

    def formatter():
        return EngFormatter(sep="") if engineering else FuncFormatter(_plain_number)

    axis = ax.yaxis if which == "y" else ax.xaxis
    low, high = ax.get_ylim() if which == "y" else ax.get_xlim()
    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(formatter())
    if low > 0 and np.log10(high / low) < 2.0:
        axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        axis.set_minor_formatter(formatter())
    else:
        axis.set_minor_formatter(NullFormatter())


def _log2_lengths(ax, lengths) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted({int(n) for n in lengths})
    ax.set_xticks(ticks)
    ax.set_xticklabels([table.format_seq_len(n) for n in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


# ----------------------------------------------------------------------------------- accuracy vs speed
def accuracy_vs_throughput(records: pd.DataFrame, out_dir: str | Path) -> PlotResult:
    result = PlotResult("accuracy_vs_throughput")
    done = table.normalise_records(records)
    done = done[(done["status"] == "completed") & done["test_acc"].notna() & done["train_tokens_per_s"].notna()]
    df = done[done["timed"].astype(bool)]
    if df.empty:
        result.skipped = ("no completed run records with test accuracy and training throughput measured alone "
                          "on their device and not through the Triton interpreter")
        return result
    points = (df.groupby(["task", "seq_len", "attention", "variant"], dropna=False)
              .agg(acc=("test_acc", "mean"), speed=("train_tokens_per_s", "mean"), mem=("peak_mem_gb", "mean"),
                   n=("test_acc", "size")).reset_index())
    points["acc"] *= 100.0
    points["Attention"] = points["attention"].map(pub.attention_label) + points["variant"].map(
        lambda v: f" ({v})" if v else "")
    multi_len = points.groupby("task")["seq_len"].nunique()
    points["Task"] = [pub.task_label(t) + (f" ({table.format_seq_len(n)})" if multi_len[t] > 1 else "")
                      for t, n in zip(points["task"], points["seq_len"])]
    points = points.sort_values("task", key=lambda s: s.map(pub.task_sort_key))
    has_mem = points["mem"].notna().any()
    if has_mem:
        points["Peak memory (GB)"] = points["mem"].round(2)
    facets = points["Task"].nunique()
    cols = min(3, facets)
    setup_style()
    grid = sns.relplot(
        data=points, x="speed", y="acc", hue="Attention", hue_order=_hue_order(points["Attention"]),
        palette=attention_palette(points["Attention"]), size="Peak memory (GB)" if has_mem else None,
        sizes=(30, 400) if has_mem else None, col="Task", col_wrap=cols if facets > 1 else None,
        height=PAGE_WIDTH_IN / cols / 1.25, aspect=1.1, alpha=0.75, edgecolor="black", linewidth=0.4,
        facet_kws={"sharex": False, "sharey": False})
    for ax in grid.axes.flat:
        ax.set_xscale("log")
        ax.margins(x=0.15, y=0.15)
        _readable_log_axis(ax, "x")
        ax.tick_params(axis="x", which="both", labelsize="small")
    grid.set_axis_labels("training tokens/s", "test accuracy (%)")
    grid.set_titles("{col_name}")
    grid.figure.suptitle("Accuracy vs training throughput (bubble area = peak memory)" if has_mem else
                         "Accuracy vs training throughput", y=1.02)
    result.caption = _caption(grid.figure, done[done["task"].isin(points["task"])], speed=True)
    result.files = save(grid.figure, out_dir, result.name)
    return result


# ----------------------------------------------------------------------------------- efficiency vs N
def efficiency_vs_length(records: pd.DataFrame | None, bench: pd.DataFrame | None, out_dir: str | Path,
                         baseline: str = "softmax") -> list[PlotResult]:
    """One figure per source kind (model benchmark, training runs), rows = settings with ≥ 2 lengths."""
    summary = table.efficiency_summary(records, bench, baseline=baseline)
    results = []
    for kind, name in (("bench", "efficiency_bench"), ("runs", "efficiency_runs")):
        result = PlotResult(name)
        part = summary[summary["kind"] == kind]
        measured = part[((part["status"] == "ok") & part["tokens_per_s"].notna()) | (part["status"] == "oom")]
        lengths = measured.groupby("setting")["seq_len"].nunique()
        part = part[part["setting"].isin(lengths[lengths >= 2].index)]
        if part.empty:
            what = "model-benchmark CSV (--bench)" if kind == "bench" else "training runs"
            result.skipped = f"no {what} with at least two sequence lengths in one setting"
            results.append(result)
            continue
        runs = table.normalise_records(records) if kind == "runs" else pd.DataFrame()
        if not runs.empty:
            runs = runs[runs["task"].isin(part["task"]) & runs["preset"].isin(part["preset"])]
        result.files, result.caption = _efficiency_figure(part, out_dir, name, runs)
        results.append(result)
    return results


def _efficiency_figure(part: pd.DataFrame, out_dir, name: str, runs: pd.DataFrame) -> tuple[list[Path], str]:
    """The figure of `part` (efficiency_summary rows) and its caption (`runs`: the records behind it)."""
    from matplotlib.lines import Line2D

    part = part.copy()
    part["Attention"] = part["label"] + part["variant"].map(lambda v: f" ({v})" if v else "")
    settings = list(dict.fromkeys(part["setting"]))
    metrics = (("tokens_per_s", "throughput (tokens/s)"), ("peak_mem_gb", "peak memory (GB)"))
    shown = part[part["status"].isin(["ok", "oom"])]
    palette = attention_palette(part["Attention"])
    order = _hue_order(shown["Attention"])
    setup_style()
    fig, axes = plt.subplots(len(settings), len(metrics), figsize=(PAGE_WIDTH_IN, 2.3 * len(settings) + 0.4),
                             squeeze=False)
    for row, setting in enumerate(settings):
        data = part[part["setting"] == setting]
        ok = data[data["status"] == "ok"].astype({"seq_len": float})
        for col, (metric, ylabel) in enumerate(metrics):
            ax = axes[row][col]
            values = ok.dropna(subset=[metric])
            if not values.empty:
                sns.lineplot(data=values, x="seq_len", y=metric, hue="Attention", hue_order=order, palette=palette,
                             marker="o", ax=ax, legend=False, errorbar=None)
                ax.set_yscale("log")
                _readable_log_axis(ax, "y", engineering=metric != "peak_mem_gb")
            else:
                ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center")
            for _, cell in data[data["status"] == "oom"].iterrows():
                # A cross on the top edge: the step did not fit in memory at this length.
                ax.plot(float(cell["seq_len"]), 0.97, marker="x", color=palette[cell["Attention"]], markersize=6,
                        mew=1.5, transform=ax.get_xaxis_transform(), clip_on=False, linestyle="none")
            _log2_lengths(ax, data["seq_len"].dropna())
            ax.set_xlabel("sequence length" if row == len(settings) - 1 else "")
            ax.set_ylabel(ylabel)
            ax.set_title(setting if col == 0 else "", loc="left", fontsize="medium")
    handles = [Line2D([], [], color=palette[label], marker="o", label=label) for label in order]
    if (part["status"] == "oom").any():
        handles.append(Line2D([], [], color="black", marker="x", linestyle="none", mew=1.5, label="out of memory"))
    fig.tight_layout(rect=(0, 0.07 if len(handles) > 4 else 0.04, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), bbox_to_anchor=(0.5, 0.0))
    caption = _caption(fig, runs, speed=True)
    return save(fig, out_dir, name), caption


# ----------------------------------------------------------------------------------- kernels
def kernel_tflops(kernels: pd.DataFrame, out_dir: str | Path) -> PlotResult:
    result = PlotResult("kernel_tflops")
    if kernels is None or kernels.empty:
        result.skipped = "no kernel benchmark CSV (--kernels FILE from `lra bench kernels`)"
        return result
    df = kernels.copy()
    df["tflops"] = pd.to_numeric(df["tflops"], errors="coerce")
    df["seq_len"] = pd.to_numeric(df["seq_len"], errors="coerce")
    df = df[(df["status"].astype(str) == "ok") & df["tflops"].notna() & df["seq_len"].notna()]
    if df.empty:
        result.skipped = "the kernel benchmark CSV has no successful (status ok) rows"
        return result
    parts = [f"d={int(d)}" if pd.notna(d) else "d=?" for d in df["head_dim"]]
    if "dtype" in df.columns and df["dtype"].nunique() > 1:
        parts = [f"{p}, {t}" for p, t in zip(parts, df["dtype"])]
    df["config"] = parts
    style = None
    if "pattern" in df.columns and df["pattern"].fillna("dense").nunique() > 1:
        df["pattern"] = df["pattern"].fillna("dense").astype(str)
        style = "pattern"
    passes = [p for p in ("fwd", "bwd", "fwd_bwd") if p in set(df["pass"])] + \
        sorted(set(df["pass"]) - {"fwd", "bwd", "fwd_bwd"})
    df = df.sort_values(["head_dim", "seq_len"], kind="stable")
    configs = list(dict.fromkeys(df["config"]))  # by head dim, numerically (d=32 before d=128)
    setup_style()
    grid = sns.relplot(
        data=df, x="seq_len", y="tflops", hue="impl", style=style, col="pass", col_order=passes,
        row="config" if len(configs) > 1 else None, row_order=configs if len(configs) > 1 else None,
        kind="line", marker="o", errorbar=None, height=PAGE_WIDTH_IN / max(len(passes), 1) / 1.2, aspect=1.2,
        facet_kws={"sharey": False})
    for ax in grid.axes.flat:
        _log2_lengths(ax, df["seq_len"])
    grid.set_axis_labels("sequence length", "TFLOP/s")
    grid.set_titles("{col_name}, {row_name}" if len(configs) > 1 else "{col_name}")
    result.files = save(grid.figure, out_dir, result.name)
    return result


# ----------------------------------------------------------------------------------- training curves
def curve_points(records: pd.DataFrame, *, train: bool = False) -> pd.DataFrame:
    """Long frame of accuracy curves: one row per (run, evaluation), column `curve` = "validation".
    With ``train``, also the training accuracy each run logged (Lightning's `train/acc` in the run's
    logs/*/metrics.csv; training batches, dropout on; rolling mean of 20 logged steps), its steps
    placed on the wall clock by interpolating the run's validation (step, wall_s) points."""
    columns = ["task", "seq_len", "attention", "variant", "preset", "run", "status", "curve", "wall_s", "val_acc"]
    df = table.normalise_records(records)
    if df.empty or "val_acc_curve" not in df.columns:
        return pd.DataFrame(columns=columns)
    rows = []
    for _, record in df.iterrows():
        curve = record["val_acc_curve"]
        if not isinstance(curve, list):
            continue
        base = {"task": record["task"], "seq_len": record["seq_len"], "attention": record["attention"],
                "variant": record["variant"], "preset": record.get("preset"), "run": record["path"],
                "status": record["status"]}
        points = [p for p in curve if isinstance(p, dict) and p.get("val_acc") is not None
                  and p.get("wall_s") is not None]
        rows += [{**base, "curve": "validation", "wall_s": float(p["wall_s"]), "val_acc": float(p["val_acc"]) * 100.0}
                 for p in points]
        if train:
            rows += [{**base, "curve": "training", "wall_s": wall, "val_acc": acc}
                     for wall, acc in _training_accuracy(Path(record["path"]).parent, points)]
    return pd.DataFrame(rows, columns=columns)


def _training_accuracy(run_dir: Path, val_points: list[dict]) -> list[tuple[float, float]]:
    """(wall_s, training accuracy %) of a run from its Lightning metrics (all logger versions: a
    resumed run writes a new one); [] without metrics or without two validation points to place the
    steps on the wall clock."""
    steps = [float(p["step"]) for p in val_points if p.get("step") is not None]
    walls = [float(p["wall_s"]) for p in val_points if p.get("step") is not None]
    frames = []
    for path in sorted(run_dir.glob("logs/*/metrics.csv")):
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError, pd.errors.ParserError):
            continue
        if {"step", "train/acc"} <= set(frame.columns):
            frames.append(frame[["step", "train/acc"]].dropna())
    if not frames or len(steps) < 2:
        return []
    logged = pd.concat(frames).drop_duplicates("step", keep="last").sort_values("step")
    # Lightning's CSV rows carry the step index (completed optimizer steps - 1: its validation rows
    # read 499 where the record's curve says 500); count completed steps, like the record
    logged = logged.assign(step=logged["step"] + 1)
    logged = logged[(logged["step"] >= min(steps)) & (logged["step"] <= max(steps))]
    if len(logged) < 2:  # one point draws no line
        return []
    accuracy = logged["train/acc"].rolling(20, min_periods=1).mean() * 100.0
    wall = np.interp(logged["step"].to_numpy(float), steps, walls)
    return list(zip(wall.tolist(), accuracy.tolist()))


def training_curves(records: pd.DataFrame, out_dir: str | Path, tasks: Iterable[str] | None = None,
                    train: bool = False) -> list[PlotResult]:
    """One figure per task: validation accuracy vs wall-clock time, one line per run; with ``train``
    a second row of panels shows the training accuracy (memorisation shows as training accuracy
    rising while validation stays flat)."""
    points = curve_points(records, train=train)
    if train and not (points["curve"] == "training").any():
        print("lra plot curves --train: no run has two or more logged training-accuracy points within its "
              "validation range (logs/*/metrics.csv); plotting validation only", file=sys.stderr)
    if tasks:
        points = points[points["task"].isin(list(tasks))]
    if points.empty:
        return [PlotResult("training_curves", skipped="no run records with a validation-accuracy curve")]
    runs = table.normalise_records(records)
    results = []
    for task in sorted(points["task"].unique(), key=pub.task_sort_key):
        data = points[points["task"] == task].copy()
        data["Attention"] = data["attention"].map(pub.attention_label) + data["variant"].map(
            lambda v: f" ({v})" if v else "")
        span = data["wall_s"].max()
        unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 180 else ("s", 1.0)
        data["wall"] = data["wall_s"] / scale
        lengths = sorted(data["seq_len"].dropna().unique())
        # runs of one attention under several presets (e.g. Path-X fine-tuned vs from scratch) differ by line style
        data["Preset"] = data["preset"].fillna("-").astype(str)
        several_presets = data["Preset"].nunique() > 1
        two_rows = data["curve"].nunique() > 1
        if two_rows:
            data["curve"] = data["curve"].map({"validation": "validation", "training": "training (dropout on)"})
        setup_style()
        grid = sns.relplot(
            data=data, x="wall", y="val_acc", hue="Attention", hue_order=_hue_order(data["Attention"]),
            style="Preset" if several_presets else None,
            palette=attention_palette(data["Attention"]), units="run", estimator=None, kind="line",
            col="seq_len" if len(lengths) > 1 else None, row="curve" if two_rows else None,
            row_order=["validation", "training (dropout on)"] if two_rows else None,
            height=2.6, aspect=1.5 if len(lengths) <= 1 else 1.1, alpha=0.85, linewidth=1.2)
        grid.set_axis_labels(f"wall-clock training time ({unit})", "accuracy (%)" if two_rows else "validation accuracy (%)")
        if two_rows:
            grid.set_titles("N = {col_name}, {row_name}" if len(lengths) > 1 else "{row_name}")
        elif len(lengths) > 1:
            grid.set_titles("N = {col_name}")
        what = "accuracy" if two_rows else "validation accuracy"
        grid.figure.suptitle(f"{pub.task_label(task)}: {what} vs time (one line per run)", y=1.03)
        result = PlotResult(f"curves_{slug(task)}")
        result.caption = _caption(grid.figure, runs[runs["path"].isin(data["run"])])
        result.files = save(grid.figure, out_dir, result.name)
        results.append(result)
    return results


# ----------------------------------------------------------------------------------- table of record
def _cell_labels(frame: pd.DataFrame) -> pd.Series:
    """Attention label, plus the variant and data id where one task has several of them."""
    labels = []
    for _, row in frame.iterrows():
        same = frame[(frame["task"] == row["task"]) & (frame["attention"] == row["attention"])]
        extras = [row["variant"]] if row["variant"] else []
        if same["data_id"].nunique() > 1:
            extras.append(f"data {row['data_id']}")
        if same["preset"].nunique() > 1:
            extras.append(f"preset {row['preset']}")
        labels.append(pub.attention_label(row["attention"]) + (f" ({', '.join(extras)})" if extras else ""))
    return pd.Series(_shorten(labels), index=frame.index, dtype=object)


def _shorten(labels: list[str], limit: int = LABEL_CHARS) -> list[str]:
    """Legend labels cut to `limit` characters; cut labels get a number so that two cells never share one."""
    numbers: dict[str, int] = {}
    out = []
    for label in labels:
        if len(label) > limit:
            number = numbers.setdefault(label, len(numbers) + 1)
            label = f"{label[:limit - 6].rstrip(' ,(')}… #{number}"
        out.append(label)
    return out


def accuracy_vs_speedup(records: pd.DataFrame, out_dir: str | Path, *, baseline: str = "softmax",
                        speed: pd.DataFrame | None = None) -> PlotResult:
    """Per task a panel of test accuracy vs training speed-up over `baseline`, one point per cell of
    the table of record (attention, variant, data), error bars = sample std over seeds; the dashed
    lines mark the baseline's speed and chance accuracy."""
    result = PlotResult("accuracy_vs_speedup")
    summary = table.record_summary(records, None, baseline=baseline, speed=speed)
    points = summary[summary["ran"].astype(bool) & (summary["n"] > 0)].copy()
    points = points[np.isfinite(points["speedup"].astype(float))]
    if points.empty:
        result.skipped = (f"no completed runs with a speed-up over {baseline} (needs runs alone on their GPU, "
                          "not through the Triton interpreter, next to such a baseline run, or --speed FILE "
                          "from `lra bench models`)")
        return result
    points["Attention"] = _cell_labels(points)
    multi_len = points.groupby("task")["seq_len"].nunique()
    points["Task"] = [pub.task_label(t) + (f" ({table.format_seq_len(n)})" if multi_len[t] > 1 else "")
                      for t, n in zip(points["task"], points["seq_len"])]
    points = points.sort_values("task", key=lambda s: s.map(pub.task_sort_key), kind="stable")
    facets = list(dict.fromkeys(points["Task"]))
    cols = min(3, len(facets))
    rows = -(-len(facets) // cols)
    palette = attention_palette(points["Attention"])
    setup_style()
    fig, axes = plt.subplots(rows, cols, figsize=(PAGE_WIDTH_IN, 2.4 * rows + 0.5), squeeze=False)
    for ax in axes.flat[len(facets):]:
        ax.set_visible(False)
    for ax, facet in zip(axes.flat, facets):
        data = points[points["Task"] == facet]
        for _, cell in data.iterrows():
            ax.errorbar(cell["speedup"], cell["mean"], yerr=cell["std"] if np.isfinite(cell["std"]) else None,
                        fmt="o", color=palette[cell["Attention"]], ecolor=palette[cell["Attention"]], capsize=3,
                        markeredgecolor="black", markeredgewidth=0.4, markersize=6)
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8)
        chance = data["chance_pct"].dropna()
        if len(chance):
            ax.axhline(chance.iloc[0], color="grey", linestyle=":", linewidth=0.8)
        ax.margins(x=0.2, y=0.2)
        ax.set_title(facet)
        ax.set_xlabel(f"speed-up over {pub.attention_label(baseline)}")
        ax.set_ylabel("test accuracy (%)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=palette[label], marker="o", linestyle="none", label=label)
               for label in _hue_order(points["Attention"])]
    _legend_below(fig, handles, [h.get_label() for h in handles])
    runs = table.normalise_records(records)
    result.caption = _caption(fig, runs[runs["task"].isin(points["task"])], speed=True)
    result.files = save(fig, out_dir, result.name)
    return result


def _legend_below(fig, handles, labels) -> None:
    """A legend under the panels, the figure made taller by its rows (2 columns for long labels)."""
    ncol = min(2 if max(map(len, labels)) > 24 else 4, len(labels))
    rows = -(-len(labels) // ncol)
    width, height = fig.get_size_inches()
    legend_in = 0.2 * rows + 0.25
    fig.set_size_inches(width, height + legend_in)
    fig.tight_layout(rect=(0, legend_in / (height + legend_in), 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0))


def validation_points(records: pd.DataFrame) -> pd.DataFrame:
    """Long frame of validation curves of completed runs: one row per (run, evaluation), with the cell
    (attention, variant, preset, data) the run is pooled in and its `Attention` label."""
    columns = ["task", "seq_len", "attention", "variant", "preset", "data_id", "run", "seed", "step", "val_acc"]
    df = table.normalise_records(records)
    if df.empty:
        return pd.DataFrame(columns=[*columns, "Attention"])
    rows = []
    for _, record in df[df["status"] == "completed"].iterrows():
        curve = record["val_acc_curve"] if isinstance(record["val_acc_curve"], list) else []
        base = {c: record[c] for c in ("task", "seq_len", "attention", "variant", "preset", "data_id", "seed")}
        rows += [{**base, "run": record["path"], "step": float(p["step"]), "val_acc": float(p["val_acc"]) * 100.0}
                 for p in curve if isinstance(p, dict) and p.get("val_acc") is not None and p.get("step") is not None]
    points = pd.DataFrame(rows, columns=columns)
    points["Attention"] = _cell_labels(points) if not points.empty else pd.Series(dtype=object)
    return points


def validation_bands(points: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and number of seeds of the validation accuracy per (task, seq_len, Attention,
    step) of `validation_points`; std is NaN where one seed reached that step."""
    keys = ["task", "seq_len", "Attention", "step"]
    if points.empty:
        return pd.DataFrame(columns=[*keys, "mean", "std", "n"])
    return (points.groupby(keys, dropna=False)["val_acc"].agg(mean="mean", std="std", n="size").reset_index()
            .sort_values(keys, kind="stable"))


def validation_curves(records: pd.DataFrame, out_dir: str | Path, tasks: Iterable[str] | None = None
                      ) -> list[PlotResult]:
    """One figure per task: validation accuracy vs optimizer step, one line per attention (mean over
    seeds) with a ±1 std band where several seeds reached a step; one panel per sequence length."""
    points = validation_points(records)
    if tasks:
        points = points[points["task"].isin(list(tasks))]
    if points.empty:
        return [PlotResult("validation_curves", skipped="no completed run records with a validation-accuracy curve")]
    bands = validation_bands(points)
    runs = table.normalise_records(records)
    results = []
    for task in sorted(bands["task"].unique(), key=pub.task_sort_key):
        data = bands[bands["task"] == task]
        lengths = list(dict.fromkeys(sorted(data["seq_len"].dropna().unique()))) or [pd.NA]
        order = _hue_order(data["Attention"])
        palette = attention_palette(data["Attention"])
        setup_style()
        fig, axes = plt.subplots(1, len(lengths), figsize=(min(PAGE_WIDTH_IN, 3.6 * len(lengths) + 1.0), 2.8),
                                 squeeze=False, sharey=True)
        chance = 100.0 / _num_classes(task)
        for ax, n in zip(axes[0], lengths):
            panel = data[data["seq_len"] == n] if not pd.isna(n) else data
            for label in order:
                line = panel[panel["Attention"] == label]
                if line.empty:
                    continue
                ax.plot(line["step"], line["mean"], color=palette[label], linewidth=1.2, label=label,
                        marker="o" if len(line) < 2 else None, markersize=4)
                spread = line["std"].fillna(0.0)
                if (line["n"] > 1).any():
                    ax.fill_between(line["step"], line["mean"] - spread, line["mean"] + spread,
                                    color=palette[label], alpha=0.2, linewidth=0)
            if np.isfinite(chance):
                ax.axhline(chance, color="grey", linestyle=":", linewidth=0.8)
            ax.set_xlabel("optimizer step")
            if len(lengths) > 1:
                ax.set_title(f"N = {table.format_seq_len(n)}")
        axes[0][0].set_ylabel("validation accuracy (%)")
        seeds = points[points["task"] == task].groupby(["seq_len", "Attention"], dropna=False)["run"].nunique()
        low, high = int(seeds.min()), int(seeds.max())
        spread = f"mean over {low}" + (f"–{high}" if high != low else "") + f" seed{'s' if high > 1 else ''}"
        fig.suptitle(f"{pub.task_label(task)}: validation accuracy ({spread}"
                     + (", band = ±1 std" if high > 1 else "") + "; dotted = chance)")
        legend = {}
        for ax in axes[0]:
            legend.update(zip(*reversed(ax.get_legend_handles_labels())))
        _legend_below(fig, list(legend.values()), list(legend))
        result = PlotResult(f"val_curves_{slug(task)}")
        result.caption = _caption(fig, runs[runs["path"].isin(points.loc[points["task"] == task, "run"])])
        result.files = save(fig, out_dir, result.name)
        results.append(result)
    return results


def _num_classes(task: str) -> float:
    from tasks.registry import TASKS

    return TASKS[task].num_classes if task in TASKS else np.nan
