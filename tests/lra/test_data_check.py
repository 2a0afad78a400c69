"""The data of a run is checked before its run folder exists (`lra.data_check`): corrupt released
files are exit 2 with file and line and no run folder; `lra sweep` checks each task's data once,
up front, and plans the cells whose data fail as invalid."""
from __future__ import annotations

from pathlib import Path

import pytest

from lra import data_check
from lra.cli import main

FAST = ["train.max_steps=2", "train.val_check_interval=2", "train.batch_size=2", "train.throughput_warmup_steps=1",
        "optim.warmup_steps=1"]
ROWS = ["( ( ( [MAX 2 ) 9 ) ] )\t9", "( ( ( [MIN 4 ) 3 ) ] )\t3", "( ( ( [SM 8 ) 7 ) ] )\t5",
        "( ( ( [MED 1 ) 5 ) ] )\t1"]


def write_listops(data: Path, train_rows=ROWS) -> Path:
    """The official ListOps layout (listops-1000/basic_{train,val,test}.tsv)."""
    folder = data / "listops-1000"
    folder.mkdir(parents=True)
    for split, rows in (("train", train_rows), ("val", ROWS), ("test", ROWS)):
        (folder / f"basic_{split}.tsv").write_text("Source\tTarget\n" + "\n".join(rows) + "\n")
    return folder


def train_args(runs: Path, data: Path, task: str = "listops") -> list[str]:
    return ["train", "--task", task, "--attention", "softmax", "--preset", "smoke", "--runs-dir", str(runs),
            "--data-dir", str(data), *FAST]


def test_a_corrupt_official_tsv_is_exit_2_with_file_and_line_and_no_run_folder(tmp_path, capsys):
    folder = write_listops(tmp_path / "data", [ROWS[0], "( ( ( [MAX 2 ) 9 ) ] )\tnine", *ROWS[1:]])
    runs = tmp_path / "runs"
    code = main([*train_args(runs, tmp_path / "data"), "--seq-len", "64"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{folder / 'basic_train.tsv'}:3: Target must be an integer 0-9, got 'nine'" in err
    assert "Traceback" not in err
    assert not runs.exists()


def test_official_files_are_parsed_once_for_the_whole_run(tmp_path, monkeypatch):
    import tasks.listops

    write_listops(tmp_path / "data")
    read = []
    original = tasks.listops.rows
    monkeypatch.setattr(tasks.listops, "rows", lambda path, **kw: read.append(Path(path).name) or original(path, **kw))
    assert main([*train_args(tmp_path / "runs", tmp_path / "data"), "--seq-len", "64"]) == 0
    assert sorted(read) == ["basic_test.tsv", "basic_train.tsv", "basic_val.tsv"]


def test_corrupt_pathfinder_metadata_is_exit_2_with_file_and_line_and_no_run_folder(tmp_path, capsys):
    meta = tmp_path / "data" / "pathfinder32" / "curv_contour_length_14" / "metadata"
    meta.mkdir(parents=True)
    (meta / "0.npy").write_text("imgs/0 sample_0.png 0 1 1.8 14 4 5 1.5 3 1\nimgs/0 sample_1.png 1 7 1.8 14 4 5 1.5 3 1\n")
    runs = tmp_path / "runs"
    code = main(train_args(runs, tmp_path / "data", "pathfinder32"))
    err = capsys.readouterr().err
    assert code == 2 and f"{meta / '0.npy'}:2: label (field 4) must be 0 or 1" in err, err
    assert not runs.exists()


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_refused_for_a_missing_initial_checkpoint_leaves_no_run_folder(tmp_path, capsys, resume):
    write_listops(tmp_path / "data")
    runs = tmp_path / "runs"
    code = main([*train_args(runs, tmp_path / "data"), "--seq-len", "64", "--init-from",
                 str(tmp_path / "missing.ckpt"), *(["--resume"] if resume else [])])
    err = capsys.readouterr().err
    assert code == 2 and "missing.ckpt" in err and "no such file" in err, err
    assert not runs.exists()  # neither the run folder nor its run.lock, nor the folders above it



def test_a_sweep_checks_each_tasks_data_once_and_plans_cells_with_bad_data_invalid(tmp_path, capsys, monkeypatch):
    folder = write_listops(tmp_path / "data", [ROWS[0], "( ( ( [MAX 2 ) 9 ) ]\t9 extra\t1"])
    checked = []
    original = data_check.check_data
    monkeypatch.setattr(data_check, "check_data", lambda dm: checked.append(dm.task) or original(dm))
    runs = tmp_path / "runs"
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "performer",
                 "--seeds", "0", "1", "--seq-lens", "64", "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"),
                 *FAST])
    out = capsys.readouterr().out
    assert checked == ["listops"]  # one (task, data source): checked once for its 4 cells
    assert code == 1 and "4 invalid" in out and "0 completed, 0 failed" in out, out
    assert f"{folder / 'basic_train.tsv'}:3: expected 2 tab-separated fields" in out
    assert not list(runs.glob("*/*/*/train.log"))  # nothing was launched
