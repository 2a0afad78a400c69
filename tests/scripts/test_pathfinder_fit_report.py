"""scripts/pathfinder_fit_report.py: the table and figure from a probe call's files."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture(scope="module")
def report(load_script):
    return load_script("pathfinder_fit_report")


def _probe(folder: Path, name: str, run_id: str, *, metrics: bool, batch=64, limit_train=1000, steps=50):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.log").write_text(f"step {steps}/100 ...\n  record: /root/runs/{name}/pathfinder32/flash/{run_id}/result.json\n")
    record = {"task": "pathfinder32", "attention": "flash", "steps": steps, "step_time_ms": 12.34,
              "best_val_acc": 0.5351, "test_acc": 0.505,
              "val_acc_curve": [{"step": 25, "wall_s": 1.0, "val_acc": 0.5}, {"step": 50, "wall_s": 2.0, "val_acc": 0.5351}],
              "config": {"train": {"batch_size": batch}, "data": {"limit_train": limit_train, "difficulty": None},
                         "optim": {"lr": 1e-3}}}
    (folder / f"result_flash_{run_id}.json").write_text(json.dumps(record))
    if metrics:
        rows = [{"step": s, "train/acc": acc, "val/acc": None} for s, acc in ((10, 0.5), (20, 0.6), (46, 0.7), (50, 0.9))]
        rows.append({"step": 50, "train/acc": None, "val/acc": 0.53})  # a validation row is skipped
        pd.DataFrame(rows).to_csv(folder / f"metrics_{name}.csv", index=False)


def test_table_values_and_figure(tmp_path, report):
    _probe(tmp_path / "a", "P1", "paper-n1024-s0-aaaa", metrics=True)
    _probe(tmp_path / "b", "F1", "paper-n1024-s0-bbbb", metrics=False, batch=256, limit_train=2000, steps=40)
    (tmp_path / "a" / "lane0.log").write_text("[3s] P1: batch 64\n")  # lane logs name no record
    table, curves = report.summarise([tmp_path / "a", tmp_path / "b"])
    p1, f1 = table.set_index("run").loc["P1"], table.set_index("run").loc["F1"]
    assert p1["train acc % (last 10 %)"] == pytest.approx(80.0)  # steps >= 45: 0.7 and 0.9
    assert p1["epochs"] == pytest.approx(50 * 64 / 1000, abs=0.05) and p1["difficulty"] == "hard"
    assert (p1["best val %"], p1["test %"], p1["ms/step"]) == (53.5, 50.5, 12.3)
    assert pd.isna(f1["train acc % (last 10 %)"]) and f1["epochs"] == pytest.approx(5.1, abs=0.05)
    assert set(curves["kind"]) == {"train (dropout on)", "validation"}
    report.plot(curves, tmp_path / "fig" / "fit")
    assert (tmp_path / "fig" / "fit.png").stat().st_size > 1000 and (tmp_path / "fig" / "fit.pdf").exists()


def test_a_run_interrupted_at_a_deadline_is_reported_without_test(tmp_path, report):
    """Multi-call runs (pathfinder_augment_long.sh) stop at a call's deadline: no record line in the
    log, a record without test accuracy; the run is found by its `training ...` line."""
    _probe(tmp_path, "L1", "paper-n1024-s0-cccc", metrics=True)
    (tmp_path / "L1.log").write_text("training pathfinder32/flash paper-n1024-s0-cccc on cuda (x) -> runs/L1\n"
                                     "step 50/62500  val_acc 0.5351\n\nDetected KeyboardInterrupt\n")
    path = tmp_path / "result_flash_paper-n1024-s0-cccc.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), status="failed", test_acc=None)))
    table, _ = report.summarise([tmp_path])
    row = table.set_index("run").loc["L1"]
    assert row["best val %"] == 53.5 and pd.isna(row["test %"]) and row["train acc % (last 10 %)"] == 80.0


def test_a_log_whose_record_is_missing_is_reported(tmp_path, report):
    _probe(tmp_path, "P1", "paper-n1024-s0-aaaa", metrics=False)
    (tmp_path / "result_flash_paper-n1024-s0-aaaa.json").unlink()
    with pytest.raises(SystemExit, match="no result_\\*_paper-n1024-s0-aaaa.json"):
        report.summarise([tmp_path])
