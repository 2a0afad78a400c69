"""`lra bench kernels` CSVs: loading, the dense kernels' headline -- per head dim and pass, the
range over N of our kernel's TFLOP/s and of its speed-up over each anchor (cells where both ran) --
and the block-sparse one -- per head dim, pass and layout, the range over N of our block-sparse
kernel's speed-up over FlexAttention with the identical block mask and of its time against our
dense kernel's (the bound 1.25 x density + 2 %). The benchmark's own report opens with the dense
headline (`lra.bench.kernels`); `lra table kernels` renders both, for one pass or several, as the
README shows them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from lra.bench.kernel_options import PASSES as KERNEL_PASSES
from lra.table.bench import read_csv_file
from lra.table.render import Section

KERNEL_COLUMNS = ("impl", "pass", "seq_len", "head_dim", "tflops", "status")
# the anchors of the dense comparison, in the report's order (lra.bench.kernels times them)
KERNEL_ANCHORS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "softmax")
_K = 1024


def sparse_time_bound(density):
    """The block-sparse kernel's time target as a fraction of the dense kernel's at the same N, d and
    pass: 1.25 x density + 0.02 (a float or a pandas Series)."""
    return 1.25 * density + 0.02


def load_kernels(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate `lra bench kernels` CSVs; a file of the wrong kind is one clear error naming it."""
    frames = []
    for path in map(Path, paths):
        frame = read_csv_file(path, "write one with `lra bench kernels`")
        missing = [c for c in KERNEL_COLUMNS if c not in frame.columns]
        if missing:
            hint = ""
            if {"ms_per_step", "regime"} <= set(frame.columns):
                hint = " (it looks like a `lra bench models` CSV: pass it with --bench)"
            elif "attention" in frame.columns:
                hint = " (it has an attention column but no kernel timings: `lra bench kernels` writes those)"
            raise ValueError(f"{path}: not a `lra bench kernels` CSV, missing column(s) {', '.join(missing)}{hint}")
        frame["file"] = str(path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*KERNEL_COLUMNS, "file"])


def kernel_ranges(kernels: pd.DataFrame, passes: Iterable[str] = KERNEL_PASSES) -> tuple[pd.DataFrame, str]:
    """(table, span): per (head dim, pass) of the dense cells, the range over N of ours' TFLOP/s and
    of ours' speed-up (anchor ms / ours ms) over each anchor that ran; span names the lengths, e.g.
    "1K–16K". Empty without `ours` cells."""
    ok = kernels[(_pattern(kernels) == "dense") & (kernels["status"] == "ok")]
    if "file" in ok.columns:
        # a file without any anchor (a block-sparse run's own dense reference) would count `ours` twice
        ok = ok[ok.groupby("file")["impl"].transform(lambda impls: bool(set(impls) & set(KERNEL_ANCHORS)))]
    if ok.empty or "ours" not in set(ok["impl"]):
        return pd.DataFrame(), ""
    ms = ok.pivot_table(index=["head_dim", "pass", "seq_len"], columns="impl", values="ms")
    tf = ok.pivot_table(index=["head_dim", "pass", "seq_len"], columns="impl", values="tflops")
    anchors = [a for a in KERNEL_ANCHORS if a in ms]
    lengths = sorted(ok["seq_len"].unique())
    span = _span(lengths)
    rows = []
    present = set(ms.index.droplevel("seq_len"))
    for d in ok["head_dim"].drop_duplicates():
        for p in (p for p in KERNEL_PASSES if p in set(passes)):
            if (d, p) not in present:
                continue
            cell = ms.loc[(d, p)]
            row = {"d": str(d), "pass": p, "ours TFLOP/s": _range(tf.loc[(d, p), "ours"], "{:.0f}")}
            row.update({f"vs {a}": _range(cell[a] / cell["ours"], "{:.2f}×") for a in anchors})
            rows.append(row)
    return pd.DataFrame(rows), span


def block_sparse_ranges(kernels: pd.DataFrame, passes: Iterable[str] = KERNEL_PASSES) -> tuple[pd.DataFrame, str]:
    """(table, span): per (head dim, pass, layout) of the block-sparse cells, the range over N of
    ours' speed-up over FlexAttention with the identical block mask (flex_sparse ms / ours_sparse ms)
    and of ours' time against our dense kernel's of the same file, N, d and pass, as a fraction of
    the bound 1.25 x density + 0.02 (at most 1 = within it), with how many cells at N >= 4K keep
    the bound. Empty without `ours_sparse` cells."""
    ok = kernels[kernels["status"] == "ok"]
    sparse = ok[~_pattern(ok).isin(["dense", "approx"])]
    if sparse.empty or "ours_sparse" not in set(sparse["impl"]):
        return pd.DataFrame(), ""
    key = ["file", "head_dim", "pass", "seq_len"] if "file" in ok.columns else ["head_dim", "pass", "seq_len"]
    cells = sparse.pivot_table(index=[*key, "pattern", "density"], columns="impl", values="ms").reset_index()
    dense = ok[(_pattern(ok) == "dense") & (ok["impl"] == "ours")][[*key, "ms"]].rename(columns={"ms": "dense_ms"})
    cells = cells.merge(dense, on=key, how="left")
    cells["vs_flex"] = cells["flex_sparse"] / cells["ours_sparse"] if "flex_sparse" in cells else float("nan")
    cells["of_bound"] = cells["ours_sparse"] / cells["dense_ms"] / sparse_time_bound(cells["density"])
    rows = []
    for d in cells["head_dim"].drop_duplicates():
        for p in (p for p in KERNEL_PASSES if p in set(passes)):
            for layout in cells["pattern"].drop_duplicates():
                cell = cells[(cells["head_dim"] == d) & (cells["pass"] == p) & (cells["pattern"] == layout)]
                if cell.empty:
                    continue
                long = cell[(cell["seq_len"] >= 4 * _K) & cell["of_bound"].notna()]
                rows.append({"d": str(d), "pass": p, "layout": str(layout),
                             "vs flex_sparse": _range(cell["vs_flex"], "{:.2f}×"),
                             "time ÷ bound": _range(cell["of_bound"], "{:.2f}"),
                             "within bound, N ≥ 4K": f"{int((long['of_bound'] <= 1).sum())} of {len(long)}"})
    return pd.DataFrame(rows), _span(sorted(cells["seq_len"].unique()))


def kernel_sections(kernels: pd.DataFrame, passes: Iterable[str] = KERNEL_PASSES) -> list[Section]:
    """The dense and block-sparse kernels' headlines for display (`lra table kernels`): a section
    for each kind of cell the CSVs hold."""
    sections = []
    table, span = kernel_ranges(kernels, passes)
    if not table.empty:
        notes = [f"Ranges over N = {span}: ours' TFLOP/s and ours' speed-up over each anchor (anchor ms ÷ ours ms, "
                 "same run, same inputs; cells where both ran). The benchmark's report (its `.md`) has every cell."]
        sections.append(Section(f"Kernels: ranges over N = {span}", table, notes))
    table, span = block_sparse_ranges(kernels, passes)
    if not table.empty:
        notes = [f"Ranges over N = {span}: ours' speed-up over FlexAttention with the identical block mask "
                 "(flex ms ÷ ours ms) and ours' time against our dense kernel's as a fraction of the bound "
                 "1.25 × density + 2 % (at most 1: within it). The benchmark's report (its `.md`) has every cell."]
        sections.append(Section(f"Block-sparse kernels: ranges over N = {span}", table, notes))
    if not sections:
        return [Section("Kernels", pd.DataFrame(), ["No `ours` or `ours_sparse` cells in the --kernels CSVs."])]
    return sections


def _pattern(kernels: pd.DataFrame) -> pd.Series:
    return kernels["pattern"] if "pattern" in kernels.columns else pd.Series("dense", index=kernels.index)


def _span(lengths) -> str:
    """"1K–16K" (or "1000–4000" for lengths that are not multiples of 1,024)."""
    if not len(lengths):
        return ""
    first, last = lengths[0], lengths[-1]
    return f"{first // _K}K–{last // _K}K" if first % _K == 0 and last % _K == 0 else f"{first}–{last}"


def _range(values: pd.Series, fmt: str) -> str:
    values = values.dropna()
    return "" if values.empty else f"{fmt.format(values.min())}–{fmt.format(values.max())}"
