"""`lra bench kernels` bookkeeping that runs without a GPU: arguments, FLOPs, Markdown, summary."""
from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest

from lra.bench import kernels as bench


def _parser():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser


def test_arguments_parse_lengths_and_names():
    args = _parser().parse_args(["--seq-lens", "1k,4096", "--impls", "ours,flex", "--passes", "fwd"])
    assert args.seq_lens == [1024, 4096] and args.impls == ["ours", "flex"] and args.passes == ["fwd"]
    with pytest.raises(SystemExit):
        _parser().parse_args(["--impls", "ours,nope"])


def test_flops_follow_the_flashattention_convention():
    assert bench._flops(2, 16, 1024, 64, "fwd", False) == 4 * 2 * 16 * 1024**2 * 64
    assert bench._flops(2, 16, 1024, 64, "fwd_bwd", True, 0.5) == 4 * 2 * 16 * 1024**2 * 64 * 3.5 * 0.5 * 0.5


def test_markdown_and_summary_show_speedups_and_failures():
    rows = []
    for impl, ms in (("ours", 1.0), ("sdpa_flash", 1.5), ("sdpa_cudnn", 0.8)):
        rows.append(dict(impl=impl, **{"pass": "fwd"}, seq_len=4096, head_dim=64, batch=4, heads=32, dtype="bf16",
                         pattern="dense", density=1.0, ms=ms, tflops=100 / ms, extra_mem_gb=0.1, status="ok", note=""))
    rows.append(dict(impl="softmax", **{"pass": "fwd"}, seq_len=4096, head_dim=64, batch=4, heads=32, dtype="bf16",
                     pattern="dense", density=1.0, ms=None, tflops=None, extra_mem_gb=None, status="oom", note="OOM"))
    rows.append(dict(impl="ours_sparse", **{"pass": "fwd"}, seq_len=4096, head_dim=64, batch=4, heads=32,
                     dtype="bf16", pattern="bigbird", density=0.25, ms=0.3, tflops=80, extra_mem_gb=0.1, status="ok",
                     note=""))
    df = pd.DataFrame(rows, columns=bench.COLUMNS)
    md = bench.render_markdown(df, {"device": "TestGPU", "settings": {"dtype": "bf16"}})
    assert "1.50x" in md and "0.80x" in md and "oom" in md and "| bigbird | 4K | 64 | fwd | 0.250 |" in md
    assert "0.300" in md and "sparse/dense" in md
    summary = bench.summary_table(df)
    assert "xsdpa_flash" in summary and "1.5" in summary
    assert "dropout" not in md
    md = bench.render_markdown(df, {"device": "TestGPU", "settings": {"dtype": "bf16", "dropout": 0.1},
                                    "dropout_philox_rounds": 7, "dropout_backward": "fused"})
    assert "attention dropout 0.1 (our kernels: Philox rounds 7, fused backward)" in md


def test_dropout_option_reaches_the_implementations():
    args = _parser().parse_args(["--dropout", "0.1"])
    assert args.dropout == 0.1 and _parser().parse_args([]).dropout == 0.0
    for bad in ("1", "-0.1"):
        with pytest.raises(SystemExit):
            _parser().parse_args(["--dropout", bad])
    import torch

    q = k = v = torch.randn(1, 1, 64, 8)
    torch.manual_seed(0)
    dropped = bench._softmax(False, 0.5)(q, k, v)
    assert not torch.allclose(dropped, bench._softmax(False)(q, k, v))


def test_run_without_cuda_says_why(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the benchmark would really run")
    assert bench.run(_parser().parse_args([])) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_cells_skipped_after_an_oom_become_oom_rows(tmp_path):
    report = bench.Report(tmp_path, "k", {"device": "TestGPU", "settings": {"dtype": "bf16"}})
    row = dict(impl="softmax", seq_len=65536, head_dim=64, batch=1, heads=32, dtype="bf16", pattern="dense",
               density=1.0, ms=None, tflops=None, extra_mem_gb=None, note="")
    row["pass"] = "fwd"
    report.add(**bench.not_run_after_oom(row, 32768))
    report.flush()
    df = pd.read_csv(tmp_path / "k.csv")
    assert df.loc[0, "status"] == "oom" and df.loc[0, "note"] == "not run: out of memory at N=32768"
    assert "oom" in (tmp_path / "k.md").read_text()


def test_merge_reports_keeps_every_cell_once_and_each_parts_provenance(tmp_path):
    def part(name, rows, rev):
        d = tmp_path / "parts"
        report = bench.Report(d, name, {"device": "TestGPU", "git_rev": rev, "date": f"2026-11-30T1{rev}",
                                        "command": f"run {name}", "settings": {"dtype": "bf16"},
                                        "sparse_tiles": {"32": [128, 64, 4, 3, 0]}, "tiles_env": f"tuned_{name}.json"})
        for impl, n, ms in rows:
            row = dict(impl=impl, seq_len=n, head_dim=64, batch=1, heads=32, dtype="bf16", pattern="dense",
                       density=1.0, ms=ms, tflops=1.0 / ms, extra_mem_gb=0.1, status="ok", note="")
            row["pass"] = "fwd"
            report.add(**row)
        report.flush()
        return str(d / f"{name}.csv")

    a = part("a", [("ours", 1024, 1.0), ("sdpa_flash", 1024, 1.5)], "1")
    b = part("b", [("ours", 1024, 0.9), ("ours", 2048, 3.0)], "2")
    frame = bench.merge_reports([a, b], str(tmp_path / "out"), "merged")
    assert len(frame) == 3
    assert frame.loc[(frame.impl == "ours") & (frame.seq_len == 1024), "ms"].item() == 0.9  # later part wins
    meta = json.loads((tmp_path / "out" / "merged.meta.json").read_text())
    assert [p["command"] for p in meta["merged_from"]] == ["run a", "run b"] and meta["git_rev"] == "1, 2"
    # the tiles each part ran with (block-sparse table, a tuning file loaded via $LRA_KERNEL_TILES) travel along
    assert [p["tiles_env"] for p in meta["merged_from"]] == ["tuned_a.json", "tuned_b.json"]
    assert meta["merged_from"][0]["sparse_tiles"] == {"32": [128, 64, 4, 3, 0]}
    assert "TestGPU" in (tmp_path / "out" / "merged.md").read_text()
    # extending a merged report with a new part keeps the original runs' provenance, not the merge's
    c = part("c", [("ours", 4096, 9.0)], "3")
    frame = bench.merge_reports([str(tmp_path / "out" / "merged.csv"), c], str(tmp_path / "out"), "merged")
    assert len(frame) == 4
    meta = json.loads((tmp_path / "out" / "merged.meta.json").read_text())
    assert [p["command"] for p in meta["merged_from"]] == ["run a", "run b", "run c"]
    assert meta["git_rev"] == "1, 2, 3"
    with pytest.raises(ValueError, match="not a `lra bench kernels` CSV"):
        (tmp_path / "bad.csv").write_text("x,y\n1,2\n")
        bench.merge_reports([str(tmp_path / "bad.csv")], str(tmp_path / "out"), "m2")


def test_sparse_layout_names_are_the_kernels_benchmark_layouts():
    from kernels import layouts

    assert bench.SPARSE_LAYOUTS == layouts.BENCHMARK_LAYOUTS
