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
