"""Fit versus generalisation of short Pathfinder runs: a Markdown table and a figure.

Reads what `scripts/h200/pathfinder_probe.sh` brings back — per run `<NAME>.log` (its last lines
name the run record), `result_<attention>_<run id>.json` and, where present, the Lightning
`metrics_<NAME>.csv` with the training loss and accuracy — and shows, per run, how well it fits its
training images against its validation accuracy. Training accuracy is measured on training batches
with dropout on (Lightning's `train/acc`), averaged over the last 10 % of the logged steps.

    python scripts/pathfinder_fit_report.py results/pathfinder/probe results/pathfinder/full \
        --out results/pathfinder/fit_vs_val
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

RECORD_LINE = re.compile(r"record: .*/([^/]+)/result\.json")
# a run interrupted at a call's deadline prints no record line, but its first line names the run
TRAINING_LINE = re.compile(r"^training \S+/\S+ (\S+) on ", re.MULTILINE)


def _runs(folder: Path):
    """(name, record, metrics or None) for every `<NAME>.log` in the folder that names its run (its
    record line, or for a run interrupted at a deadline its `training ... <run id> on` line)."""
    for log in sorted(folder.glob("*.log")):
        text = log.read_text(encoding="utf-8", errors="replace")
        ids = RECORD_LINE.findall(text) or TRAINING_LINE.findall(text)
        if not ids:
            continue  # lane and data logs
        records = sorted(folder.glob(f"result_*_{ids[-1]}.json"))
        if not records:
            raise SystemExit(f"{log}: names run {ids[-1]}, but {folder} has no result_*_{ids[-1]}.json")
        metrics = folder / f"metrics_{log.stem}.csv"
        yield log.stem, json.loads(records[0].read_text()), (pd.read_csv(metrics) if metrics.exists() else None)


def _percent(value):
    return None if value is None else round(100 * value, 1)


def summarise(folders: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, curves = [], []
    for folder in folders:
        for name, rec, metrics in _runs(folder):
            cfg = rec["config"]
            train_acc = None
            if metrics is not None:
                train = metrics.dropna(subset=["train/acc"])
                tail = train[train["step"] >= 0.9 * train["step"].max()]
                train_acc = 100 * tail["train/acc"].mean()
                curves.append(train.assign(run=name, kind="train (dropout on)", acc=100 * train["train/acc"])
                              [["run", "kind", "step", "acc"]])
            val = pd.DataFrame(rec["val_acc_curve"])
            curves.append(val.assign(run=name, kind="validation", acc=100 * val["val_acc"])[["run", "kind", "step", "acc"]])
            batch = cfg["train"]["batch_size"]
            n_train = cfg["data"]["limit_train"]
            rows.append({
                "run": name,
                "difficulty": cfg["data"].get("difficulty") or "hard",
                "train images": n_train,
                "batch": batch,
                "lr": cfg["optim"]["lr"],
                "steps": rec["steps"],
                "epochs": round(rec["steps"] * batch / n_train, 1),
                "ms/step": round(rec["step_time_ms"], 1),
                "train acc % (last 10 %)": None if train_acc is None else round(train_acc, 1),
                "best val %": _percent(rec.get("best_val_acc")),
                "test %": _percent(rec.get("test_acc")),   # none for a run interrupted before its test
            })
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def plot(curves: pd.DataFrame, out: Path) -> None:
    sns.set_theme(style="whitegrid", context="paper")
    runs = sorted(curves["run"].unique())
    cols = min(len(runs), 5)   # at most five panels per row, so that many runs stay readable
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.6 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs):
        part = curves[curves["run"] == run].copy()
        train = part["kind"] != "validation"
        # training batches are noisy: a rolling mean over 20 logged steps
        part.loc[train, "acc"] = part.loc[train, "acc"].rolling(20, min_periods=1).mean()
        sns.lineplot(data=part, x="step", y="acc", hue="kind", ax=ax, linewidth=1.0,
                     hue_order=["train (dropout on)", "validation"], legend=ax is axes[0][0])
        ax.axhline(50, color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(run.replace("_", " "), fontsize=7)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("accuracy %")
    if axes[0][0].get_legend() is not None:
        axes[0][0].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=200)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="figure path without suffix (PNG and PDF)")
    args = parser.parse_args()
    table, curves = summarise(args.folders)
    if table.empty:
        raise SystemExit(f"no runs with a record found in {', '.join(map(str, args.folders))}")
    print(table.to_markdown(index=False))
    if args.out is not None:
        plot(curves, args.out)
        print(f"\nfigure: {args.out}.png / .pdf")


if __name__ == "__main__":
    main()
