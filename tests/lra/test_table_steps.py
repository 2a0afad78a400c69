"""`lra table steps`: the model-step benchmark's compact view, batch and mode x length."""
from __future__ import annotations

import io

import pandas as pd

from lra import table
from tests.lra.test_table_record import run_cli


def bench_csv(path, regime, tokens, compiled, cells):
    """A `lra bench models` CSV: cells = {(attention, N): ms or "oom"}."""
    rows = [dict(attention=a, seq_len=n, batch_size=tokens // n, tokens_per_batch=tokens, regime=regime,
                 compile=compiled, compile_mode="default" if compiled else "",
                 ms_per_step=float("nan") if ms == "oom" else ms, tokens_per_s=1.0, peak_mem_gb=1.0,
                 status="oom" if ms == "oom" else "ok")
            for (a, n), ms in cells.items()]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_one_row_per_batch_and_mode_with_each_attentions_step_time(tmp_path):
    paper = bench_csv(tmp_path / "paper.csv", "paper", 262144, True,
                      {("sdpa", 1024): 7.0, ("flash", 1024): 6.0, ("flash_sparse", 1024): 6.5,
                       ("sdpa", 4096): 16.0, ("flash", 4096): 15.0, ("flash_sparse", 4096): 6.4,
                       ("softmax", 4096): "oom"})
    small = bench_csv(tmp_path / "small.csv", "small", 32768, False,
                      {("sdpa", 1024): 7.3, ("flash", 1024): 8.4})
    summary = table.steps_summary(table.load_bench([paper, small]), baseline="sdpa")
    shown = table.steps_sections(summary, baseline="sdpa")[0].table.set_index("batch (tokens per step), mode")
    assert list(shown.index) == ["Pathfinder (256K), compiled", "small (32K), eager"]
    assert list(shown.columns) == ["1K", "4K"]
    # softmax / sdpa / flash / flash_sparse in the table's order, the fastest bold, flash over sdpa in brackets
    assert shown.loc["Pathfinder (256K), compiled", "1K"] == "– / 7.00 / **6.00** / 6.50 (1.17×)"
    assert shown.loc["Pathfinder (256K), compiled", "4K"] == "OOM / 16.00 / 15.00 / **6.40** (1.07×)"
    assert shown.loc["small (32K), eager", "1K"] == "– / **7.30** / 8.40 / – (0.87×)"
    assert shown.loc["small (32K), eager", "4K"] == "–"
    assert set(summary.columns) == set(table.STEPS_COLUMNS)


def test_two_files_of_the_same_batch_and_mode_stay_apart(tmp_path):
    ours = bench_csv(tmp_path / "small_eager.csv", "small", 32768, False, {("sdpa", 1024): 7.3, ("flash", 1024): 8.4})
    user = bench_csv(tmp_path / "user_eager.csv", "small", 32768, False, {("sdpa", 1024): 5.0, ("flash", 1024): 4.0})
    summary = table.steps_summary(table.load_bench([ours, user]), baseline="sdpa")
    shown = table.steps_sections(summary, baseline="sdpa")[0].table.set_index("batch (tokens per step), mode")
    assert shown.loc["small (32K), eager (small_eager)", "1K"] == "**7.30** / 8.40 (0.87×)"
    assert shown.loc["small (32K), eager (user_eager)", "1K"] == "5.00 / **4.00** (1.25×)"


def test_cli_renders_the_steps_table_from_bench_csvs(tmp_path, capsys):
    paper = bench_csv(tmp_path / "paper.csv", "paper", 262144, True,
                      {("sdpa", 1024): 7.0, ("flash", 1024): 6.0, ("softmax", 1024): 12.0})
    assert run_cli("steps", "--bench", paper, "--attentions", "sdpa", "flash", "--baseline", "sdpa") == 0
    out = capsys.readouterr().out
    assert out.startswith("## Model step") and "| 7.00 / **6.00** (1.17×)" in out and "12.00" not in out
    assert run_cli("steps", "--bench", paper, "--format", "csv") == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(frame.columns) == table.STEPS_COLUMNS and len(frame) == 3
