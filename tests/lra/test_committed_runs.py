"""Run records committed under results/ (run folders holding only result.json and train.log, no
checkpoints) are read by `lra table --runs-dir` and `lra plot --runs-dir` like a live runs/ tree."""
import io
import json
from pathlib import Path

import pandas as pd

from lra.cli import build_parser

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "lra" / "runs"


def run_cli(*argv):
    args = build_parser().parse_args([*map(str, argv)])
    return args.func(args)


def committed_records() -> list[Path]:
    return sorted(COMMITTED.glob("*/*/*/result.json"))


def test_committed_run_folders_hold_a_record_and_its_log_only():
    records = committed_records()
    assert records, f"no run records under {COMMITTED}"
    for record in records:
        assert sorted(p.name for p in record.parent.iterdir()) == ["result.json", "train.log"], record.parent


def test_lra_table_reads_the_committed_runs(capsys):
    assert run_cli("table", "--runs-dir", COMMITTED, "--format", "csv") == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err
    frame = pd.read_csv(io.StringIO(captured.out))
    ran = frame[frame["ran"]]
    expected = {(r["task"], r["attention"]) for r in map(json.loads, map(Path.read_text, committed_records()))}
    assert set(zip(ran["task"], ran["attention"])) == expected
    assert ran["n"].sum() == len(committed_records())  # every record counted, none skipped


def test_lra_plot_reads_the_committed_runs(tmp_path, capsys):
    out = tmp_path / "plots"
    assert run_cli("plot", "curves", "val_curves", "--runs-dir", COMMITTED, "--out", out) == 0
    tasks = {json.loads(p.read_text())["task"] for p in committed_records()}
    for task in tasks:
        for name in (f"curves_{task}", f"val_curves_{task}"):
            assert (out / f"{name}.png").stat().st_size > 10_000 and (out / f"{name}.pdf").exists()
