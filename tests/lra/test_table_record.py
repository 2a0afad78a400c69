"""`lra table` (record): the LRA table of record from synthetic run records, one test per rule."""
import io
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from lra import published as pub
from lra import table
from lra.cli import build_parser

PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "results" / "published"
LISTOPS_DATA = {"source": "generated", "id": "aaaaaaaaaaaa", "description": "ListOps generator v1, 96k/2k/2k",
                "generator": {"name": "listops", "version": 1, "params": {}}, "path": None,
                "splits": {"train": 96000, "val": 2000, "test": 2000}, "content_hash": None}
OFFICIAL_DATA = {"source": "official", "id": "bbbbbbbbbbbb", "description": "LRA release listops-1000",
                 "generator": None, "path": "/data/listops", "splits": {"train": 96000, "val": 2000, "test": 2000},
                 "content_hash": "f00d"}


def config(task="listops", *, batch=32, max_steps=5000, augment="none", source="auto", limit_train=None,
           lr=1e-4):
    return {"task": task, "model": {"dim": 64, "depth": 2}, "optim": {"lr": lr},
            "data": {"source": source, "augment": augment, "limit_train": limit_train},
            "train": {"batch_size": batch, "max_steps": max_steps}}


def write(root, task, attention, seed, acc, *, status="completed", preset="paper", seq_len=2000, best=None,
          tokens=1000.0, step_ms=10.0, steps=5000, data=LISTOPS_DATA, runs_per_gpu=1, device="NVIDIA H200",
          cfg=None, run_id=None, **extra):
    """A record as `lra train` writes it (JSON, so that any status and the data / sharing keys can be set);
    data=None / runs_per_gpu=None leave those keys out, as older records do."""
    run_id = run_id or f"{preset}-n{seq_len}-s{seed}-{(data or {}).get('id', 'old')[:4]}-{runs_per_gpu}"
    done = status == "completed"
    record = dict(run_id=run_id, task=task, attention=attention, attention_options={}, seq_len=seq_len, seed=seed,
                  preset=preset, status=status, error=None if done else f"{status}: something (seed {seed})",
                  best_val_acc=best if best is not None else acc, test_acc=acc if done else None,
                  val_acc_curve=[{"step": 100 * i, "wall_s": 10.0 * i, "val_acc": 0.1 * i} for i in range(1, 4)],
                  steps=steps, wall_time_s=600.0, time_to_best_s=300.0 if done else None,
                  step_time_ms=step_ms if done else None, train_tokens_per_s=tokens if done else None,
                  train_samples_per_s=tokens / seq_len if done else None, peak_mem_gb=1.0 if done else None,
                  batch_size=(cfg or {}).get("train", {}).get("batch_size", 32), device=device,
                  precision="bf16-mixed", compile=True, created=f"2026-01-01T00:00:{seed:02d}",
                  config=cfg or config(task))
    if data is not None:
        record["data"] = data
    if runs_per_gpu is not None:
        record["sharing"] = {"runs_per_gpu": runs_per_gpu}
    record.update(extra)
    path = Path(root) / task / attention / run_id / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


@pytest.fixture(scope="module")
def published():
    return pub.load_accuracy(PUBLISHED_DIR)


def summary_of(root, published, **kwargs):
    return table.record_summary(table.load_run_records(root), published, **kwargs)


def row(summary, task, attention, **match):
    hit = summary[(summary["task"] == task) & (summary["attention"] == attention)]
    for key, value in match.items():
        hit = hit[hit[key] == value]
    assert len(hit) == 1, hit
    return hit.iloc[0]


def test_mean_std_n_and_the_papers_number(tmp_path, published):
    for seed, acc in enumerate((0.36, 0.38, 0.40)):
        write(tmp_path, "listops", "flash", seed, acc, data=OFFICIAL_DATA)
    flash = row(summary_of(tmp_path, published), "listops", "flash")
    assert (flash["n"], flash["seeds"]) == (3, "0 1 2")
    assert flash["mean"] == pytest.approx(38.0) and flash["std"] == pytest.approx(2.0)
    assert flash["published"] == 37.6 and flash["delta"] == pytest.approx(0.4)  # FlashAttention paper, Table 3
    assert flash["setting"] == "paper" and flash["paper_setting"]


def test_runs_at_chance_are_marked_and_counted(tmp_path, published):
    write(tmp_path, "pathfinder32", "flash", 0, 0.505, seq_len=1024, cfg=config("pathfinder32", batch=256,
                                                                                 max_steps=62400), steps=62400)
    write(tmp_path, "pathfinder32", "flash", 1, 0.512, seq_len=1024, cfg=config("pathfinder32", batch=256,
                                                                                 max_steps=62400), steps=62400)
    write(tmp_path, "listops", "flash", 0, 0.115, best=0.119)   # ListOps chance is 10 %: 11.9 <= 12
    write(tmp_path, "listops", "flash", 1, 0.36, best=0.37)
    summary = summary_of(tmp_path, published)
    pathfinder = row(summary, "pathfinder32", "flash")
    assert (pathfinder["n"], pathfinder["at_chance"], pathfinder["chance_pct"]) == (2, 2, 50.0)
    listops = row(summary, "listops", "flash")
    assert (listops["n"], listops["at_chance"]) == (2, 1) and "1 of 2 seeds at chance" in listops["notes"]
    assert listops["mean"] == pytest.approx((11.5 + 36.0) / 2)  # never dropped
    shown = table.record_sections(summary, published)[0].table.set_index(["Task", "Attention"])
    assert shown.loc[("Pathfinder", "FlashAttention"), "Test acc. (%)"] == "50.9 ± 0.5 (at chance)"
    assert "(at chance)" not in shown.loc[("ListOps", "FlashAttention"), "Test acc. (%)"]


def test_runs_on_different_data_are_two_rows(tmp_path, published):
    write(tmp_path, "listops", "flash", 0, 0.36)
    write(tmp_path, "listops", "flash", 1, 0.38)
    write(tmp_path, "listops", "flash", 0, 0.50, data=OFFICIAL_DATA)
    summary = summary_of(tmp_path, published)
    generated = row(summary, "listops", "flash", data_id="aaaaaaaaaaaa")
    official = row(summary, "listops", "flash", data_id="bbbbbbbbbbbb")
    assert (generated["n"], generated["mean"]) == (2, pytest.approx(37.0))
    assert (official["n"], official["mean"]) == (1, pytest.approx(50.0))
    assert "generated data (paper: official release)" in generated["setting"]
    assert official["setting"] == "paper"
    section = table.record_sections(summary, published)[0]
    assert set(section.table["Data"]) >= {"generated aaaaaaaaaaaa", "official bbbbbbbbbbbb"}
    notes = "\n".join(section.notes)
    assert "Data aaaaaaaaaaaa: ListOps generator v1" in notes and "Data bbbbbbbbbbbb: LRA release" in notes
    # the accuracy table keeps them apart too
    accuracy = table.accuracy_summary(table.load_run_records(tmp_path), published)
    assert sorted(accuracy[accuracy["task"] == "listops"]["n"]) == [1, 2]


def test_runs_on_several_devices_say_so_in_their_row(tmp_path, published):
    """A data-parallel run's optimizer sees one batch per device: its own row, which names the devices
    and the global batch (two rows with the same setting text were indistinguishable)."""
    ddp = config()
    ddp["train"]["devices"] = 2
    write(tmp_path, "listops", "flash", 0, 0.36)
    write(tmp_path, "listops", "flash", 0, 0.38, cfg=ddp, devices=2, run_id="paper-n2000-s0-ddp2")
    summary = summary_of(tmp_path, published)
    rows = summary[(summary["task"] == "listops") & (summary["attention"] == "flash")]
    assert len(rows) == 2
    with_devices = [setting for setting in rows["setting"] if "2 devices (global batch 2 × 32)" in setting]
    assert len(with_devices) == 1, list(rows["setting"])


def test_only_runs_alone_on_their_gpu_give_speed(tmp_path, published):
    write(tmp_path, "listops", "softmax", 0, 0.36, tokens=1000.0, step_ms=30.0)
    write(tmp_path, "listops", "flash", 0, 0.37, tokens=3000.0, step_ms=10.0)
    write(tmp_path, "listops", "flash", 1, 0.37, tokens=9000.0, step_ms=3.0, runs_per_gpu=4)  # shared: not speed
    write(tmp_path, "listops", "performer", 0, 0.30, tokens=5000.0, runs_per_gpu=2)
    summary = summary_of(tmp_path, published)
    flash = row(summary, "listops", "flash")
    assert flash["n"] == 2  # the shared run's accuracy counts
    assert flash["speedup"] == pytest.approx(3.0) and flash["step_ms"] == pytest.approx(10.0)
    assert flash["speed_source"] == "runs (n=1)" and "sharing a GPU (4 runs per GPU) left out" in flash["notes"]
    assert flash["time_to_best_s"] == 300.0 and not flash["time_to_best_estimated"]
    performer = row(summary, "listops", "performer")
    assert math.isnan(performer["speedup"]) and math.isnan(performer["step_ms"])
    assert math.isnan(performer["time_to_best_s"]) and performer["speed_source"] == "shared GPU: not shown"
    assert not performer["time_to_best_estimated"]  # no benchmark to estimate it from
    assert row(summary, "listops", "softmax")["speedup"] == pytest.approx(1.0)
    # the efficiency and accuracy tables leave shared timings out as well
    efficiency = table.efficiency_summary(table.load_run_records(tmp_path))
    assert efficiency[efficiency["attention"] == "flash"]["tokens_per_s"].iloc[0] == 3000.0
    assert efficiency[efficiency["attention"] == "performer"]["status"].iloc[0] == "shared"


def test_speed_from_a_model_benchmark_csv(tmp_path, published):
    write(tmp_path, "listops", "softmax", 0, 0.36, runs_per_gpu=8)
    write(tmp_path, "listops", "flash", 0, 0.37, runs_per_gpu=8)
    rows = [dict(attention=a, seq_len=2000, batch_size=b, tokens_per_batch=2000 * b, regime="custom", compile=c,
                 ms_per_step=ms * (0.5 if c else 1.0) * b / 32, tokens_per_s=1.0, peak_mem_gb=1.0, status="ok")
            for a, ms in (("softmax", 24.0), ("flash", 8.0)) for b in (16, 32) for c in (False, True)]
    bench = tmp_path / "bench.csv"
    pd.DataFrame(rows).to_csv(bench, index=False)
    summary = summary_of(tmp_path / "listops", published, speed=table.load_bench([bench]))
    flash = row(summary, "listops", "flash")
    assert flash["speedup"] == pytest.approx(3.0) and flash["step_ms"] == pytest.approx(4.0)  # compiled, batch 32
    assert flash["speed_source"] == "bench bench.csv (custom batch 32, compiled)"
    # its runs shared a GPU: time to best = best step (300) x the benchmark's step time, marked as such
    assert flash["time_to_best_s"] == pytest.approx(300 * 4.0 / 1000) and flash["time_to_best_estimated"]
    shown = table.record_sections(summary, published)[0].table.set_index(["Task", "Attention"])
    assert shown.loc[("ListOps", "FlashAttention"), "Time to best"].startswith("≈ ")


def test_tasks_without_runs_appear_with_the_papers_numbers(tmp_path, published):
    write(tmp_path, "listops", "flash", 0, 0.37)
    summary = summary_of(tmp_path, published)
    assert list(summary["task"]) == ["listops", "text", "retrieval", "image", "pathfinder32", "pathx", "path256"]
    for task, paper in (("text", 63.9), ("retrieval", 81.4), ("image", 43.5)):
        missing = row(summary, task, "flash")
        assert not missing["ran"] and missing["published"] == paper and missing["n"] == 0
        assert missing["notes"] == "not run here: data not available offline"
    assert row(summary, "pathx", "flash")["published"] == 61.4  # Table 6
    assert row(summary, "path256", "flash")["published_failed"]
    assert row(summary, "pathfinder32", "flash")["notes"] == "not run here"
    shown = table.record_sections(summary, published)[0].table.set_index("Task")
    assert shown.loc["Text", "Paper (%)"] == "63.9" and shown.loc["Path-256", "Paper (%)"] == "fail"
    # an attention asked for but never run gets rows too
    sparse = summary_of(tmp_path, published, tasks=["listops"], attentions=["flash_sparse"])
    assert row(sparse, "listops", "flash_sparse")["published"] == 37.0


def test_a_variant_is_a_row_of_its_own_named_in_the_rendered_table(tmp_path, published):
    """Runs of one attention that differ in a setting (here a longer schedule than the preset's) are
    not pooled, and the rendered table says which row is which: the variant beside the attention's
    name, the longer schedule in the setting (it departs from the paper as a shorter one does)."""
    for seed in (0, 1):
        write(tmp_path, "listops", "flash", seed, 0.36)
    write(tmp_path, "listops", "flash", 0, 0.40, steps=8000, cfg=config(max_steps=8000), run_id="longer")
    summary = summary_of(tmp_path, published)
    flash = summary[(summary["task"] == "listops") & (summary["attention"] == "flash")]
    assert sorted(flash["n"]) == [1, 2]
    longer = flash[flash["n"] == 1].iloc[0]
    assert longer["variant"] == "train.max_steps=8000" and "8,000 steps (preset 5,000)" in longer["setting"]
    assert flash[flash["n"] == 2].iloc[0]["setting"] == "generated data (paper: official release)"
    text = table.render(table.record_sections(summary, published), "markdown")
    assert "| FlashAttention (train.max_steps=5000) " in text and "| FlashAttention (train.max_steps=8000) " in text


def test_settings_that_depart_from_the_paper_are_named(tmp_path, published):
    write(tmp_path, "listops", "flash", 0, 0.30, preset="smoke", seq_len=128, device="cpu (x86_64)",
          cfg=config(batch=8, max_steps=20), steps=20)
    write(tmp_path, "listops", "flash", 0, 0.33, steps=1200)                       # stopped early
    write(tmp_path, "listops", "flash", 0, 0.34, device="cpu (x86_64)", run_id="cpu", cfg=config(batch=16))
    write(tmp_path, "pathfinder32", "flash", 0, 0.70, seq_len=1024, steps=62400,
          cfg=config("pathfinder32", batch=256, max_steps=62400, augment="dihedral", limit_train=80000))
    summary = summary_of(tmp_path, published)
    smoke = row(summary, "listops", "flash", preset="smoke")
    assert smoke["setting"].startswith("preset smoke") and "CPU" in smoke["setting"]
    assert math.isnan(smoke["published"]) and math.isnan(smoke["delta"]) and "no paper comparison" in smoke["notes"]
    paper = summary[(summary["task"] == "listops") & (summary["preset"] == "paper")]
    short = paper[paper["setting"].str.contains("steps")].iloc[0]
    assert "1,200/5,000 steps" in short["setting"] and short["published"] == 37.6
    cpu = paper[paper["setting"].str.contains("CPU")].iloc[0]
    assert math.isnan(cpu["delta"]) and "CPU run" in cpu["notes"]
    pathfinder = row(summary, "pathfinder32", "flash")
    assert "augment dihedral" in pathfinder["setting"] and "first 80,000 training examples" in pathfinder["setting"]
    assert not pathfinder["paper_setting"] and pathfinder["delta"] == pytest.approx(70.0 - 72.7)
    text = table.render(table.record_sections(summary, published), "markdown")
    assert re.search(r"\| ListOps \(128\) +\| FlashAttention +\| generated aaaaaaaaaaaa \| preset smoke;", text)
    # the two `paper` cells differ in their batch size: each row names its own
    assert "| FlashAttention (train.batch_size=16) " in text and "| FlashAttention (train.batch_size=32) " in text


def test_runs_that_did_not_complete_are_listed(tmp_path, published):
    write(tmp_path, "listops", "flash", 0, 0.37)
    write(tmp_path, "listops", "flash", 1, None, status="diverged")
    write(tmp_path, "listops", "softmax", 0, None, status="oom")
    write(tmp_path, "listops", "performer", 0, None, status="interrupted")
    summary = summary_of(tmp_path, published)
    flash = row(summary, "listops", "flash")
    assert (flash["n"], flash["diverged"]) == (1, 1) and "1 diverged" in flash["notes"]
    section = table.record_sections(summary, published, table.load_run_records(tmp_path))[0]
    shown = section.table[section.table["Task"] == "ListOps"].set_index("Attention")
    assert shown.loc["Transformer", "Test acc. (%)"] == "OOM"
    assert shown.loc["Performer", "Test acc. (%)"] == "interrupted"
    assert any(note.startswith("Not counted — diverged: listops / flash") for note in section.notes)


def test_older_records_without_data_or_sharing_still_load(tmp_path, published):
    write(tmp_path, "listops", "softmax", 0, 0.36, data=None, runs_per_gpu=None, tokens=1000.0)
    write(tmp_path, "listops", "flash", 0, 0.37, data=None, runs_per_gpu=None, tokens=2000.0,
          cfg=config(source="generated"))
    df = table.normalise_records(table.load_run_records(tmp_path))
    assert set(df["data_id"]) == {"unknown"} and set(df["data_source"]) == {"auto", "generated"}
    assert (df["runs_per_gpu"] == 1).all() and not df["sharing_known"].any()
    flash = row(summary_of(tmp_path, published), "listops", "flash")
    assert flash["speedup"] == pytest.approx(2.0) and flash["speed_source"] == "runs (n=1, sharing not recorded)"
    shown = table.record_sections(summary_of(tmp_path, published), published)[0].table
    assert "generated (data id not recorded)" in set(shown["Data"])


def run_cli(*argv):
    args = build_parser().parse_args(["table", *map(str, argv)])
    return args.func(args)


def test_cli_formats_parse(tmp_path, capsys):
    runs = tmp_path / "runs"
    for seed, acc in enumerate((0.36, 0.38, 0.40)):
        write(runs, "listops", "flash", seed, acc)
    assert run_cli("--runs-dir", runs) == 0  # the table of record is the default
    out = capsys.readouterr().out
    assert out.startswith("## LRA table of record") and "| 38.0 ± 2.0" in out and "not run here" in out

    assert run_cli("--runs-dir", runs, "--format", "csv") == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(frame.columns) == table.RECORD_COLUMNS
    flash = frame[(frame["task"] == "listops") & (frame["attention"] == "flash")].iloc[0]
    assert (flash["n"], flash["mean"], flash["std"], flash["published"]) == (3, 38.0, 2.0, 37.6)
    assert set(frame[frame["n"] == 0]["task"]) == {"text", "retrieval", "image", "pathfinder32", "pathx", "path256"}

    out_file = tmp_path / "record.tex"
    assert run_cli("record", "--runs-dir", runs, "--format", "tex", "--out", out_file) == 0
    latex = out_file.read_text()
    assert latex.count(r"\begin{tabular}") == 1 and r"\toprule" in latex and r"\bottomrule" in latex
    head, body = latex.split(r"\midrule")[0], latex.split(r"\midrule")[1].split(r"\bottomrule")[0]
    assert r"38.0 $\pm$ 2.0" in body and "±" not in body and r"$\Delta$" in head and r"Test acc. (\%)" in head
    assert all(line.count("&") == len(table.record_sections(table.record_summary(
        table.load_run_records(runs)))[0].table.columns) - 1 for line in body.strip().splitlines())

    md_file = tmp_path / "record.md"
    assert run_cli("--runs-dir", runs, "--format", "md", "--out", md_file) == 0
    assert md_file.read_text().startswith("## LRA table of record")


def test_folders_of_committed_records_are_read(tmp_path, capsys):
    """results/** holds records under other names than result.json, next to provenance and other JSON."""
    committed = tmp_path / "results" / "training"
    committed.mkdir(parents=True)
    write(tmp_path / "tree", "listops", "flash", 0, 0.37).rename(committed / "listops_flash_paper_h200.json")
    write(tmp_path / "tree", "listops", "flash", 1, 0.39).rename(committed / "result_flash_paper-s1.json")
    (committed / "bench.meta.json").write_text(json.dumps({"task": "listops", "attention": "flash",
                                                             "status": "completed"}))
    (committed / "tuning.json").write_text(json.dumps({"configs": [1, 2]}))
    (committed / "result_torn.json").write_text('{"task": "listops", ')
    with pytest.warns(UserWarning, match="result_torn.json"):
        records = table.load_run_records(committed.parent)
    assert sorted(Path(p).name for p in records["path"]) == ["listops_flash_paper_h200.json",
                                                              "result_flash_paper-s1.json"]
    assert run_cli("--runs-dir", committed.parent, "--format", "csv") == 0
    captured = capsys.readouterr()
    frame = pd.read_csv(io.StringIO(captured.out))
    assert frame[frame["task"] == "listops"]["n"].iloc[0] == 2 and "result_torn.json" in captured.err
    assert run_cli("--runs-dir", committed / "result_flash_paper-s1.json", "--format", "csv") == 0  # one file
    assert pd.read_csv(io.StringIO(capsys.readouterr().out))["n"].max() == 1


CPU = "cpu (x86_64)"


def smoke(root, attention, acc, *, tokens=1000.0, step_ms=100.0, seed=0):
    """A CPU run of a small preset, as the README's main job writes it."""
    return write(root, "listops", attention, seed, acc, preset="smoke", seq_len=32, device=CPU, tokens=tokens,
                 step_ms=step_ms, steps=400, cfg=config(batch=16, max_steps=400), run_id=f"smoke-s{seed}")


def test_a_table_without_paper_runs_has_no_paper_columns(tmp_path, published):
    smoke(tmp_path, "softmax", 0.42)
    smoke(tmp_path, "flash", 0.41)
    records = table.load_run_records(tmp_path)
    summary = table.record_summary(records, published)
    assert list(summary["task"]) == ["listops", "listops"]  # no rows for the paper's tasks not run here
    assert summary["published"].isna().all() and summary["delta"].isna().all()
    assert not summary["paper_compared"].any()
    section = table.record_sections(summary, published, records)[0]
    assert "Paper (%)" not in section.table.columns and "Δ" not in section.table.columns
    assert any(note.startswith("No paper columns") for note in section.notes)
    assert not any("Tri Dao" in note for note in section.notes)


def test_runs_of_the_paper_preset_on_a_gpu_keep_the_paper_columns(tmp_path, published):
    write(tmp_path, "listops", "flash", 0, 0.37)
    smoke(tmp_path, "flash", 0.41)
    records = table.load_run_records(tmp_path)
    summary = table.record_summary(records, published)
    section = table.record_sections(summary, published, records)[0]
    shown = section.table[section.table["Task"].str.startswith("ListOps")].set_index("Task")
    assert shown.loc["ListOps (2000)", "Paper (%)"] == "37.6" and shown.loc["ListOps (2000)", "Δ"] == "-0.6"
    assert shown.loc["ListOps (32)", "Paper (%)"] == "–" and shown.loc["ListOps (32)", "Δ"] == "–"
    assert "text" in set(summary["task"])  # the paper's tasks appear beside runs compared with it


def test_the_header_names_preset_device_and_the_interpreter(tmp_path, published):
    smoke(tmp_path, "softmax", 0.42)
    smoke(tmp_path, "flash", 0.41)
    records = table.load_run_records(tmp_path)
    text = table.render(table.record_sections(table.record_summary(records, published), published, records))
    header = text.split("\n\n")[1]
    assert header.startswith("Runs: preset smoke; device cpu (x86_64); ")
    assert "Triton kernels (FlashAttention) through Triton's CPU interpreter" in header
    assert "no paper numbers" in header
    write(tmp_path / "gpu", "listops", "flash", 0, 0.37)
    gpu = table.load_run_records(tmp_path / "gpu")
    section = table.record_sections(table.record_summary(gpu, published), published, gpu)[0]
    assert section.subtitle.startswith("Runs: preset paper; device NVIDIA H200; Triton kernels compiled for the GPU")


def test_timings_through_the_interpreter_are_not_speed(tmp_path, published):
    smoke(tmp_path, "softmax", 0.42, tokens=1000.0)
    smoke(tmp_path, "flash", 0.41, tokens=40.0, step_ms=2500.0)
    smoke(tmp_path, "performer", 0.38, tokens=1500.0)
    summary = summary_of(tmp_path, published)
    flash = row(summary, "listops", "flash")
    assert math.isnan(flash["speedup"]) and math.isnan(flash["step_ms"]) and math.isnan(flash["time_to_best_s"])
    assert flash["speed_source"] == "interpreter: not shown" and "through the Triton interpreter" in flash["notes"]
    assert row(summary, "listops", "performer")["speedup"] == pytest.approx(1.5)  # a CPU measurement, shown
    shown = table.record_sections(summary, published)[0].table.set_index(["Task", "Attention"])
    assert shown.loc[("ListOps", "FlashAttention"), "Speed vs Transformer"] == "–"
    efficiency = table.efficiency_summary(table.load_run_records(tmp_path)).set_index("attention")
    assert efficiency.loc["flash", "status"] == "interpreted" and efficiency.loc["performer", "status"] == "ok"
