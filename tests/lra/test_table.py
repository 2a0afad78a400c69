"""`lra table accuracy|efficiency`: tables from synthetic run records, checked against hand-computed values."""
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from lra import published as pub
from lra import table
from lra.cli import build_parser
from lra.records import write_record

PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "results" / "published"


def record(root, task, attention, seed, *, status="completed", acc=None, seq_len=1024, tokens=1000.0, mem=1.5,
           wall=600.0, best=300.0, created="2026-11-30T12:00:00", run_id=None, **extra):
    run_id = run_id or f"paper-n{seq_len}-s{seed}"
    done = status == "completed"
    data = dict(run_id=run_id, task=task, attention=attention, attention_options={}, seq_len=seq_len, seed=seed,
                preset="paper", status=status, error=None if done else f"{status}: CUDA out of memory (seed {seed})",
                best_val_acc=acc, test_acc=acc,
                val_acc_curve=[{"step": 100 * i, "wall_s": 30.0 * i, "val_acc": 0.1 * i} for i in range(1, 4)],
                train_tokens_per_s=tokens if done else None, train_samples_per_s=tokens / seq_len if done else None,
                step_time_ms=10.0, peak_mem_gb=mem if done else None, wall_time_s=wall if done else None,
                time_to_best_s=best if done else None, created=created)
    data.update(extra)
    write_record(Path(root) / task / attention / run_id / "result.json", data)


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    # flash / listops: three seeds -> mean 38.0, sample std 2.0; plus an older rerun of seed 0 that must not count.
    for seed, acc in enumerate((0.36, 0.38, 0.40)):
        record(root, "listops", "flash", seed, acc=acc, tokens=3000.0)
    record(root, "listops", "flash", 0, acc=0.10, tokens=3000.0, created="2026-11-29T00:00:00", run_id="old-s0")
    # softmax / listops: two seeds complete (mean 36.0, std sqrt(2)), seed 2 ran out of memory.
    record(root, "listops", "softmax", 0, acc=0.35)
    record(root, "listops", "softmax", 1, acc=0.37)
    record(root, "listops", "softmax", 2, status="oom")
    # flash / text: one seed only (seeds 1 and 2 missing) -> n=1, no std.
    record(root, "text", "flash", 0, acc=0.64, seq_len=4096, tokens=5000.0)
    # flash / pathx: OOM only; performer / listops: failed only.
    record(root, "pathx", "flash", 0, status="oom", seq_len=16384)
    record(root, "listops", "performer", 0, status="failed")
    # A corrupt record next to them.
    bad = root / "image" / "flash" / "broken" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"task": "image", "attention": ')
    return root


@pytest.fixture
def records(runs):
    from lra.records import load_records

    with pytest.warns(UserWarning, match="broken"):
        return load_records(runs)


@pytest.fixture(scope="module")
def published():
    return pub.load_accuracy(PUBLISHED_DIR)


def cell(summary, attention, task):
    hit = summary[(summary["attention"] == attention) & (summary["task"] == task)]
    assert len(hit) == 1, hit
    return hit.iloc[0]


def test_accuracy_summary_matches_hand_computed(records, published):
    summary = table.accuracy_summary(records, published)
    flash = cell(summary, "flash", "listops")
    assert (flash["n"], flash["mean"], flash["std"], flash["seeds"]) == (3, pytest.approx(38.0), pytest.approx(2.0), "0 1 2")
    assert flash["duplicates"] == 1  # the older rerun of seed 0 (10 %) is ignored
    assert flash["published_fa"] == 37.6 and flash["delta_fa"] == pytest.approx(0.4)
    assert math.isnan(flash["published_lra"]) and math.isnan(flash["delta_lra"])

    softmax = cell(summary, "softmax", "listops")
    assert (softmax["n"], softmax["oom"]) == (2, 1)
    assert softmax["mean"] == pytest.approx(36.0) and softmax["std"] == pytest.approx(math.sqrt(2))
    assert softmax["delta_fa"] == pytest.approx(0.0) and softmax["delta_lra"] == pytest.approx(36.0 - 36.37)

    text = cell(summary, "flash", "text")
    assert text["n"] == 1 and text["mean"] == pytest.approx(64.0) and math.isnan(text["std"])
    assert text["delta_fa"] == pytest.approx(64.0 - 63.9)

    pathx = cell(summary, "flash", "pathx")
    assert (pathx["n"], pathx["oom"]) == (0, 1) and math.isnan(pathx["mean"])
    assert pathx["published_fa"] == 61.4
    performer = cell(summary, "performer", "listops")
    assert (performer["n"], performer["failed"]) == (0, 1)

    # Average over the papers' five tasks: flash has ListOps and Text -> (38 + 64) / 2 over 2 of 5 tasks; no Δ.
    avg = cell(summary, "flash", "avg")
    assert avg["n"] == 2 and avg["mean"] == pytest.approx(51.0) and math.isnan(avg["delta_fa"])
    assert avg["published_fa"] == 59.8
    # Speedup: geometric mean over tasks with a softmax anchor -> only ListOps, 3000 / 1000.
    assert cell(summary, "flash", "speedup")["mean"] == pytest.approx(3.0)
    assert cell(summary, "softmax", "speedup")["mean"] == pytest.approx(1.0)
    assert cell(summary, "flash", "speedup")["published_fa"] == 2.4


def test_full_average_and_its_delta(tmp_path, published):
    from lra.records import load_records

    accs = {"listops": 0.37, "text": 0.65, "retrieval": 0.80, "image": 0.44, "pathfinder32": 0.74}
    for task, acc in accs.items():
        record(tmp_path, task, "softmax", 0, acc=acc)
        record(tmp_path, task, "softmax", 1, acc=acc + 0.02)
    summary = table.accuracy_summary(load_records(tmp_path), published)
    avg = cell(summary, "softmax", "avg")
    expected = sum(accs.values()) / 5 * 100 + 1.0
    assert avg["n"] == 5 and avg["mean"] == pytest.approx(expected)
    assert avg["delta_fa"] == pytest.approx(expected - 59.3) and avg["delta_lra"] == pytest.approx(expected - 54.39)
    retrieval = cell(summary, "softmax", "retrieval")
    assert retrieval["std"] == pytest.approx(math.sqrt(2))  # two seeds 2 points apart


def test_config_variants_get_their_own_rows_instead_of_counting_as_reruns(tmp_path, published):
    """Two runs of one preset and seed that differ in a setting (here the learning rate) are two
    cells, labelled by what differs; paths and workers do not make a variant."""
    from lra.records import load_records

    root = tmp_path / "runs"
    base = {"model": {"dim": 64}, "optim": {"lr": 1e-4}, "data": {"data_dir": "/a", "num_workers": 4},
            "train": {"batch_size": 256}, "runs_dir": "/x", "seed": 0}
    fast = {**base, "optim": {"lr": 1e-3}, "data": {"data_dir": "/elsewhere", "num_workers": 8}, "runs_dir": "/y"}
    record(root, "listops", "flash", 0, acc=0.36, run_id="paper-n1024-s0-aaaa", config=base)
    record(root, "listops", "flash", 1, acc=0.38, run_id="paper-n1024-s1-aaaa", config={**base, "seed": 1,
                                                                                         "runs_dir": "/z"})
    record(root, "listops", "flash", 0, acc=0.20, run_id="paper-n1024-s0-bbbb", config=fast,
           created="2026-12-01T00:00:00")
    summary = table.accuracy_summary(load_records(root), published)
    rows = summary[(summary["attention"] == "flash") & (summary["task"] == "listops")].set_index("variant")
    assert set(rows.index) == {"optim.lr=0.0001", "optim.lr=0.001"}
    assert (rows.loc["optim.lr=0.0001", "n"], rows.loc["optim.lr=0.0001", "mean"]) == (2, pytest.approx(37.0))
    assert (rows.loc["optim.lr=0.001", "n"], rows.loc["optim.lr=0.001", "mean"]) == (1, pytest.approx(20.0))
    assert (rows["duplicates"] == 0).all()


def test_a_fine_tune_and_its_scratch_baseline_are_labelled_by_their_start(tmp_path, published):
    """Runs that differ only in --init-from get `from <task> <checkpoint>` / `from scratch`, not the
    checkpoint's whole path."""
    from lra.records import load_records

    root = tmp_path / "runs"
    base = {"model": {"dim": 64}, "train": {"batch_size": 32, "init_from": None}}
    ckpt = "pretrain/runs/pathfinder64/flash/paper-n4096-s0-89fba98d/checkpoints/best-step10500.ckpt"
    tuned = {**base, "train": {"batch_size": 32, "init_from": ckpt}}
    record(root, "pathx", "flash", 0, acc=0.52, run_id="paper-n16384-s0-aaaa", config=tuned, seq_len=16384)
    record(root, "pathx", "flash", 0, acc=0.50, run_id="paper-n16384-s0-bbbb", config=base, seq_len=16384)
    record(root, "pathx", "flash", 1, acc=0.51, run_id="paper-n16384-s1-cccc",
           config={**base, "train": {"batch_size": 32, "init_from": "elsewhere/model.ckpt"}}, seq_len=16384)
    variants = set(table.normalise_records(load_records(root))["variant"])
    assert variants == {"from pathfinder64 best-step10500", "from scratch", "from model.ckpt"}


def test_accuracy_display(records, published):
    sections = table.accuracy_sections(table.accuracy_summary(records, published), published, records)
    shown = sections[0].table
    assert list(shown.columns[:2]) == ["Attention", "Numbers"]
    assert {"ListOps", "Text", "Path-X", "Avg", "Speedup"} <= set(shown.columns)
    flash = shown[shown["Attention"] == "FlashAttention"].iloc[0]
    assert flash["ListOps"] == "38.0 ± 2.0 (n=3)" and flash["Text"] == "64.0 (n=1)"
    assert flash["Path-X"] == "OOM" and flash["Avg"] == "51.0 (2/5 tasks)" and flash["Speedup"] == "3.00×"
    softmax_rows = shown.index[shown["Attention"] == "Transformer"][0]
    assert shown.loc[softmax_rows, "ListOps"] == "36.0 ± 1.4 (n=2) [1 oom]"
    lra_row = shown.loc[softmax_rows + 3]
    assert lra_row["Numbers"] == "LRA paper" and lra_row["ListOps"] == "36.37" and lra_row["Path-X"] == "fail"
    assert shown.loc[softmax_rows + 4, "ListOps"] == "-0.4"
    assert shown[shown["Attention"] == "Performer"].iloc[0]["ListOps"] == "failed"
    notes = "\n".join(sections[0].notes)
    assert "Not counted — OOM: listops / softmax N=1K seed 2" in notes and "Not counted — failed" in notes
    assert "arXiv:2205.14135" in notes and "1 repeated run" in notes


def test_efficiency_from_records(records):
    summary = table.efficiency_summary(records)
    flash = summary[(summary["attention"] == "flash") & (summary["task"] == "listops")].iloc[0]
    assert flash["tokens_per_s"] == 3000.0 and flash["speedup"] == pytest.approx(3.0) and flash["n"] == 3
    assert flash["wall_time_s"] == 600.0 and flash["time_to_best_s"] == 300.0
    # records hold GiB (1.5 here); tables show GB like `lra bench models`: 1.5 * 2^30 / 1e9
    assert flash["peak_mem_gb"] == pytest.approx(1.5 * 2**30 / 1e9)
    pathx = summary[summary["task"] == "pathx"].iloc[0]
    assert pathx["status"] == "oom"
    text = table.render(table.efficiency_sections(summary), "markdown")
    assert "## Efficiency — ListOps: training runs" in text and "| OOM" in text and "3.00×" in text
    assert "10m00s" in text and "5m00s" in text and "| 1.61 " in text


def bench_csv(path, rows=None):
    rows = rows or []
    if not rows:
        for compiled in (False, True):
            for attention, ms in (("softmax", 10.0), ("sdpa", 4.0), ("flash", 2.0)):
                for n in (1024, 2048, 4096):
                    oom = attention == "softmax" and n == 4096
                    factor = 0.5 if compiled else 1.0
                    batch = 262144 // n
                    rows.append(dict(attention=attention, seq_len=n, batch_size=batch, tokens_per_batch=262144,
                                     regime="paper", compile=compiled, ms_per_step=None if oom else ms * n / 1024 * factor,
                                     samples_per_s=None, tokens_per_s=None if oom else 262144 / (ms * n / 1024 * factor) * 1e3,
                                     peak_mem_gb=None if oom else 1.0, status="oom" if oom else "ok",
                                     note="OutOfMemoryError: tried" if oom else ""))
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_efficiency_from_bench(tmp_path):
    bench = table.load_bench([bench_csv(tmp_path / "bench.csv")])
    summary = table.efficiency_summary(None, bench)
    eager = summary[summary["setting"] == "model benchmark: paper batch, eager"]
    flash = eager[(eager["attention"] == "flash") & (eager["seq_len"] == 2048)].iloc[0]
    assert flash["speedup"] == pytest.approx(5.0) and flash["speedup_sdpa"] == pytest.approx(2.0)
    assert math.isnan(flash["speedup_eager"])
    flash_4k = eager[(eager["attention"] == "flash") & (eager["seq_len"] == 4096)].iloc[0]
    assert math.isnan(flash_4k["speedup"])  # softmax OOM at 4K: no anchor
    compiled = summary[summary["setting"] == "model benchmark: paper batch, compiled"]
    flash_c = compiled[(compiled["attention"] == "flash") & (compiled["seq_len"] == 1024)].iloc[0]
    assert flash_c["speedup"] == pytest.approx(5.0) and flash_c["speedup_eager"] == pytest.approx(10.0)
    assert list(dict.fromkeys(summary["setting"])) == ["model benchmark: paper batch, eager",
                                                       "model benchmark: paper batch, compiled"]
    text = table.render(table.efficiency_sections(summary), "markdown")
    assert "vs eager softmax" in text and "OOM" in text and "Batch size per length: 1K: 256, 2K: 128, 4K: 64" in text


def test_compile_mode_names_the_setting_and_older_files_read_as_default(tmp_path):
    rows = [dict(attention=a, seq_len=n, batch_size=32768 // n, tokens_per_batch=32768, regime="small", compile=True,
                 compile_mode="reduce-overhead", ms_per_step=ms, samples_per_s=None, tokens_per_s=32768 / ms * 1e3,
                 peak_mem_gb=0.1, status="ok", note="")
            for a, ms in (("sdpa", 2.5), ("flash", 2.4)) for n in (1024, 4096)]
    graphs = bench_csv(tmp_path / "graphs.csv", rows)
    old = bench_csv(tmp_path / "old.csv")  # without a compile_mode column
    bench = table.load_bench([graphs, old])
    assert set(bench[bench["compile"]]["compile_mode"]) == {"reduce-overhead", "default"}
    assert (bench[~bench["compile"]]["compile_mode"] == "").all()
    settings = list(dict.fromkeys(table.efficiency_summary(None, bench)["setting"]))
    assert settings == ["graphs — model benchmark: small batch, compiled, CUDA graphs (reduce-overhead)",
                        "old — model benchmark: paper batch, eager", "old — model benchmark: paper batch, compiled"]
    # a file without the column whose provenance file records the mode
    (tmp_path / "old.meta.json").write_text(json.dumps({"settings": {"compile_mode": "max-autotune"}}))
    bench = table.load_bench([old])
    assert set(bench[bench["compile"]]["compile_mode"]) == {"max-autotune"}
    assert "model benchmark: paper batch, compiled (max-autotune)" in set(table.efficiency_summary(None, bench)["setting"])


def run_cli(*argv):
    args = build_parser().parse_args(["table", *map(str, argv)])
    return args.func(args)


def test_every_format_renders(runs, tmp_path, capsys):
    bench = bench_csv(tmp_path / "bench.csv")
    assert run_cli("accuracy", "efficiency", "--runs-dir", runs, "--bench", bench) == 0
    out, err = capsys.readouterr()
    assert "## Accuracy (test %)" in out and "## Efficiency — model benchmark: paper batch, eager" in out
    assert "skipping corrupt run record" in err and "broken/result.json" in err  # reported, with path; not fatal

    assert run_cli("accuracy", "--runs-dir", runs, "--format", "latex") == 0
    out = capsys.readouterr().out
    assert r"\begin{tabular}" in out and r"38.0 $\pm$ 2.0 (n=3)" in out and r"\bottomrule" in out

    assert run_cli("accuracy", "--runs-dir", runs, "--format", "csv") == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    row = frame[(frame["attention"] == "flash") & (frame["task"] == "listops")].iloc[0]
    assert row["mean"] == pytest.approx(38.0) and row["std"] == pytest.approx(2.0) and row["n"] == 3

    out_file = tmp_path / "tables" / "lra.csv"
    assert run_cli("accuracy", "efficiency", "--runs-dir", runs, "--bench", bench, "--format", "csv", "--out", out_file) == 0
    efficiency = pd.read_csv(tmp_path / "tables" / "lra-efficiency.csv")
    assert set(efficiency["kind"]) == {"runs", "bench"}
    assert (tmp_path / "tables" / "lra-accuracy.csv").stat().st_size > 0

    md_file = tmp_path / "tables" / "lra.md"
    assert run_cli("efficiency", "--bench", bench, "--runs-dir", runs, "--out", md_file) == 0
    assert md_file.read_text().startswith("## Efficiency")


def test_filters(runs, capsys):
    assert run_cli("accuracy", "--runs-dir", runs, "--tasks", "listops", "--attentions", "flash", "softmax",
                   "--format", "csv") == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(frame["task"]) == {"listops", "avg", "speedup"} and set(frame["attention"]) == {"flash", "softmax"}
    assert run_cli("accuracy", "--runs-dir", runs, "--seq-lens", "16K", "--format", "csv") == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(frame["task"]) == {"pathx"}
    assert table.parse_seq_len("4k") == 4096 and table.parse_seq_len("1000") == 1000
    with pytest.raises(ValueError, match="bad sequence length"):
        table.parse_seq_len("4M")


def test_bad_input_is_one_clear_error(tmp_path, runs, capsys):
    kernels = tmp_path / "kernels.csv"
    pd.DataFrame([{"impl": "flash", "pass": "fwd", "seq_len": 1024, "tflops": 1.0}]).to_csv(kernels, index=False)
    with pytest.raises(ValueError, match=r"kernels\.csv is a `lra bench kernels` CSV"):
        run_cli("--runs-dir", runs, "--bench", kernels)
    with pytest.raises(FileNotFoundError, match="benchmark CSV not found"):
        run_cli("--runs-dir", runs, "--bench", tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="unknown table 'speed'"):
        run_cli("speed", "--runs-dir", runs)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("--runs-dir", empty) == 1
    assert "nothing to tabulate" in capsys.readouterr().err


def test_a_misspelt_filter_name_is_an_error_naming_the_known_ones(tmp_path, runs, capsys):
    """--attentions / --tasks with a typo filtered every record out and said only "nothing to tabulate"."""
    with pytest.raises(ValueError, match=r"--attentions 'flashh': no such attention; available: .*flash.* "
                                         r"\(did you mean 'flash'\?\)"):
        run_cli("--runs-dir", runs, "--attentions", "flash", "flashh")
    with pytest.raises(ValueError, match=r"--tasks 'listopz': no such task; available: .*listops.* "
                                         r"\(did you mean 'listops'\?\)"):
        run_cli("--runs-dir", runs, "--tasks", "listopz")
    assert run_cli("--runs-dir", runs, "--attentions", "flash", "--tasks", "listops") == 0   # real names still work
    # a name that is not registered but that a benchmark CSV holds (the user's model's sdpa_flash) is known
    rows = [dict(attention=a, seq_len=1024, batch_size=32, tokens_per_batch=32768, regime="small", compile=False,
                 ms_per_step=ms, samples_per_s=None, tokens_per_s=32768 / ms * 1e3, peak_mem_gb=0.2, status="ok",
                 note="") for a, ms in (("sdpa", 6.0), ("sdpa_flash", 5.9), ("flash", 7.5))]
    bench = bench_csv(tmp_path / "user.csv", rows)
    assert run_cli("steps", "--bench", bench, "--attentions", "sdpa_flash", "flash") == 0
    capsys.readouterr()
    # real names that leave nothing: the message says the filters matched nothing in either source
    assert run_cli("steps", "--bench", bench, "--attentions", "flash", "--seq-lens", "64K") == 1
    assert "match the filters and no --bench CSV rows do" in capsys.readouterr().err


def test_out_folder_and_unknown_baseline_are_clear_errors(tmp_path, runs, capsys):
    # --out naming a folder is one clear error (not an IsADirectoryError from os.replace).
    with pytest.raises(ValueError, match="--out .*: is a folder; give a file name"):
        run_cli("--runs-dir", runs, "--out", tmp_path)
    assert not list(tmp_path.glob(".*.tmp"))
    # A misspelt --baseline is an error naming the attentions, not a table of empty ("–") speedups.
    with pytest.raises(ValueError, match="--baseline 'Softmax': no such attention; available: .*softmax"):
        run_cli("--runs-dir", runs, "--baseline", "Softmax")
    assert run_cli("efficiency", "--runs-dir", runs, "--baseline", "flash") == 0  # a real one still works
    assert "vs flash" in capsys.readouterr().out
    # Several tables as CSV on the terminal would be several CSVs in one stream, parseable as none.
    with pytest.raises(ValueError, match="--format csv on the terminal prints one table"):
        run_cli("record", "accuracy", "--runs-dir", runs, "--format", "csv")
    assert run_cli("accuracy", "--runs-dir", runs, "--format", "csv") == 0


def test_formatting_helpers():
    assert table.format_seq_len(16384) == "16K" and table.format_seq_len(1000) == "1000"
    assert table.format_rate(1_234_567) == "1.23M" and table.format_rate(45_600) == "45.6k"
    assert table.format_duration(3725) == "1h02m" and table.format_duration(200) == "3m20s"
    assert table.latex_escape("a_b ± 1%") == r"a\_b $\pm$ 1\%"


def test_a_record_with_a_non_numeric_result_is_reported_and_skipped(runs, capsys):
    # A hand-edited "test_acc": "0.37" (valid JSON) is reported, not silently left out of the tables.
    record(runs, "listops", "linformer", 0, acc=0.5, test_acc="0.37")
    assert run_cli("accuracy", "--runs-dir", runs, "--format", "csv") == 0
    out, err = capsys.readouterr()
    assert "skipping corrupt run record" in err and "listops/linformer/paper-n1024-s0/result.json" in err
    assert "'test_acc' is '0.37', expected a number or null" in err
    assert "linformer" not in set(pd.read_csv(io.StringIO(out))["attention"])


def test_papers_numbers_only_beside_runs_in_the_papers_setting(tmp_path, published):
    """CPU runs of a small preset get no papers' rows, no Δ and no speed-up from the interpreter."""
    from lra.records import load_records

    for attention, tokens in (("softmax", 1000.0), ("flash", 40.0), ("performer", 1500.0)):
        record(tmp_path, "listops", attention, 0, acc=0.4, seq_len=32, tokens=tokens, preset="smoke",
               device="cpu (x86_64)", run_id="smoke-s0")
    records = load_records(tmp_path)
    summary = table.accuracy_summary(records, published)
    assert not summary["paper_compared"].any()
    assert summary["delta_fa"].isna().all() and summary["published_fa"].isna().all()
    assert set(summary[summary["task"] == "speedup"]["attention"]) == {"softmax", "performer"}
    section = table.accuracy_sections(summary, published, records)[0]
    assert list(section.table["Numbers"]) == ["ours"] * 3
    assert section.table.set_index("Attention").loc["FlashAttention", "Speedup"] == "–"
    assert section.subtitle.startswith("Runs: preset smoke; device cpu (x86_64)")
    efficiency = table.efficiency_summary(records)
    assert efficiency.set_index("attention").loc["flash", "status"] == "interpreted"
    section = table.efficiency_sections(efficiency, records=records)[0]
    flash = section.table[section.table["Attention"] == "FlashAttention"].iloc[0]
    assert (flash["Metric"], flash["32"]) == ("status", "interpreter")
    assert section.subtitle.startswith("Runs: preset smoke")


def test_accuracy_rows_join_an_attentions_tasks_and_split_only_a_task_on_two_data_sets(tmp_path, published):
    """Every task reads its own data set, so one attention's tasks share its row; a task run on two data
    sets splits the attention's rows by data id (runs on different data are never pooled)."""
    from lra.records import load_records

    record(tmp_path, "listops", "flash", 0, acc=0.37, seq_len=2000, data={"source": "generated", "id": "a" * 12})
    record(tmp_path, "pathfinder32", "flash", 0, acc=0.75, data={"source": "generated", "id": "b" * 12})
    records = load_records(tmp_path)
    section = table.accuracy_sections(table.accuracy_summary(records, published), published, records)[0]
    ours = section.table[section.table["Numbers"] == "ours"].set_index("Attention")
    assert list(ours.index) == ["FlashAttention"]
    assert ours.loc["FlashAttention", "ListOps"].startswith("37.0")
    assert ours.loc["FlashAttention", "Pathfinder"].startswith("75.0")

    record(tmp_path, "listops", "flash", 0, acc=0.30, seq_len=2000, data={"source": "official", "id": "c" * 12},
           run_id="official-s0")
    records = load_records(tmp_path)
    section = table.accuracy_sections(table.accuracy_summary(records, published), published, records)[0]
    ours = section.table[section.table["Numbers"] == "ours"].set_index("Attention")
    assert ours.loc[f"FlashAttention (data {'a' * 12})", "ListOps"].startswith("37.0")
    assert ours.loc[f"FlashAttention (data {'c' * 12})", "ListOps"].startswith("30.0")
