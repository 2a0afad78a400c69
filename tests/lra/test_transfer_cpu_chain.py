"""The `cpu` transfer recipes end to end through `lra transfer`: Path-64 -> Path-X -> Path-X and
Path-64 -> Path-256 on the real image sizes (generated images, tiny model, Performer attention),
one runs folder for both chains, so the Path-64 pretraining is trained once and serves both."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lra.cli import main
from lra.records import read_record


def run_folder(runs: Path, task: str, preset: str) -> Path:
    (folder,) = (runs / task / "performer").glob(f"{preset}-n*")
    return folder


def check_init(run: Path, *, stage: str, source: Path, checkpoint: str, factor: int) -> None:
    """`run` started from `checkpoint` of the run in `source`, as its init.json records, and that
    checkpoint file is the one whose bytes the record hashed."""
    init = json.loads((run / "init.json").read_text())
    ckpt = Path(init["source_path"])
    assert init["init_from_stage"] == stage and init["checkpoint"] == checkpoint
    assert ckpt.parent == source / "checkpoints" and ckpt.is_file()
    assert ckpt.name.startswith("last." if checkpoint == "last" else "best-")
    assert init["source_sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()[:16]
    assert init["transfer"]["factor"] == factor and init["transfer"]["copied"] > 0
    assert init["transfer"]["upsampled"] == (["encoder.positions.weight"] if factor > 1 else [])


@pytest.mark.slow  # 30-40 s on two shared CPU cores
def test_cpu_recipes_run_path64_to_pathx_and_path256(tmp_path, capsys):
    runs, data = tmp_path / "runs", tmp_path / "data"
    common = ["--runs-dir", str(runs), "--data-dir", str(data), "--no-progress", "--no-table"]
    assert main(["transfer", "--target", "pathx", "--preset", "cpu", *common]) == 0
    assert main(["transfer", "--target", "path256", "--preset", "cpu", *common]) == 0
    out = capsys.readouterr().out
    assert "[1/2] pretrain: pathfinder64/performer already completed, skipped" in out

    path64 = run_folder(runs, "pathfinder64", "cpu-path64")
    pathx = run_folder(runs, "pathx", "cpu-pathx")
    pathx2 = run_folder(runs, "pathx", "cpu-pathx-ft2")
    path256 = run_folder(runs, "path256", "cpu-path256")
    for folder, task, tokens in ((path64, "pathfinder64", 4096), (pathx, "pathx", 16384),
                                 (pathx2, "pathx", 16384), (path256, "path256", 65536)):
        record = read_record(folder / "result.json")
        assert record["status"] == "completed" and record["task"] == task and record["attention"] == "performer"
        assert record["config"]["data"]["seq_len"] == tokens
        assert record["steps"] == record["config"]["train"]["max_steps"]
    assert not (path64 / "init.json").exists()
    check_init(pathx, stage="pretrain", source=path64, checkpoint="last", factor=2)
    check_init(pathx2, stage="finetune", source=pathx, checkpoint="best", factor=1)
    check_init(path256, stage="pretrain", source=path64, checkpoint="last", factor=4)
