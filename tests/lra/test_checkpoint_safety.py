"""A crafted checkpoint (a pickled object that runs code when unpickled) is refused with a clear
message by every command that opens checkpoints, and what it carries never runs."""
from __future__ import annotations

import os
import shutil

import pytest
import torch

from lra.cli import main

FAST = ["train.max_steps=4", "train.val_check_interval=2", "train.batch_size=8", "data.limit_train=32",
        "data.limit_eval=16", "train.throughput_warmup_steps=1", "optim.warmup_steps=1"]


class _Payload:
    """Unpickling this touches `marker`: the proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    args = ["--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
            "--runs-dir", str(root / "runs"), "--data-dir", str(root / "data"), *FAST]
    assert main(["train", *args]) == 0
    (run_dir,) = (root / "runs" / "listops" / "softmax").iterdir()
    return root, run_dir, args


def _craft(path, marker):
    real = torch.load(path, map_location="cpu", weights_only=True)
    torch.save({**real, "extra": _Payload(marker)}, path)


def _copy_run(finished_run, tmp_path):
    root, run_dir, args = finished_run
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs", runs)
    args = [a if a != str(root / "runs") else str(runs) for a in args]
    return runs / run_dir.relative_to(root / "runs"), args


def test_eval_refuses_a_crafted_checkpoint(finished_run, tmp_path, capsys):
    run_dir, _ = _copy_run(finished_run, tmp_path)
    marker = tmp_path / "ran"
    for ckpt in (run_dir / "checkpoints").glob("*.ckpt"):
        _craft(ckpt, marker)
    assert main(["eval", str(run_dir), "--no-progress"]) == 2
    assert "refusing to load" in capsys.readouterr().err
    assert not marker.exists()


def test_resume_refuses_a_crafted_last_checkpoint(finished_run, tmp_path, capsys):
    run_dir, args = _copy_run(finished_run, tmp_path)
    (run_dir / "result.json").unlink()   # an interrupted run: --resume would continue from last.ckpt
    marker = tmp_path / "ran"
    _craft(run_dir / "checkpoints" / "last.ckpt", marker)
    assert main(["train", *args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "refusing to load" in err and "last.ckpt" in err
    assert not marker.exists()


def test_init_from_and_transfer_refuse_a_crafted_checkpoint(finished_run, tmp_path, capsys):
    from lra.checkpoint_transfer import IncompatibleCheckpoint, read_checkpoint

    _, run_dir, args = finished_run
    crafted = tmp_path / "crafted.ckpt"
    shutil.copy(run_dir / "checkpoints" / "last.ckpt", crafted)
    marker = tmp_path / "ran"
    _craft(crafted, marker)
    runs = tmp_path / "runs"
    args = [a if not a.endswith("runs") else str(runs) for a in args]
    assert main(["train", *args, "--init-from", str(crafted)]) == 2
    assert "refusing to load" in capsys.readouterr().err
    with pytest.raises(IncompatibleCheckpoint, match="refusing to load"):
        read_checkpoint(crafted)   # the transfer chain's reader
    assert not marker.exists()


def test_own_checkpoints_load_as_data(finished_run):
    from lra.checkpoints import load_checkpoint

    _, run_dir, _ = finished_run
    for ckpt in (run_dir / "checkpoints").glob("*.ckpt"):
        assert "state_dict" in load_checkpoint(ckpt)
