"""`lra bench kernels` bookkeeping that runs without a GPU: arguments, FLOPs, Markdown, summary."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from lra.bench import kernel_options
from lra.bench import kernels as bench
from lra.commands.parser import Parser


def _parser():
    parser = Parser(prog="lra bench kernels")
    kernel_options.add_arguments(parser)
    return parser


def test_arguments_parse_lengths_and_names():
    args = _parser().parse_args(["--seq-lens", "1k", "4096", "--impls", "ours", "flex", "--passes", "fwd"])
    assert args.seq_lens == [1024, 4096] and args.impls == ["ours", "flex"] and args.passes == ["fwd"]
    for bad in (["--impls", "ours", "nope"], ["--seq-lens", "1k,4k"], ["--impls"]):
        with pytest.raises(SystemExit):
            _parser().parse_args(bad)
    args = _parser().parse_args(["--impls", "none", "--approx-attentions", "none"])
    assert kernel_options.wanted(args.impls) == [] and kernel_options.wanted(args.approx_attentions) == []


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


def test_summary_gives_ranges_over_lengths_per_head_dim_and_pass():
    rows = []
    for n, ours, cudnn in ((1024, 1.0, 0.9), (4096, 2.0, 2.4)):
        for impl, ms in (("ours", ours), ("sdpa_cudnn", cudnn)):
            rows.append(dict(impl=impl, **{"pass": "fwd"}, seq_len=n, head_dim=32, batch=4, heads=64, dtype="bf16",
                             pattern="dense", density=1.0, ms=ms, tflops=100 / ms, extra_mem_gb=0.1, status="ok",
                             note=""))
    md = bench.render_markdown(pd.DataFrame(rows, columns=bench.COLUMNS), {"device": "TestGPU", "settings": {}})
    assert "## Summary: ranges over N = 1K–4K" in md
    # ours 100 and 50 TFLOP/s; ours vs cuDNN 0.90x at 1K and 1.20x at 4K
    assert "| 32 | fwd | 50–100 | 0.90×–1.20× |" in md


def test_cells_whose_forward_backward_exceeds_its_passes_are_listed_as_host_bound():
    """A cell whose fwd_bwd takes well over fwd + bwd (the GPU waited for the host: an eager call's
    launch cost above the kernels' time) is listed under its own heading; one within the margin, or
    without all three passes, is not."""
    rows = []
    for impl, pattern, n, times in (("ours_sparse", "local", 4096, (0.18, 0.52, 0.99)),    # 1.41x: host-bound
                                    ("flex_sparse", "local", 4096, (0.23, 0.62, 0.90)),    # 1.06x: within
                                    ("ours", "dense", 1024, (0.26, 0.80, None))):          # no fwd_bwd
        for p, ms in zip(("fwd", "bwd", "fwd_bwd"), times):
            if ms is not None:
                rows.append(dict(impl=impl, **{"pass": p}, seq_len=n, head_dim=128, batch=4, heads=16, dtype="bf16",
                                 pattern=pattern, density=0.1, ms=ms, tflops=1.0, extra_mem_gb=0.1, status="ok",
                                 note=""))
    df = pd.DataFrame(rows, columns=bench.COLUMNS)
    slow = bench.host_bound_cells(df)
    assert slow[["impl", "pattern", "seq_len"]].values.tolist() == [["ours_sparse", "local", 4096]]
    assert slow["excess"].iloc[0] == pytest.approx(0.99 / 0.70)
    md = bench.render_markdown(df, {"device": "TestGPU", "settings": {}})
    assert "takes over 1.15 x (fwd + bwd)" in md
    assert "| ours_sparse | local | 128 | 4K | 0.180 | 0.520 | 0.990 | 1.41 |" in md
    assert "| flex_sparse | local |" not in md
    only_fwd = df[df["pass"] == "fwd"]
    assert bench.host_bound_cells(only_fwd).empty and "takes over" not in bench.render_markdown(only_fwd, {})


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

    assert kernel_options.SPARSE_LAYOUTS == layouts.BENCHMARK_LAYOUTS


def test_causal_block_sparse_flops_count_the_blocks_on_and_below_the_diagonal():
    import torch
    from kernels import layouts

    # BigBird's random blocks are not symmetric: half the density is not what a causal kernel computes
    layout = layouts.benchmark_layout("bigbird", 64)
    assert not bool((layout == layout.T).all())
    nb = layout.shape[0]
    below = sum(int(layout[i, j]) for i in range(nb) for j in range(i))
    diagonal = sum(int(layout[i, i]) for i in range(nb))
    computed = (below + diagonal / 2) / nb**2  # fraction of the non-causal dense FLOPs
    density = bench.sparse_flop_density(layout, True)
    assert bench._flops(1, 1, 8192, 64, "fwd", True, density) == pytest.approx(4 * 8192**2 * 64 * computed)
    assert density != pytest.approx(layouts.density(layout), rel=1e-3)
    assert bench.sparse_flop_density(layout, False) == pytest.approx(layouts.density(layout))
    local = layouts.benchmark_layout("local", 32)  # symmetric with a full diagonal: exactly the density
    assert bench.sparse_flop_density(local, True) == pytest.approx(layouts.density(local))
    assert bench.sparse_flop_density(torch.stack([layout, layout]), True) == pytest.approx(density)


@pytest.fixture
def fake_gpu(monkeypatch):
    """`bench.run` on a CPU machine: CUDA claimed, the timing replaced by a recorder (the bookkeeping is real)."""
    import torch

    import lra.provenance

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(lra.provenance, "device_name", lambda: "TestGPU")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: None)
    calls = []
    fail = {}

    def fake_measure(forward, shape, pass_name, dtype, warmup, rep, seed, cuda_graph=False):
        B, H, N, d = shape
        calls.append((N, pass_name) + (("graph",) if cuda_graph else ()))
        if (N, pass_name) in fail:
            raise fail[(N, pass_name)]
        return 1.0, 0.1

    monkeypatch.setattr(bench, "_measure", fake_measure)
    return calls, fail


def _dense_args(tmp_path, *extra):
    return _parser().parse_args(["--out", str(tmp_path), "--name", "k", "--seq-lens", "1k", "2k", "4k", "--head-dims", "64",
                                 "--impls", "ours", "--passes", "fwd", "--sparse-layouts", "none", "--approx-attentions", "none",
                                 *extra])


def test_resume_measures_errors_again_and_refuses_other_settings(tmp_path, fake_gpu):
    import torch

    calls, fail = fake_gpu
    fail[(2048, "fwd")] = RuntimeError("triton compilation failed")
    fail[(4096, "fwd")] = torch.cuda.OutOfMemoryError("CUDA out of memory")
    assert bench.run(_dense_args(tmp_path)) == 0
    assert pd.read_csv(tmp_path / "k.csv")["status"].tolist() == ["ok", "error", "oom"]
    calls.clear()
    fail.clear()
    # the error cell is measured again; the finished (ok, oom) ones are not
    assert bench.run(_dense_args(tmp_path, "--resume")) == 0
    assert calls == [(2048, "fwd")]
    df = pd.read_csv(tmp_path / "k.csv")
    assert sorted(zip(df["seq_len"], df["status"])) == [(1024, "ok"), (2048, "ok"), (4096, "oom")]
    meta = json.loads((tmp_path / "k.meta.json").read_text())
    assert meta["resumed_rows"] == 2 and len(meta["earlier_runs"]) == 1
    # a resumed run does not try longer lengths after an OOM recorded by the earlier run
    calls.clear()
    assert bench.run(_dense_args(tmp_path, "--resume", "--seq-lens", "1k", "2k", "4k", "8k")) == 0
    assert calls == []
    df = pd.read_csv(tmp_path / "k.csv").set_index("seq_len")
    assert df.loc[8192, "status"] == "oom" and "N=4096" in df.loc[8192, "note"]
    # a finished run resumed under a time budget is complete, not "incomplete"
    assert bench.run(_dense_args(tmp_path, "--resume", "--seq-lens", "1k", "2k", "4k", "8k", "--time-budget", "0")) == 0
    assert "incomplete" not in json.loads((tmp_path / "k.meta.json").read_text())
    # causal rows (or another dtype, B*N, ...) are not the cells of this file: refused, nothing rewritten
    before = (tmp_path / "k.csv").read_text()
    for other in (["--causal"], ["--dtype", "fp16"], ["--tokens", "32768"]):
        with pytest.raises(ValueError, match="measured with other settings"):
            bench.run(_dense_args(tmp_path, "--resume", *other))
    assert (tmp_path / "k.csv").read_text() == before and calls == []


def test_cuda_graph_timing_is_its_own_setting(tmp_path, fake_gpu):
    """--cuda-graph times fwd and fwd_bwd as graph replays, records bwd as unsupported (a retained
    graph's backward runs on its forward's stream, outside the capture), says so in the report, and
    is never mixed with eager timings: a file without the setting was timed eagerly, so resuming it
    with --cuda-graph is refused."""
    calls, _ = fake_gpu
    graph = tmp_path / "graph"
    assert bench.run(_dense_args(graph, "--cuda-graph", "--passes", "fwd", "bwd", "fwd_bwd")) == 0
    assert calls == [(n, p, "graph") for n in (1024, 2048, 4096) for p in ("fwd", "fwd_bwd")]
    df = pd.read_csv(graph / "k.csv")
    bwd = df[df["pass"] == "bwd"]
    assert len(bwd) == 3 and set(bwd["status"]) == {"unsupported"} and bwd["note"].str.contains("fwd_bwd").all()
    assert "do_bench_cudagraph" in (graph / "k.md").read_text()
    calls.clear()
    eager = tmp_path / "eager"
    assert bench.run(_dense_args(eager)) == 0
    assert calls == [(n, "fwd") for n in (1024, 2048, 4096)] and "(eager calls)" in (eager / "k.md").read_text()
    meta = json.loads((eager / "k.meta.json").read_text())
    del meta["settings"]["cuda_graph"]  # as a file written before the option existed
    (eager / "k.meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="cuda_graph"):
        bench.run(_dense_args(eager, "--resume", "--cuda-graph"))
    assert bench.run(_dense_args(eager, "--resume")) == 0


def test_merge_refuses_parts_measured_with_other_settings(tmp_path):
    def part(name, settings):
        report = bench.Report(tmp_path, name, {"device": "TestGPU", "settings": settings})
        row = dict(impl="ours", seq_len=1024, head_dim=64, batch=16, heads=32, dtype="bf16", pattern="dense",
                   density=1.0, ms=1.0, tflops=1.0, extra_mem_gb=0.1, status="ok", note="")
        row["pass"] = "fwd"
        report.add(**row)
        report.flush()
        return str(tmp_path / f"{name}.csv")

    plain = part("plain", {"dtype": "bf16", "causal": False, "tokens": 16384})
    causal = part("causal", {"dtype": "bf16", "causal": True, "tokens": 16384})
    with pytest.raises(ValueError, match="causal"):
        bench.merge_reports([plain, causal], str(tmp_path / "out"), "m")


def test_the_hopper_forward_is_benchmarked_on_request_only():
    assert "ours_hopper" not in _parser().parse_args([]).impls
    assert _parser().parse_args(["--impls", "ours", "ours_hopper"]).impls == ["ours", "ours_hopper"]


def test_hopper_cells_are_unsupported_with_dropout_and_off_hopper(monkeypatch):
    """`ours_hopper` has no dropout: those cells are recorded `unsupported` (with the reason), never
    as errors, and a GPU or Triton it was not built for says why."""
    import torch

    from lra.bench import kernels as bench

    with pytest.raises(bench.Unsupported, match="no dropout"):
        bench._hopper(causal=False, dropout=0.1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(bench.Unsupported, match="sm_90|Triton"):
        bench._hopper(causal=False)
    assert bench._classify(bench.Unsupported("ours_hopper: no dropout"))[0] == "unsupported"


def test_the_hopper_pingpong_forward_is_opt_in_and_unsupported_off_hopper(monkeypatch):
    """`ours_hopper_pp` (the Hopper kernels with the forward's ping-pong schedule) runs on request
    only; with dropout, off sm_90 or with a Triton it was not built for its cells are `unsupported`,
    under its own name."""
    import torch

    from lra.bench import kernels as bench

    assert "ours_hopper_pp" not in _parser().parse_args([]).impls
    assert _parser().parse_args(["--impls", "ours_hopper_pp"]).impls == ["ours_hopper_pp"]
    with pytest.raises(bench.Unsupported, match="ours_hopper_pp: no dropout"):
        bench._hopper(causal=False, dropout=0.1, pingpong=True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(bench.Unsupported, match="ours_hopper_pp: .*(sm_90|Triton)"):
        bench._hopper(causal=True, pingpong=True)


@pytest.mark.parametrize("impl,option", [("ours_hopper_ws", "backward_ws"), ("ours_hopper_1p", "backward_one_pass")])
def test_the_hopper_backward_forms_are_opt_in_and_run_with_the_pingpong_forward(monkeypatch, impl, option):
    """`ours_hopper_ws` (the ping-pong forward with the warp-specialised dK/dV backward) and
    `ours_hopper_1p` (with the one-pass backward) run on request only, call the Hopper kernels with
    the ping-pong forward and their backward form, and their cells are `unsupported` under their own
    name with dropout, off sm_90 or with a Triton they were not built for."""
    import sys
    import types

    import torch

    from lra.bench import kernels as bench

    assert impl not in _parser().parse_args([]).impls
    assert _parser().parse_args(["--impls", impl]).impls == [impl]
    with pytest.raises(bench.Unsupported, match=f"{impl}: no dropout"):
        bench._hopper(causal=False, dropout=0.1, pingpong=True, **{option: True})
    seen = []
    monkeypatch.setitem(sys.modules, "kernels.hopper_autograd", types.SimpleNamespace(
        hopper_flash_attention=lambda q, k, v, **kw: seen.append(kw) or "out"))
    monkeypatch.setattr("kernels.hopper_support.supported", lambda *a, **kw: (True, ""))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert bench._hopper(causal=True, pingpong=True, **{option: True})("q", "k", "v") == "out"
    assert seen == [dict(causal=True, pingpong=True, backward_warp_specialize=option == "backward_ws",
                         backward_one_pass=option == "backward_one_pass")]
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(bench.Unsupported, match=f"{impl}: .*(sm_90|Triton)"):
        bench._hopper(causal=True, pingpong=True, **{option: True})


def test_ours_portable_is_opt_in_and_runs_with_the_hopper_forward_switched_off():
    """`ours_portable` and `ours_sparse_portable` run on request only; each call is our attention call
    with the Hopper forward dispatch switched off, and the caller's setting comes back after it (also
    when the call raises)."""
    import kernels
    from lra.bench import kernels as bench

    args = _parser().parse_args([])
    assert "ours_portable" not in args.impls and args.sparse_impls == ["ours_sparse", "flex_sparse"]
    assert _parser().parse_args(["--impls", "ours_portable"]).impls == ["ours_portable"]
    assert _parser().parse_args(["--sparse-impls", "ours_sparse_portable"]).sparse_impls == ["ours_sparse_portable"]
    seen = []

    def attention(q, k, v):
        seen.append(kernels.kernel_settings()["hopper_forward"])
        if q == "raise":
            raise RuntimeError("boom")
        return "out"

    previous = kernels.use_hopper_forward(True)
    try:
        forward = bench._portable(attention)
        assert forward("q", "k", "v") == "out"
        with pytest.raises(RuntimeError, match="boom"):
            forward("raise", "k", "v")
        assert seen == [False, False]
        assert kernels.kernel_settings()["hopper_forward"] is True
    finally:
        kernels.use_hopper_forward(previous)


def test_block_sparse_report_shows_the_portable_forward_beside_ours_when_measured():
    def row(impl, ms):
        return dict(impl=impl, **{"pass": "fwd"}, seq_len=4096, head_dim=64, batch=4, heads=32, dtype="bf16",
                    pattern="local", density=0.1, ms=ms, tflops=1.0, extra_mem_gb=0.0, status="ok", note="")

    sparse = [row("ours_sparse", 0.2), row("flex_sparse", 0.4)]
    md = bench.render_markdown(pd.DataFrame(sparse, columns=bench.COLUMNS), {"settings": {}})
    assert "vs portable" not in md
    md = bench.render_markdown(pd.DataFrame(sparse + [row("ours_sparse_portable", 0.25)], columns=bench.COLUMNS),
                               {"settings": {}})
    line = next(x for x in md.splitlines() if x.startswith("| local | 4K | 64 | fwd |"))
    assert line.endswith("| 0.200 | 0.400 | 2.00x |  |  | 0.145 | 0.250 | 1.25x |")


def test_ours_one_pass_is_opt_in_and_measured_with_the_one_pass_backward_on(tmp_path, fake_gpu, monkeypatch):
    """`ours_one_pass` runs on request only; its cells (forward and backward alike) are measured with
    kernels.use_one_pass_backward(True), other cells without it, and the setting comes back after."""
    import kernels

    assert "ours_one_pass" not in _parser().parse_args([]).impls
    calls, _ = fake_gpu
    seen = []
    measure = bench._measure

    def recording(forward, shape, pass_name, *args, **kwargs):
        seen.append((pass_name, kernels.kernel_settings()["one_pass_backward"]))
        return measure(forward, shape, pass_name, *args, **kwargs)

    monkeypatch.setattr(bench, "_measure", recording)
    args = _dense_args(tmp_path, "--impls", "ours", "ours_one_pass", "--seq-lens", "1k", "--passes", "fwd", "bwd")
    assert bench.run(args) == 0
    assert seen == [("fwd", False), ("bwd", False), ("fwd", True), ("bwd", True)]
    assert kernels.kernel_settings()["one_pass_backward"] is False
    assert list(pd.read_csv(tmp_path / "k.csv")["impl"]) == ["ours", "ours", "ours_one_pass", "ours_one_pass"]
