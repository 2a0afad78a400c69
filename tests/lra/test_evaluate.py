"""`lra eval`: a run's checkpoint on its test / validation split, on CPU with a tiny ListOps run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lra.cli import main
from lra.config import resolve
from lra.evaluate import evaluate, locate
from lra.train import train

FAST = ["train.max_steps=6", "train.val_check_interval=3", "train.batch_size=8", "data.limit_train=48",
        "data.limit_eval=24", "train.throughput_warmup_steps=1", "optim.warmup_steps=2"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A completed smoke ListOps run with the materialised softmax: (run folder, its record)."""
    root = tmp_path_factory.mktemp("eval")
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=root / "runs",
                     data_dir=root / "data", overrides=FAST)
    record = train(config, progress_bar=False)
    assert record["status"] == "completed"
    return config.run_dir(), record


def test_best_checkpoint_on_the_test_split_reproduces_the_runs_test_accuracy(finished_run):
    run_dir, record = finished_run
    result = evaluate(run_dir, progress_bar=False)
    assert result["split"] == "test" and result["examples"] == 24 and result["attention"] == "softmax"
    assert result["accuracy"] == pytest.approx(record["test_acc"], abs=1e-6)
    assert Path(result["checkpoint"]).name.startswith("best-step")
    best_step = max(record["val_acc_curve"], key=lambda p: p["val_acc"])["step"]
    assert result["step"] == best_step


def test_last_checkpoint_on_the_validation_split_is_the_last_validation(finished_run):
    run_dir, record = finished_run
    result = evaluate(run_dir / "checkpoints" / "last.ckpt", split="val", progress_bar=False)
    assert result["step"] == record["steps"] == 6
    assert result["accuracy"] == pytest.approx(record["val_acc_curve"][-1]["val_acc"], abs=1e-6)
    assert evaluate(run_dir, which="last", split="val", progress_bar=False)["accuracy"] == result["accuracy"]


def test_another_exact_attention_gives_the_same_predictions(finished_run):
    run_dir, record = finished_run
    result = evaluate(run_dir, attention="sdpa", progress_bar=False)
    assert result["attention"] == "sdpa" and result["trained_attention"] == "softmax"
    assert abs(result["accuracy"] - record["test_acc"]) <= 1 / 24 + 1e-9   # at most one near-tie flips
    with pytest.raises(ValueError, match="only the exact dense attentions"):
        evaluate(run_dir, attention="performer", progress_bar=False)


def test_limit_evaluates_the_first_examples_of_the_runs_own_split(finished_run, monkeypatch):
    """--limit N reads the first N examples of the data the run was tested on. Sizing generated ListOps
    by N instead would make another data set, whose test rows are the run's validation rows."""
    from tasks.base import LraDataModule

    run_dir, record = finished_run
    read = {}
    setup = LraDataModule.setup

    def spy(self, stage=None):
        setup(self, stage)
        read.update(self.datasets)

    monkeypatch.setattr(LraDataModule, "setup", spy)
    whole = evaluate(run_dir, progress_bar=False)
    first = [read["test"][i]["input_ids"] for i in range(8)]
    result = evaluate(run_dir, limit=8, progress_bar=False)
    assert result["examples"] == 8 and len(read["test"]) == 8
    assert all(torch.equal(read["test"][i]["input_ids"], first[i]) for i in range(8))
    assert result["data"]["id"] == whole["data"]["id"] == record["data"]["id"] == result["data"]["run_data_id"]


def test_cli_prints_and_writes_json(finished_run, tmp_path, capsys):
    run_dir, record = finished_run
    out = tmp_path / "eval.json"
    assert main(["eval", str(run_dir), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "listops/softmax test accuracy" in printed and "on 24 examples" in printed
    assert "not the data of the run's record" not in printed
    saved = json.loads(out.read_text())
    assert saved["accuracy"] == pytest.approx(record["test_acc"], abs=1e-6) and saved["run"] == str(run_dir)
    assert saved["data"]["id"] == record["data"]["id"] and saved["data"]["source"] == "generated"
    assert saved["versions"]["torch"] == torch.__version__ and saved["git_rev"] and saved["date"]


def test_data_other_than_the_runs_is_said(finished_run, tmp_path, capsys):
    """The evaluation names the data it read; where that is not the data of the run's record (another
    --data-dir holding another data set, the official release instead of generated data, ...) it says
    that the accuracy is not comparable with the run's."""
    import shutil

    from lra.records import read_record, write_record

    run_dir, record = finished_run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    changed = read_record(copy / "result.json")
    changed["data"] = dict(changed["data"], id="0123456789ab")
    write_record(copy / "result.json", changed)
    assert main(["eval", str(copy), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert (f"data {record['data']['id']} (generated ListOps" in printed
            and "is not the data of the run's record (0123456789ab)" in printed), printed


def test_a_run_that_never_trained_says_why(tmp_path, capsys):
    """A sweep cell recorded invalid (here: its data is missing) has a record and no config.yaml: the
    evaluation says the run never trained and quotes its record."""
    from lra.train import write_status_record

    config = resolve("retrieval", "softmax", preset="smoke", runs_dir=tmp_path / "runs", data_dir=tmp_path / "data")
    write_status_record(config, "failed", "data: no data for retrieval (get the LRA release)")
    assert main(["eval", str(config.run_dir())]) == 2
    err = capsys.readouterr().err
    assert "this run never trained, so there is nothing to evaluate; its record says failed: data: no data for " \
           "retrieval (get the LRA release)" in err and "Traceback" not in err


def test_a_copied_record_without_the_run_says_what_it_holds(tmp_path, capsys):
    """A committed run record (result.json alone, as under results/lra/runs/): the evaluation says what
    the record holds and what evaluating again needs, instead of "not inside a run folder"."""
    from lra.records import write_record

    folder = tmp_path / "results" / "pathfinder32" / "flash" / "paper-n1024-s1-7d5ddbca"
    folder.mkdir(parents=True)
    write_record(folder / "result.json", {"task": "pathfinder32", "attention": "flash", "status": "completed",
                                          "steps": 62400, "test_acc": 0.8238})
    assert main(["eval", str(folder)]) == 2
    err = capsys.readouterr().err
    assert ("holds a run's record (result.json) without the run's files, as the committed results do: its record "
            "says completed after 62,400 steps, test accuracy 82.38 %; evaluating it again needs the run folder "
            "where it trained (config.yaml and checkpoints/)") in err and "Traceback" not in err


def test_bad_targets_are_clear_errors(finished_run, tmp_path, capsys):
    run_dir, _ = finished_run
    with pytest.raises(FileNotFoundError, match="no such run folder or checkpoint"):
        locate(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="config.yaml is missing"):
        locate(tmp_path)
    stray = tmp_path / "checkpoints" / "x.ckpt"
    stray.parent.mkdir()
    torch.save({"state_dict": {}}, stray)
    with pytest.raises(FileNotFoundError, match="not inside a run folder"):
        locate(stray)
    with pytest.raises(ValueError, match="a run folder .* or a .ckpt file"):
        locate(run_dir / "config.yaml")
    assert main(["eval", str(run_dir), "--limit", "0"]) == 2
    assert "--limit 0" in capsys.readouterr().err
    # a checkpoint that is not one, in a run folder
    broken = run_dir / "checkpoints" / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    try:
        assert main(["eval", str(broken), "--no-progress"]) == 2
        assert "not a readable checkpoint" in capsys.readouterr().err
    finally:
        broken.unlink()


def test_a_checkpoint_of_another_model_names_the_mismatch(finished_run, tmp_path, capsys):
    run_dir, _ = finished_run
    raw = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    key = next(iter(raw["state_dict"]))
    del raw["state_dict"][key]
    other = run_dir / "checkpoints" / "other.ckpt"
    torch.save(raw, other)
    try:
        assert main(["eval", str(other), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "does not fit" in err and key in err, err
    finally:
        other.unlink()
