"""Runs whose Triton kernels would spend long in the CPU interpreter ask for --yes first."""
from __future__ import annotations

import pytest
import torch

from lra.cli import main
from lra.config import resolve
from lra.interpreter_cost import estimate_seconds, long_run_warning

NEEDS_NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs only without CUDA")


@pytest.mark.parametrize("task", ["listops", "pathfinder32"])
@pytest.mark.parametrize("attention", ["flash", "flash_sparse", "softmax"])
def test_the_smoke_runs_of_the_main_job_are_not_long(task, attention):
    assert long_run_warning(resolve(task, attention, preset="smoke", seed=0), cuda=False) is None


def test_path_x_through_the_interpreter_is_long_and_other_attentions_or_a_gpu_are_not():
    config = resolve("pathx", "flash", preset="smoke", seed=0)
    assert estimate_seconds(config) > 3600
    warning = long_run_warning(config, cuda=False)
    assert warning.startswith("pathx/flash (preset smoke, 16384 tokens") and " h of attention" in warning
    assert long_run_warning(config, cuda=True) is None
    assert long_run_warning(resolve("pathx", "performer", preset="smoke", seed=0), cuda=False) is None
    # the published setting at thousands of tokens: days
    assert "days" in long_run_warning(resolve("listops", "flash", preset="paper", seed=0), cuda=False)


@NEEDS_NO_CUDA
def test_lra_train_asks_for_yes_before_a_long_interpreter_run(tmp_path, capsys):
    code = main(["train", "--task", "pathx", "--attention", "flash", "--preset", "smoke",
                 "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2
    assert "lra train: no CUDA GPU here" in err and "--preset smoke" in err and "--yes" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()   # nothing started


@NEEDS_NO_CUDA
def test_lra_sweep_asks_for_yes_in_its_plan(tmp_path, capsys):
    argv = ["sweep", "--preset", "smoke", "--tasks", "listops", "pathx", "--attentions", "flash", "softmax",
            "--seeds", "0", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "lra sweep: no CUDA GPU here" in err and "pathx/flash" in err
    assert "listops/flash" not in err and "pathx/softmax" not in err
    assert not (tmp_path / "runs").exists()
    assert main([*argv, "--dry-run"]) == 0                     # the plan shows it, nothing runs


@NEEDS_NO_CUDA
def test_the_readme_main_job_is_not_asked(tmp_path, capsys):
    argv = ["sweep", "--preset", "smoke", "--tasks", "listops", "pathfinder32", "--attentions", "flash", "softmax",
            "performer", "linformer", "bigbird", "--seeds", "0", "--runs-dir", str(tmp_path / "runs"),
            "--data-dir", str(tmp_path / "data"), "--dry-run"]
    assert main(argv) == 0
    assert "no CUDA GPU here" not in capsys.readouterr().err


def test_sweep_children_do_not_ask_again(tmp_path):
    from lra.sweep import SweepSpec, plan_sweep, train_argv

    spec = SweepSpec(tasks=["pathx"], attentions=["flash"], seq_lens=[None], seeds=[0], preset="smoke",
                     runs_dir=tmp_path / "runs", data_dir=tmp_path / "data")
    assert "--yes" in train_argv(plan_sweep(spec)[0], spec)


@NEEDS_NO_CUDA
def test_lra_transfer_asks_for_yes_before_the_data_step(tmp_path, capsys):
    argv = ["transfer", "--target", "pathx", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")]
    assert main(argv) == 2                    # the paper's recipe: flash at 4K and 16K tokens
    err = capsys.readouterr().err
    assert "lra transfer: no CUDA GPU here" in err and "--yes" in err and "--preset smoke" in err
    assert "stage pretrain: pathfinder64/flash" in err and "stage finetune: pathx/flash" in err
    assert "at least: one step per epoch" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()   # nothing started
    assert main([*argv, "--preset", "smoke", "--dry-run"]) == 0
    assert "no CUDA GPU here" not in capsys.readouterr().err   # the miniature's sdpa is plain PyTorch


@NEEDS_NO_CUDA
def test_lra_transfer_asks_again_once_the_training_splits_are_counted(tmp_path, capsys, monkeypatch):
    from lra import transfer_chain

    def count_many(stages, **kwargs):           # the data step, as if each split held 100,000 examples
        for stage in stages:
            transfer_chain.fix_length(stage, 100_000)

    def no_training(*args, **kwargs):
        raise AssertionError("no stage should train")

    monkeypatch.setattr(transfer_chain, "prepare_chain", count_many)
    monkeypatch.setattr(transfer_chain, "train_chain", no_training)
    argv = ["transfer", "--target", "pathx", "--preset", "smoke", "--attention", "flash", "--pretrain-attention",
            "flash", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--no-table"]
    assert main(argv) == 2          # one step per epoch is short; the counted epochs are not
    err = capsys.readouterr().err
    assert "lra transfer: no CUDA GPU here" in err and "stage pretrain: pathfinder32/flash" in err
    assert "at least" not in err
    monkeypatch.setattr(transfer_chain, "train_chain", lambda *args, **kwargs: [])
    assert main([*argv, "--yes"]) == 0


def _run_folder(tmp_path, config):
    """A run folder as `lra train` leaves it: config.yaml and a checkpoint (empty: never loaded here)."""
    import yaml

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"config": config.to_dict()}, sort_keys=False))
    checkpoint = run_dir / "checkpoints" / "best-step4.ckpt"
    checkpoint.write_bytes(b"")
    return checkpoint


def test_a_long_evaluation_is_told_from_the_examples_it_reads():
    from lra.interpreter_cost import long_eval_warning

    pathx = resolve("pathx", "flash", preset="smoke", seed=0, overrides=["data.limit_eval=8"])
    warning = long_eval_warning(pathx, cuda=False, split="test")
    assert warning.startswith("pathx/flash (preset smoke, 16384 tokens, the first 8 examples of the test split)")
    assert long_eval_warning(pathx, cuda=True, split="test") is None
    pathx.data.limit_eval = 1
    assert long_eval_warning(pathx, cuda=False, split="test") is None
    listops = resolve("listops", "flash", preset="paper", seed=0)
    assert "the val split, 2,000 examples or more" in long_eval_warning(listops, cuda=False, split="val")
    assert long_eval_warning(resolve("listops", "flash", preset="smoke", seed=0), cuda=False, split="test") is None


@NEEDS_NO_CUDA
def test_lra_eval_asks_for_yes_before_a_long_interpreter_evaluation(tmp_path, capsys):
    checkpoint = _run_folder(tmp_path, resolve("pathx", "flash", preset="smoke", seed=0, overrides=["data.limit_eval=8"],
                                               data_dir=str(tmp_path / "data")))
    assert main(["eval", str(checkpoint)]) == 2
    err = capsys.readouterr().err
    assert "lra eval: no CUDA GPU here" in err and "pathx/flash" in err and "--yes" in err
    assert "--limit N" in err and "--attention sdpa" in err
    assert not (tmp_path / "data").exists()                                  # nothing loaded
    for enough in (["--limit", "1"], ["--attention", "sdpa"], ["--yes"]):
        assert main(["eval", str(checkpoint), *enough]) == 2
        err = capsys.readouterr().err     # it goes on, to the checkpoint (an empty file here)
        assert "no CUDA GPU here" not in err and "not a readable checkpoint" in err, enough
