"""`lra bench models`: the grid it plans, a real tiny CPU run, OOM handling and resume."""
import json
import math

import pandas as pd
import pytest
import torch

from lra import table
from lra.bench import model_options, models
from lra.commands.parser import Parser

TINY = ["--seq-lens", "64", "128", "--tokens-per-batch", "512", "--steps", "3", "--warmup", "1"]


def parse(*argv):
    parser = Parser(prog="lra bench models")
    model_options.add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


REGISTERED = ["flash", "flash_sparse", "softmax", "sdpa", "performer", "linformer", "bigbird"]


def test_default_plan():
    cells, settings = models.plan(parse(), REGISTERED, "cuda")
    by_attention = {}
    for cell in cells:
        by_attention.setdefault(cell.attention, set()).add(cell.seq_len)
    base = {1024, 2048, 4096, 8192, 16384}
    assert by_attention["softmax"] == base and by_attention["sdpa"] == base
    for name in ("flash", "flash_sparse", "performer", "linformer", "bigbird"):
        assert by_attention[name] == base | {32768, 65536}
    assert settings["modes"] == ["eager", "compiled"] and settings["options"] == {"sdpa": {"backend": "cudnn"}}
    batch = {(c.regime, c.seq_len): c.batch_size for c in cells}
    # Constant tokens per batch: 256 x 1K in the paper regime, 32K in the small one (at least one sequence).
    assert batch[("paper", 1024)] == 256 and batch[("paper", 16384)] == 16 and batch[("paper", 65536)] == 4
    assert batch[("small", 1024)] == 32 and batch[("small", 16384)] == 2 and batch[("small", 65536)] == 1
    assert len(cells) == 2 * 2 * (2 * 5 + 5 * 7)


def test_plan_options_and_errors():
    cells, settings = models.plan(parse(*TINY, "--attentions", "softmax", "flash"), REGISTERED, "cpu")
    assert {c.seq_len for c in cells} == {64, 128}  # explicit lengths: no 32K/64K extras
    assert settings["modes"] == ["eager"] and {c.regime for c in cells} == {"custom"}
    _, settings = models.plan(parse("--options", "sdpa.backend=math", "--attentions", "sdpa"), REGISTERED, "cuda")
    assert settings["options"] == {"sdpa": {"backend": "math"}}
    with pytest.raises(ValueError, match="unknown attention 'nope'"):
        models.plan(parse("--attentions", "nope"), REGISTERED, "cpu")
    with pytest.raises(ValueError, match="expected ATTENTION.OPTION=VALUE"):
        models.plan(parse("--options", "backend=math"), REGISTERED, "cpu")
    with pytest.raises(SystemExit):
        parse("--seq-lens", "1M")
    assert parse("--seq-lens", "1K", "2048").seq_lens == [1024, 2048]
    _, settings = models.plan(parse("--attention-dropout", "0"), REGISTERED, "cpu")
    assert settings["attention_dropout"] == 0.0 and models.paper_model_config(0.0).attention_dropout == 0.0
    with pytest.raises(ValueError, match="--attention-dropout must be in"):
        models.plan(parse("--attention-dropout", "1.5"), REGISTERED, "cpu")


@pytest.fixture
def one_thread():
    """The suite runs two workers on two cores: a second intra-op thread per worker only adds contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA GPU")
def test_without_a_gpu_it_asks_for_device_cpu_and_a_small_grid_before_any_work(tmp_path, capsys):
    out = tmp_path / "bench" / "models.csv"
    assert models.run(parse("--out", out)) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU here" in err and "--device cpu --seq-lens 256 --regimes small" in err
    assert not out.parent.exists()   # nothing written


def test_tiny_cpu_run_writes_valid_records(tmp_path, monkeypatch, one_thread):
    out = tmp_path / "bench" / "models.csv"
    attentions = ["softmax", "sdpa", "performer", "bigbird"]
    assert models.run(parse(*TINY, "--attentions", *attentions, "--device", "cpu", "--out", out)) == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == models.CSV_COLUMNS
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["dropout_backward"] in ("fused", "split") and meta["dropout_philox_rounds"] in (7, 10)
    assert meta["compile_op"] in ("custom_op", "triton_op")
    assert len(frame) == len(attentions) * 2
    ok = frame[frame["status"] == "ok"]
    assert set(ok["attention"]) == {"softmax", "sdpa", "performer"}
    assert (ok["ms_per_step"] > 0).all() and (ok["tokens_per_s"] > 0).all()
    assert (ok["ms_p10"] <= ok["ms_per_step"]).all() and (ok["ms_per_step"] <= ok["ms_p90"]).all()
    assert list(ok[ok["attention"] == "softmax"]["batch_size"]) == [8, 4]
    assert (frame["tokens_per_batch"] == 512).all() and not frame["compile"].any()
    assert frame["compile_mode"].isna().all()  # eager rows: empty
    expected_tokens = ok["batch_size"] * ok["seq_len"] / ok["ms_per_step"] * 1e3
    assert ok["tokens_per_s"].to_numpy() == pytest.approx(expected_tokens.to_numpy(), rel=1e-4)
    # BigBird needs more blocks than N=64/128 hold: recorded as unsupported with the reason, not fatal.
    unsupported = frame[frame["status"] == "unsupported"]
    assert set(unsupported["attention"]) == {"bigbird"}
    assert unsupported["note"].str.len().gt(10).all()

    meta = json.loads(out.with_name("models.meta.json").read_text())
    assert {"command", "device", "versions", "git_rev", "date", "settings", "model"} <= set(meta)
    assert meta["model"]["dim"] == 64 and meta["model"]["mlp_dim"] == 128 and meta["model"]["num_heads"] == 2
    report = out.with_name("models.md").read_text()
    assert "## Efficiency — model benchmark: custom batch, eager" in report and "n/a" in report

    # The table command reads what the benchmark wrote.
    summary = table.efficiency_summary(None, table.load_bench([out]))
    assert summary[summary["attention"] == "softmax"]["speedup"].tolist() == pytest.approx([1.0, 1.0])

    # Resume: every cell is done, so nothing is measured again and the rows stay.
    monkeypatch.setattr(models, "run_cell", lambda *a, **k: pytest.fail("resume re-measured a finished cell"))
    assert models.run(parse(*TINY, "--attentions", *attentions, "--device", "cpu", "--out", out, "--resume")) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out), frame)


def test_oom_is_recorded_and_longer_lengths_skipped(tmp_path, monkeypatch):
    calls = []

    def fake_measure(cell, **kwargs):
        calls.append(cell.seq_len)
        if cell.seq_len >= 128:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return {"ms_per_step": 2.0, "samples_per_s": 4000.0, "tokens_per_s": 256000.0, "peak_mem_gb": float("nan")}

    monkeypatch.setattr(models, "measure", fake_measure)
    out = tmp_path / "oom.csv"
    args = parse("--attentions", "softmax", "--seq-lens", "64", "128", "256", "--tokens-per-batch", "512",
                 "--device", "cpu", "--out", out)
    assert models.run(args) == 0
    frame = pd.read_csv(out).set_index("seq_len")
    assert calls == [64, 128]  # 256 is not tried after 128 ran out of memory
    assert frame.loc[64, "status"] == "ok" and frame.loc[128, "status"] == "oom"
    assert "OutOfMemoryError" in frame.loc[128, "note"]
    assert frame.loc[256, "status"] == "oom" and "already at N=128" in frame.loc[256, "note"]
    text = table.render(table.efficiency_sections(table.efficiency_summary(None, table.load_bench([out]))))
    assert "OOM" in text


def test_other_errors_do_not_stop_the_sweep(tmp_path, monkeypatch):
    def broken(cell, **kwargs):
        raise RuntimeError("triton compilation failed\nlong trace")

    monkeypatch.setattr(models, "measure", broken)
    out = tmp_path / "err.csv"
    assert models.run(parse("--attentions", "softmax", "performer", "--seq-lens", "64", "--tokens-per-batch", "128",
                            "--device", "cpu", "--out", out)) == 0
    frame = pd.read_csv(out)
    assert list(frame["status"]) == ["error", "error"]
    assert frame["note"].tolist() == ["RuntimeError: triton compilation failed … long trace"] * 2


def test_attention_refusing_a_length_is_unsupported(tmp_path, monkeypatch):
    import lra.model

    def refuse(*args, **kwargs):
        raise ValueError("flash_sparse: layout 'bigbird' needs >= 8 blocks of 128, got 1\nsecond line")

    monkeypatch.setattr(lra.model, "build_model", refuse)
    cell = models.Cell("softmax", 64, "custom", 128, False)
    row = models.run_cell(cell, device=torch.device("cpu"), options={}, steps=1, warmup=0, grad_clip=1.0, seed=0)
    assert row["status"] == "unsupported" and row["note"] == "flash_sparse: layout 'bigbird' needs >= 8 blocks of 128, got 1"
    assert row["batch_size"] == 2 and row["tokens_per_batch"] == 128


def test_profile_writes_operator_tables_and_a_trace_per_cell(tmp_path, monkeypatch, one_thread):
    import gzip

    out, profile_dir = tmp_path / "prof.csv", tmp_path / "profiles"
    args = parse("--attentions", "softmax", "--seq-lens", "64", "--tokens-per-batch", "128", "--steps", "2",
                 "--warmup", "1", "--device", "cpu", "--out", out, "--profile", profile_dir)
    assert models.run(args) == 0
    assert pd.read_csv(out)["status"].tolist() == ["ok"]
    text = (profile_dir / "softmax_custom_eager_N64.txt").read_text()
    assert "softmax N=64 custom eager" in text and f"{models.PROFILE_STEPS} training steps profiled" in text
    assert "== operators by self CPU time (top 30) ==" in text and "Self CPU" in text
    assert "aten::mm" in text or "aten::addmm" in text  # real operators of the model step
    assert "train_step_2" in text  # one record per profiled step
    trace = json.loads(gzip.open(profile_dir / "softmax_custom_eager_N64.json.gz").read())
    assert any(e.get("name") == "train_step_0" for e in trace["traceEvents"])
    assert json.loads(out.with_name("prof.meta.json").read_text())["settings"]["profile"] == str(profile_dir)

    # a profiler failure is written down where the table would be, and the timing is still recorded
    def broken(*a, **k):
        raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(models, "profile_steps", broken)
    assert models.run(parse("--attentions", "softmax", "--seq-lens", "32", "--tokens-per-batch", "64", "--steps", "1",
                            "--warmup", "0", "--device", "cpu", "--out", out, "--profile", profile_dir)) == 0
    assert pd.read_csv(out)["status"].tolist() == ["ok"]
    assert "profiling failed: RuntimeError: CUPTI unavailable" in (profile_dir / "softmax_custom_eager_N32.txt").read_text()


def test_compile_mode_reaches_torch_compile_and_the_records(tmp_path, monkeypatch):
    seen = {}

    def fake_compile(model, mode=None, **kwargs):
        seen["mode"] = mode
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    out = tmp_path / "modes.csv"
    assert models.run(parse("--attentions", "softmax", "--seq-lens", "32", "--tokens-per-batch", "64", "--steps", "1",
                            "--warmup", "0", "--device", "cpu", "--modes", "compiled", "--compile-mode",
                            "reduce-overhead", "--out", out)) == 0
    assert seen["mode"] == "reduce-overhead"
    frame = pd.read_csv(out)
    assert frame["status"].tolist() == ["ok"] and "torch.compile mode=reduce-overhead" in frame["note"][0]
    assert frame["compile_mode"].tolist() == ["reduce-overhead"]  # a column of its own, for tables and plots
    assert json.loads(out.with_name("modes.meta.json").read_text())["settings"]["compile_mode"] == "reduce-overhead"
    report = out.with_name("modes.md").read_text()
    assert "torch.compile mode=reduce-overhead" in report
    assert "model benchmark: custom batch, compiled, CUDA graphs (reduce-overhead)" in report


def test_no_peak_memory_is_reported_under_cuda_graphs(monkeypatch):
    """CUDA graphs keep the step's tensors in a private pool allocated while warming up: the timed steps'
    peak allocation (0.00 GB on the H200) is not the model's memory, so it is not reported."""
    monkeypatch.setattr(models, "measure", lambda cell, **k: {
        "ms_per_step": 3.0, "ms_p10": 2.5, "ms_p90": 3.5, "samples_per_s": 1.0, "tokens_per_s": 1.0,
        "peak_mem_gb": 0.004})
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    kwargs = dict(device=torch.device("cpu"), options={}, steps=1, warmup=0, grad_clip=1.0, seed=0)
    compiled = models.Cell("softmax", 64, "custom", 128, True)
    for mode in ("reduce-overhead", "max-autotune"):
        row = models.run_cell(compiled, compile_mode=mode, **kwargs)
        assert row["status"] == "ok" and row["ms_per_step"] == 3.0
        assert math.isnan(row["peak_mem_gb"]) and "no peak memory under CUDA graphs" in row["note"]
    for cell, mode in ((compiled, "default"), (compiled, "max-autotune-no-cudagraphs"),
                       (models.Cell("softmax", 64, "custom", 128, False), "reduce-overhead")):
        row = models.run_cell(cell, compile_mode=mode, **kwargs)
        assert row["peak_mem_gb"] == 0.004 and "CUDA graphs" not in row["note"]


def test_kernel_settings_are_named_in_the_report(tmp_path, monkeypatch):
    """A run under an environment setting that changes how our kernels run says so in its Markdown header."""
    monkeypatch.setenv("TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS", "0")
    out = tmp_path / "ln.csv"
    assert models.run(parse("--attentions", "softmax", "--seq-lens", "32", "--tokens-per-batch", "64", "--steps", "1",
                            "--warmup", "0", "--device", "cpu", "--modes", "eager", "--out", out)) == 0
    assert json.loads(out.with_name("ln.meta.json").read_text())["kernel_env"] == {
        "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS": "0"}
    assert "- Kernel settings: `TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=0`." in \
        out.with_name("ln.md").read_text()


def test_plan_refuses_lengths_that_do_not_divide_the_tokens_per_batch():
    # 3000 // 1024 = 2 sequences = 2048 tokens, 3000 // 512 = 5 = 2560: not the same tokens at every N
    with pytest.raises(ValueError, match="does not divide the 3000 tokens per batch"):
        models.plan(parse("--seq-lens", "512", "1024", "--tokens-per-batch", "3000"), REGISTERED, "cpu")
    # longer than the batch is allowed (one sequence, noted in the row)
    cells, _ = models.plan(parse("--seq-lens", "512", "1024", "--tokens-per-batch", "512"), REGISTERED, "cpu")
    assert {c.batch_size for c in cells} == {1}


def test_resume_keeps_the_earlier_provenance_and_refuses_other_settings(tmp_path, monkeypatch):
    def fake_measure(cell, **kwargs):
        return {"ms_per_step": 2.0, "ms_p10": 2.0, "ms_p90": 2.0, "samples_per_s": 1.0, "tokens_per_s": 1.0,
                "peak_mem_gb": float("nan")}

    monkeypatch.setattr(models, "measure", fake_measure)
    out = tmp_path / "r.csv"
    base = ["--attentions", "softmax", "--seq-lens", "64", "--device", "cpu", "--out", out]
    assert models.run(parse(*base, "--tokens-per-batch", "128")) == 0
    first = json.loads(out.with_name("r.meta.json").read_text())
    before = out.read_text()
    # another batch (or attention dropout, ...) is another measurement: refused before anything is written
    for other in (["--tokens-per-batch", "256"], ["--tokens-per-batch", "128", "--attention-dropout", "0"]):
        monkeypatch.setattr(models, "run_cell", lambda *a, **k: pytest.fail("measured despite other settings"))
        with pytest.raises(ValueError, match="measured with other settings"):
            models.run(parse(*base, *other, "--resume"))
        assert out.read_text() == before
        assert json.loads(out.with_name("r.meta.json").read_text()) == first
    monkeypatch.undo()
    monkeypatch.setattr(models, "measure", fake_measure)
    # the same settings: the kept rows keep the provenance of the run that measured them
    assert models.run(parse(*base, "--tokens-per-batch", "128", "--seq-lens", "64", "32", "--resume")) == 0
    meta = json.loads(out.with_name("r.meta.json").read_text())
    assert meta["resumed_rows"] == 1
    assert [(e["command"], e["date"], e["git_rev"]) for e in meta["earlier_runs"]] == \
        [(first["command"], first["date"], first["git_rev"])]
    assert sorted(pd.read_csv(out)["seq_len"]) == [32, 64]


def test_a_compiled_cell_leaves_no_compile_caches_behind(monkeypatch):
    """The next cells (eager ones too, which never reset) must not inherit its caches or CUDA-graph pools."""
    events = []
    monkeypatch.setattr(models, "measure", lambda cell, **k: events.append("measure") or {
        "ms_per_step": 1.0, "ms_p10": 1.0, "ms_p90": 1.0, "samples_per_s": 1.0, "tokens_per_s": 1.0,
        "peak_mem_gb": float("nan")})
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))
    kwargs = dict(device=torch.device("cpu"), options={}, steps=1, warmup=0, grad_clip=1.0, seed=0)
    assert models.run_cell(models.Cell("softmax", 64, "custom", 128, True), **kwargs)["status"] == "ok"
    assert events == ["measure", "reset"]

    def oom(cell, **k):
        events.append("measure")
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(models, "measure", oom)
    events.clear()
    assert models.run_cell(models.Cell("softmax", 64, "custom", 128, True), **kwargs)["status"] == "oom"
    assert events == ["measure", "reset"]
    events.clear()
    models.run_cell(models.Cell("softmax", 64, "custom", 128, False), **kwargs)
    assert events == ["measure"]  # eager cells compile nothing


def test_interleaved_cpu_run_times_each_attention_in_the_same_rounds(tmp_path, one_thread):
    out = tmp_path / "inter.csv"
    argv = ["--seq-lens", "64", "--tokens-per-batch", "128", "--steps", "4", "--warmup", "1", "--interleave",
            "--rounds", "2", "--attentions", "softmax", "sdpa", "bigbird", "--device", "cpu", "--out", out]
    assert models.run(parse(*argv)) == 0
    frame = pd.read_csv(out).set_index("attention")
    assert frame.loc["softmax", "status"] == frame.loc["sdpa", "status"] == "ok"
    assert "interleaved with sdpa (2 rounds)" in frame.loc["softmax", "note"]
    assert "interleaved with softmax (2 rounds)" in frame.loc["sdpa", "note"]
    assert frame.loc["bigbird", "status"] == "unsupported"  # too few blocks at N = 64: not built at all
    assert (frame.loc[["softmax", "sdpa"], "ms_per_step"] > 0).all()
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["settings"]["interleave"] is True and meta["settings"]["rounds"] == 2


class _FakeWorkload:
    """Stands in for models.Workload: records the order of the timed blocks; 'boom' fails to build."""

    log: list = []

    def __init__(self, cell, **kwargs):
        if cell.attention == "boom":
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.cell = cell

    def run(self, n):
        _FakeWorkload.log.append((self.cell.attention, n))
        if self.cell.attention == "late" and len([e for e in _FakeWorkload.log if e[0] == "late"]) == 3:
            raise RuntimeError("an illegal memory access was encountered")  # in its second timed round
        return [{"a": 1.0, "b": 2.0, "late": 3.0}[self.cell.attention]] * n


def test_interleaved_rounds_rotate_and_failures_stay_per_cell(monkeypatch):
    monkeypatch.setattr(models, "Workload", _FakeWorkload)
    monkeypatch.setattr(models, "_unsupported_row", lambda cell, device, options, dropout: None)  # names not registered
    _FakeWorkload.log = []
    cells = [models.Cell(name, 64, "custom", 128, False) for name in ("a", "boom", "b")]
    results = models.measure_interleaved(cells, device=torch.device("cpu"), options={}, steps=5, warmup=2,
                                         grad_clip=1.0, seed=0, rounds=3)
    # warm-up of each built model, then 3 rounds of ceil(5 / 3) = 2 steps, the order rotating by one
    assert _FakeWorkload.log == [("a", 2), ("b", 2), ("a", 2), ("b", 2), ("b", 2), ("a", 2), ("a", 2), ("b", 2)]
    assert results[cells[0].key]["ms_per_step"] == 1.0 and results[cells[2].key]["ms_per_step"] == 2.0
    assert isinstance(results[cells[1].key], RuntimeError)
    rows = models.run_interleaved(cells, device=torch.device("cpu"), options={}, steps=5, warmup=2, grad_clip=1.0,
                                  seed=0, rounds=3)
    by_name = {r["attention"]: r for r in rows}
    assert by_name["boom"]["status"] == "oom"
    assert by_name["a"]["note"].endswith("interleaved with b (3 rounds)")
    # a failure in a timed round ends that model's rounds only; the others finish theirs
    _FakeWorkload.log = []
    cells = [models.Cell(name, 64, "custom", 128, False) for name in ("a", "late")]
    results = models.measure_interleaved(cells, device=torch.device("cpu"), options={}, steps=4, warmup=1,
                                         grad_clip=1.0, seed=0, rounds=4)
    assert "illegal memory access" in str(results[cells[1].key])
    assert results[cells[0].key]["ms_per_step"] == 1.0
    assert [e for e in _FakeWorkload.log if e[0] == "a"] == [("a", 1)] + [("a", 1)] * 4
    assert [e for e in _FakeWorkload.log if e[0] == "late"] == [("late", 1)] * 3


def test_interleave_option_errors():
    with pytest.raises(ValueError, match="--profile and --interleave"):
        models.plan(parse("--interleave", "--profile", "p"), REGISTERED, "cpu")
    with pytest.raises(ValueError, match="--rounds must be between 1 and --steps"):
        models.plan(parse("--interleave", "--steps", "3", "--rounds", "4"), REGISTERED, "cpu")


def test_user_model_plan_and_errors():
    cells, settings = models.plan(parse("--model", "user", "--attentions", "flash", "sdpa", "sdpa_flash"),
                                  list(model_options.USER_ATTENTIONS), "cuda")
    assert settings["model"] == "user" and {c.model for c in cells} == {"user"}
    assert settings["options"] == {"sdpa": {"backend": "cudnn"}}
    with pytest.raises(ValueError, match="unknown attention 'performer'"):
        models.plan(parse("--model", "user", "--attentions", "performer"), list(model_options.USER_ATTENTIONS), "cpu")
    with pytest.raises(SystemExit):
        parse("--model", "mine")


def test_user_model_calls_the_attention_on_strided_views_and_matches_the_reference():
    from lra.bench import user_model

    seen = []

    def spy(q, k, v, training):
        seen.append((q.is_contiguous(), q.stride(), q.shape))
        return user_model.attention_function("softmax", 0.0)(q, k, v, training)

    block = user_model.UserBlock(spy, dropout=0.0)
    block(torch.randn(2, 8, user_model.WIDTH))
    contiguous, stride, shape = seen[0]
    assert not contiguous and shape == (2, user_model.HEADS, 8, user_model.HEAD_DIM)
    assert stride[2] == 3 * user_model.HEADS * user_model.HEAD_DIM  # a view of the fused projection
    tokens = torch.randint(0, 16, (2, 16))
    logits = {}
    for name in ("softmax", "flash", "sdpa"):
        torch.manual_seed(0)
        model = user_model.UserModel(name, vocab_size=16, num_classes=3, max_len=16, attention_dropout=0.0,
                                     dropout=0.0).eval()
        logits[name] = model(tokens)
    torch.testing.assert_close(logits["flash"], logits["softmax"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits["sdpa"], logits["softmax"], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="no attention 'performer'"):
        user_model.attention_function("performer", 0.0)
    assert user_model.support("flash", torch.device("cpu"), {"backend": "x"})[0] is False


def test_a_cell_sdpa_cannot_run_is_unsupported_before_it_runs(tmp_path, one_thread):
    """SDPA's flash back-end on the CPU has no dropout: with the models' attention dropout the cell is
    `unsupported` with the reason, not an `error` ("No available kernel") after PyTorch's warnings."""
    from lra.bench import user_model

    cpu = torch.device("cpu")
    ok, reason = user_model.support("sdpa_flash", cpu, {}, dropout=0.1)
    assert not ok and "without attention dropout" in reason
    assert user_model.support("sdpa_flash", cpu, {}, dropout=0.0)[0] is True
    out = tmp_path / "user.csv"
    assert models.run(parse(*TINY, "--model", "user", "--attentions", "sdpa_flash", "--device", "cpu",
                            "--out", out)) == 0
    row = pd.read_csv(out).iloc[0]
    assert row["status"] == "unsupported" and "without attention dropout" in row["note"]
    # the project's model: sdpa pinned to that back-end, with the paper model's attention dropout
    out = tmp_path / "lra.csv"
    assert models.run(parse(*TINY, "--attentions", "sdpa", "--options", "sdpa.backend=flash", "--device", "cpu",
                            "--out", out)) == 0
    assert set(pd.read_csv(out)["status"]) == {"unsupported"}


def test_user_model_tiny_cpu_run(tmp_path, one_thread):
    out = tmp_path / "user.csv"
    assert models.run(parse(*TINY, "--model", "user", "--attentions", "softmax", "flash", "sdpa", "--device", "cpu",
                            "--attention-dropout", "0", "--out", out)) == 0
    frame = pd.read_csv(out)
    assert (frame["status"] == "ok").all() and len(frame) == 6
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["model"]["name"] == "user" and meta["settings"]["model"] == "user"
    assert "the user's own model" in out.with_suffix(".md").read_text()
    with pytest.raises(ValueError, match="--options sdpa"):
        models.run(parse(*TINY, "--model", "user", "--attentions", "sdpa", "--device", "cpu",
                         "--options", "sdpa.window=3", "--out", tmp_path / "bad.csv"))
