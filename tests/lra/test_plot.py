"""`lra plot`: every figure is written (PNG + PDF, non-empty) from synthetic data; absent data is skipped."""
from pathlib import Path

import pandas as pd
import pytest

from lra import plot
from lra.cli import build_parser
from lra.records import write_record

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_runs(root: Path) -> Path:
    """Two tasks x three attentions x two seeds, plus a task trained at two lengths and an OOM run."""
    speeds = {"softmax": 1000.0, "flash": 3000.0, "performer": 2500.0}
    for task, base in (("listops", 0.36), ("pathfinder32", 0.70)):
        for i, (attention, speed) in enumerate(speeds.items()):
            for seed in (0, 1):
                acc = base + 0.01 * i + 0.005 * seed
                curve = [{"step": 50 * k, "wall_s": 40.0 * k * (1 + i), "val_acc": acc * k / 4} for k in range(1, 5)]
                write_record(root / task / attention / f"s{seed}" / "result.json", dict(
                    run_id=f"s{seed}", task=task, attention=attention, attention_options={}, seq_len=1024, seed=seed,
                    preset="paper", status="completed", error=None, best_val_acc=acc, test_acc=acc,
                    val_acc_curve=curve, train_tokens_per_s=speed, train_samples_per_s=speed / 1024,
                    peak_mem_gb=4.0 / (1 + i), wall_time_s=160.0, time_to_best_s=120.0))
    for n, speed in ((1024, 4000.0), (2048, 2100.0), (4096, 1000.0)):
        for attention in ("flash", "softmax"):
            status = "oom" if attention == "softmax" and n == 4096 else "completed"
            write_record(root / "text" / attention / f"n{n}" / "result.json", dict(
                run_id=f"n{n}", task="text", attention=attention, seq_len=n, seed=0, preset="paper", status=status,
                test_acc=0.6 if status == "completed" else None,
                val_acc_curve=[{"step": 1, "wall_s": 10.0, "val_acc": 0.55}] if status == "completed" else [],
                train_tokens_per_s=speed / (2 if attention == "softmax" else 1) if status == "completed" else None,
                peak_mem_gb=n / 1024 if status == "completed" else None))
    return root


def write_bench(path: Path) -> Path:
    rows = []
    for compiled in (False, True):
        for attention, ms in (("softmax", 10.0), ("flash", 3.0), ("performer", 4.0)):
            for n in (1024, 2048, 4096, 8192):
                oom = attention == "softmax" and n == 8192
                t = ms * n / 1024
                rows.append(dict(attention=attention, seq_len=n, batch_size=262144 // n, tokens_per_batch=262144,
                                 regime="paper", compile=compiled, ms_per_step=None if oom else t,
                                 samples_per_s=None if oom else 262144 // n / t * 1e3,
                                 tokens_per_s=None if oom else 262144 / t * 1e3,
                                 peak_mem_gb=None if oom else n / 512, status="oom" if oom else "ok", note=""))
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def write_kernels(path: Path) -> Path:
    rows = []
    for impl, eff in (("flash", 1.0), ("sdpa_cudnn", 1.2), ("softmax", 0.3)):
        for direction in ("fwd", "bwd", "fwd_bwd"):
            for d in (64,):
                for n in (1024, 4096, 16384):
                    rows.append({"impl": impl, "pass": direction, "seq_len": n, "head_dim": d, "batch": 8, "heads": 4,
                                 "dtype": "bf16", "pattern": "dense", "density": 1.0, "ms": 1.0,
                                 "tflops": eff * (100 - 1e5 / n), "extra_mem_gb": 0.1, "status": "ok", "note": ""})
    rows.append({**rows[0], "seq_len": 65536, "status": "oom", "tflops": None})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def run_cli(*argv):
    args = build_parser().parse_args(["plot", *map(str, argv)])
    return args.func(args)


def assert_figure(path_stem: Path):
    png, pdf = path_stem.with_suffix(".png"), path_stem.with_suffix(".pdf")
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000, png
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000, pdf


def test_all_plots_written(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs")
    out = tmp_path / "figs"
    code = run_cli("accuracy", "efficiency", "kernels", "--out", out, "--runs-dir", runs,
                   "--bench", write_bench(tmp_path / "bench.csv"), "--kernels", write_kernels(tmp_path / "kernels.csv"))
    assert code == 0
    # Training curves: one figure per task; the task trained at three lengths (a facet per length) is enough here.
    assert run_cli("curves", "--out", out, "--runs-dir", runs, "--tasks", "text") == 0
    for name in ("accuracy_vs_throughput", "efficiency_bench", "efficiency_runs", "kernel_tflops", "curves_text"):
        assert_figure(out / name)
    assert not (out / "curves_listops.png").exists()
    printed = capsys.readouterr().out
    assert f"wrote {out / 'kernel_tflops.pdf'}" in printed
    from PIL import Image

    # Paper-sized: at most a page wide (7 in) plus the legend, at 200 dpi.
    width, height = Image.open(out / "accuracy_vs_throughput.png").size
    assert 600 < width <= 10 * plot.PNG_DPI and height < 8 * plot.PNG_DPI
    assert not plot.accuracy_vs_throughput(pd.DataFrame(), out).files


def test_absent_data_is_skipped_not_fatal(tmp_path, capsys):
    empty = tmp_path / "runs"
    empty.mkdir()
    assert run_cli("--out", tmp_path / "figs", "--runs-dir", empty) == 1
    err = capsys.readouterr().err
    for name in ("accuracy_vs_throughput", "efficiency_bench", "efficiency_runs", "kernel_tflops", "training_curves",
                 "accuracy_vs_speedup", "validation_curves"):
        assert f"skipped {name}:" in err
    assert "no figure written" in err
    # Only the kernel plot requested, with a CSV whose rows all failed: skipped with a reason.
    kernels = tmp_path / "k.csv"
    pd.DataFrame([{"impl": "flash", "pass": "fwd", "seq_len": 1024, "head_dim": 64, "tflops": None,
                   "status": "oom"}]).to_csv(kernels, index=False)
    assert run_cli("kernels", "--out", tmp_path / "figs", "--runs-dir", empty, "--kernels", kernels) == 1
    assert "no successful (status ok) rows" in capsys.readouterr().err


def test_corrupt_record_is_reported_and_skipped(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs")
    bad = runs / "listops" / "flash" / "torn" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{\n  \"task\": \"listops\",\n")
    assert run_cli("curves", "--out", tmp_path / "figs", "--runs-dir", runs, "--tasks", "listops") == 0
    err = capsys.readouterr().err
    assert "skipping corrupt run record" in err and str(bad) in err
    assert_figure(tmp_path / "figs" / "curves_listops")
    assert not (tmp_path / "figs" / "curves_text.png").exists()


def test_bad_inputs(tmp_path):
    bench = write_bench(tmp_path / "bench.csv")
    with pytest.raises(ValueError, match="looks like a `lra bench models` CSV"):
        run_cli("kernels", "--kernels", bench, "--out", tmp_path)
    efficiency = tmp_path / "efficiency.csv"          # what `lra table efficiency --format csv` writes
    efficiency.write_text("attention,seq_len,tokens_per_s\nflash,1024,1.0\n")
    with pytest.raises(ValueError, match="no kernel timings: `lra bench kernels` writes those"):
        run_cli("kernels", "--kernels", efficiency, "--out", tmp_path)
    with pytest.raises(ValueError, match="unknown plot 'pie'"):
        run_cli("pie", "--out", tmp_path)
    with pytest.raises(ValueError, match="--baseline 'transformer': no such attention"):
        run_cli("efficiency", "--bench", bench, "--out", tmp_path / "figs", "--baseline", "transformer")
    assert not (tmp_path / "figs").exists()


def test_training_accuracy_curves_from_the_runs_metrics(tmp_path):
    """`--train`: the logged training accuracy (all logger versions), placed on the wall clock by the
    validation points' (step, wall_s), in a second row of panels; runs without metrics keep theirs."""
    from lra.records import load_records

    root = write_runs(tmp_path / "runs")
    run = root / "pathfinder32" / "flash" / "s0"  # validation at steps 50..200, wall 80..320 s
    (run / "logs" / "version_0").mkdir(parents=True)
    (run / "logs" / "version_1").mkdir(parents=True)  # a resumed run logs into a new version
    # Lightning's CSV step is the completed-step count - 1 (a row at 49 is step 50 of the record's curve)
    pd.DataFrame({"step": [39, 49, 99, 124], "train/acc": [0.1, 0.5, 0.7, None],
                  "val/acc": [None, None, None, 0.6]}).to_csv(run / "logs" / "version_0" / "metrics.csv", index=False)
    pd.DataFrame({"step": [149, 249], "train/acc": [0.9, 1.0]}).to_csv(run / "logs" / "version_1" / "metrics.csv",
                                                                      index=False)
    records = load_records(root)
    points = plot.curve_points(records, train=True)
    train = points[points["curve"] == "training"].sort_values("wall_s")
    assert set(train["run"]) == {str(run / "result.json")}  # the only run with metrics
    # steps 50, 100, 150 lie within the validation range (40 and 250 do not); wall = 1.6 s per step
    assert train["wall_s"].tolist() == pytest.approx([80.0, 160.0, 240.0])
    assert train["val_acc"].tolist() == pytest.approx([50.0, 60.0, 70.0])  # rolling means of 0.5, 0.7, 0.9
    assert len(points[points["curve"] == "validation"]) == len(plot.curve_points(records))
    results = plot.training_curves(records, tmp_path / "out", tasks=["pathfinder32"], train=True)
    assert [r.name for r in results] == ["curves_pathfinder32"]
    png = tmp_path / "out" / "curves_pathfinder32.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000


def test_memory_axes_read_in_plain_numbers_and_throughput_in_engineering_units():
    """Peak memory in GB below 1 must not read "240m" (milli-gigabytes); tokens/s keep 4M, 5M."""
    import matplotlib.pyplot as plt

    fig, (mem, rate) = plt.subplots(1, 2)
    for ax, (low, high), engineering in ((mem, (0.15, 0.3), False), (rate, (3e6, 6e6), True)):
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        plot._readable_log_axis(ax, "y", engineering=engineering)
    fig.canvas.draw()

    def labels(ax):
        ticks = ax.yaxis.get_majorticklabels() + ax.yaxis.get_minorticklabels()
        return [t.get_text() for t in ticks if t.get_text()]

    assert "0.2" in labels(mem) and not any(text.endswith("m") for text in labels(mem)), labels(mem)
    assert "5M" in labels(rate), labels(rate)
    plt.close(fig)


def test_accuracy_vs_speedup_and_validation_curves(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs")
    out = tmp_path / "figs"
    assert run_cli("speedup", "val_curves", "--out", out, "--runs-dir", runs) == 0
    for name in ("accuracy_vs_speedup", "val_curves_listops", "val_curves_pathfinder32", "val_curves_text"):
        assert_figure(out / name)
    # the validation band: mean and sample std over the two seeds at each step (curves of write_runs)
    from lra.records import load_records

    points = plot.validation_points(load_records(runs))
    bands = plot.validation_bands(points)
    flash = bands[(bands["task"] == "listops") & (bands["Attention"] == "FlashAttention")].set_index("step")
    # seed s: acc = 0.37 + 0.005 s; val_acc at step 50 k = acc * k / 4 (percent)
    assert flash.loc[200.0, "mean"] == pytest.approx((37.0 + 37.5) / 2)
    assert flash.loc[200.0, "std"] == pytest.approx(abs(37.5 - 37.0) / 2 ** 0.5)
    assert (flash["n"] == 2).all()
    # the OOM run of write_runs has no curve; the completed text runs are one per (attention, length)
    text = bands[bands["task"] == "text"]
    assert (text["n"] == 1).all() and text["std"].isna().all()


def test_speedup_plot_leaves_out_runs_that_shared_a_gpu(tmp_path, capsys):
    import json

    runs = write_runs(tmp_path / "runs")
    for path in runs.glob("**/result.json"):
        record = json.loads(path.read_text())
        record["sharing"] = {"runs_per_gpu": 4}
        path.write_text(json.dumps(record))
    assert run_cli("speedup", "accuracy", "--out", tmp_path / "figs", "--runs-dir", runs) == 1
    err = capsys.readouterr().err
    assert "skipped accuracy_vs_speedup: no completed runs with a speed-up over softmax" in err
    assert "skipped accuracy_vs_throughput: no completed run records with test accuracy and training throughput " \
           "measured alone on their device" in err


def test_figures_say_what_their_runs_are_and_draw_no_interpreter_speed(tmp_path, monkeypatch):
    """CPU runs of a small preset: every figure names preset, device and the interpreter under its
    panels; the speed figures leave the runs through the interpreter out."""
    from matplotlib.text import Text

    root = tmp_path / "runs"
    for attention, speed in (("softmax", 1000.0), ("flash", 40.0), ("performer", 1500.0)):
        curve = [{"step": 50 * k, "wall_s": 5.0 * k, "val_acc": 0.1 * k} for k in range(1, 4)]
        write_record(root / "listops" / attention / "smoke-s0" / "result.json", dict(
            run_id="smoke-s0", task="listops", attention=attention, seq_len=32, seed=0, preset="smoke",
            status="completed", best_val_acc=0.3, test_acc=0.3, val_acc_curve=curve, train_tokens_per_s=speed,
            step_time_ms=100.0, device="cpu (x86_64)", sharing={"runs_per_gpu": 1}))
    drawn = {}
    save = plot.save

    def keep_texts(fig, out_dir, name):
        drawn[name] = [t.get_text() for t in fig.findobj(Text)]
        return save(fig, out_dir, name)

    monkeypatch.setattr(plot, "save", keep_texts)
    assert run_cli("accuracy", "curves", "speedup", "val_curves", "--out", tmp_path / "figs", "--runs", root) == 0
    assert set(drawn) == {"accuracy_vs_throughput", "curves_listops", "accuracy_vs_speedup", "val_curves_listops"}
    for name, texts in drawn.items():
        caption = next(t for t in texts if t.startswith("Runs:")).replace("\n", " ")
        assert caption.startswith("Runs: preset smoke; device cpu (x86_64); Triton kernels (FlashAttention) "
                                  "through Triton's CPU interpreter"), name
        speed = name in ("accuracy_vs_throughput", "accuracy_vs_speedup")
        assert ("FlashAttention" in texts) != speed, name  # the legend entry
        assert caption.endswith("Runs through the interpreter are not drawn.") == speed, name


def test_a_figure_saved_twice_gives_the_same_bytes(tmp_path):
    """PNG and PDF carry no creation date, so regenerating a committed figure from the same data leaves
    it unchanged in git."""
    import time

    import matplotlib.pyplot as plt

    def draw(out):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [0.3, 0.5, 0.4], label="flash")
        ax.legend()
        return plot.save(fig, out, "fig")

    first = [p.read_bytes() for p in draw(tmp_path / "a")]
    time.sleep(1.1)  # a PDF creation date would differ by a second
    second = [p.read_bytes() for p in draw(tmp_path / "b")]
    assert [len(b) for b in first] == [len(b) for b in second] and first == second
