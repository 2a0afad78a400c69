"""scripts/*.sh: the recipes parse, call only `lra` verbs and flags that exist, and honour their
time budget.

Each recipe runs end to end with ``$LRA`` pointing at a stub that records its arguments instead of
working; every recorded call must then parse with the real `lra` argument parser.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lra.cli import build_parser

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
RECIPES = sorted(p for p in SCRIPTS.glob("*.sh") if p.name != "budget.sh")

STUB = """\
import json, os, sys
with open(os.environ["FAKE_LRA_LOG"], "a") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "stop_at": os.environ.get("LRA_STOP_AT")}) + "\\n")
"""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run_recipe(recipe: Path, tmp_path: Path, *args: str, env: dict | None = None):
    """Run `recipe OUT ARGS...` with the stub as $LRA -> (completed process, recorded calls)."""
    stub = tmp_path / "fake_lra.py"
    stub.write_text(STUB)
    log = tmp_path / "calls.jsonl"
    log.write_text("")
    environ = {k: v for k, v in os.environ.items() if k != "LRA_STOP_AT"}
    environ.update(LRA=f"{sys.executable} {stub}", FAKE_LRA_LOG=str(log), **(env or {}))
    proc = subprocess.run(["bash", str(recipe), str(tmp_path / "out"), *args], env=environ,
                          capture_output=True, text=True, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return proc, calls


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_is_valid_bash(recipe):
    subprocess.run(["bash", "-n", str(recipe)], check=True)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_is_strict_and_calls_the_cli_through_LRA(recipe):
    text = recipe.read_text()
    assert "set -euo pipefail" in text
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    # every call of the CLI goes through ${LRA:-lra}, so `LRA="python -m lra"` works everywhere
    assert not re.search(r"(^|[\s;|&(])(lra|python3? -m lra)\s+[a-z]", code, re.M), recipe.name
    assert "${LRA:-lra} " in code
    # nothing that belongs to one particular machine
    for word in ("lanes?", r"tar\.gz", "DEADLINE", "nvidia-h200", "LRA_GIT_REV"):
        assert not re.search(rf"\b{word}\b", text), (recipe.name, word)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_lra_call_of_a_recipe_parses_with_the_cli(recipe, tmp_path):
    proc, calls = run_recipe(recipe, tmp_path, "600")
    assert proc.returncode == 0, proc.stderr
    assert calls, f"{recipe.name} called no lra command"
    parser = build_parser()
    for call in calls:
        argv = call["argv"]
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{recipe.name}: `lra {' '.join(call['argv'])}` does not parse with the CLI")


def test_kernel_grid_resumes_and_passes_the_time_left(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "kernel_grid.sh", tmp_path, "10")
    assert proc.returncode == 0, proc.stderr
    bench = [c["argv"] for c in calls if c["argv"][:2] == ["bench", "kernels"]]
    assert [a[a.index("--name") + 1] for a in bench] == ["dense", "hopper", "block_sparse", "approx", "dropout"]
    hopper = bench[1]
    assert hopper[hopper.index("--impls") + 1:hopper.index("--passes")] == [
        "ours", "ours_portable", "ours_hopper_pp", "sdpa_cudnn"]
    for argv in bench:
        assert "--resume" in argv
        assert 0 < float(argv[argv.index("--time-budget") + 1]) <= 600
    assert calls[-2]["argv"][:2] == ["plot", "kernels"]
    headline = calls[-1]["argv"]
    assert headline[:2] == ["table", "kernels"] and headline[headline.index("--passes") + 1] == "fwd_bwd"


def test_a_spent_budget_stops_the_recipe_before_measuring(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "kernel_grid.sh", tmp_path, "0")
    assert proc.returncode == 0, proc.stderr
    assert calls == []
    assert "run the same command again to continue" in proc.stderr


def test_bad_minutes_is_refused(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "model_step_grid.sh", tmp_path, "ten")
    assert proc.returncode == 2 and "MINUTES" in proc.stderr
    assert calls == []


def test_model_step_grid_resumes_every_file(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "model_step_grid.sh", tmp_path)
    assert proc.returncode == 0, proc.stderr
    bench = [c["argv"] for c in calls if c["argv"][:2] == ["bench", "models"]]
    outs = [Path(a[a.index("--out") + 1]).stem for a in bench]
    assert outs == ["paper_eager", "paper_compiled", "small_eager", "small_compiled", "small_cudagraphs",
                    "user_eager", "user_compiled", "small_eager_baselines"]
    assert all(a[a.index("--model") + 1] == "user" for a in bench if "--model" in a)
    assert ["--model" in a for a in bench].count(True) == 2
    assert all("--resume" in a and "--interleave" in a for a in bench)
    cudagraphs = bench[outs.index("small_cudagraphs")]
    assert cudagraphs[cudagraphs.index("--compile-mode") + 1] == "reduce-overhead"


def test_model_step_grid_writes_the_readme_steps_table_from_the_lra_model_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("paper_eager", "paper_compiled", "small_eager", "small_compiled", "user_eager"):
        (out / f"{name}.csv").write_text("attention\n")
    proc, calls = run_recipe(SCRIPTS / "model_step_grid.sh", tmp_path)
    assert proc.returncode == 0, proc.stderr
    steps = next(c["argv"] for c in calls if c["argv"][:2] == ["table", "steps"])
    benches = [Path(steps[i + 1]).stem for i, a in enumerate(steps) if a == "--bench"]
    assert benches == ["paper_compiled", "paper_eager", "small_compiled", "small_eager"]  # the LRA model only
    assert steps[steps.index("--baseline") + 1] == "sdpa" and steps[steps.index("--out") + 1] == str(out / "steps.md")
    user = [c["argv"] for c in calls if c["argv"][:2] == ["table", "steps"]][1]
    assert [Path(user[i + 1]).stem for i, a in enumerate(user) if a == "--bench"] == ["user_eager"]
    assert user[user.index("--attentions") + 1:user.index("--attentions") + 4] == ["sdpa", "sdpa_flash", "flash"]
    assert user[user.index("--out") + 1] == str(out / "user_steps.md")


def test_lra_table_sweeps_the_paper_grid_within_the_budget(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path, "30", env={"RUNS_PER_GPU": "5"})
    assert proc.returncode == 0, proc.stderr
    sweep = next(c["argv"] for c in calls if c["argv"][0] == "sweep")
    assert sweep[sweep.index("--preset") + 1] == "paper"
    assert sweep[sweep.index("--seeds") + 1:sweep.index("--seeds") + 4] == ["0", "1", "2"]
    assert sweep[sweep.index("--runs-per-gpu") + 1] == "5"
    assert 0 < int(sweep[sweep.index("--budget-minutes") + 1]) <= 30
    tables = [c["argv"] for c in calls if c["argv"][0] == "table"]
    assert len(tables) == 4 and tables[1][1] == "headline"
    assert tables[1][tables[1].index("--out") + 1] == str(tmp_path / "out" / "headline.md")


def test_lra_table_runs_the_part_of_the_grid_it_is_given(tmp_path):
    env = {"TASKS": "pathfinder32", "ATTENTIONS": "flash sdpa", "SEEDS": "1", "COMPILE_MODE": "reduce-overhead"}
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path, "30", env=env)
    assert proc.returncode == 0, proc.stderr
    generated = [c["argv"][2] for c in calls if c["argv"][:2] == ["data", "generate"]]
    assert generated == ["pathfinder32"]
    sweep = next(c["argv"] for c in calls if c["argv"][0] == "sweep")
    assert sweep[sweep.index("--tasks") + 1:sweep.index("--attentions")] == ["pathfinder32"]
    assert sweep[sweep.index("--attentions") + 1:sweep.index("--seeds")] == ["flash", "sdpa"]
    assert sweep[sweep.index("--seeds") + 1:sweep.index("--runs-per-gpu")] == ["1"]
    assert sweep[sweep.index("--compile-mode") + 1] == "reduce-overhead"


def test_lra_table_times_each_attention_alone_at_its_tasks_batch(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path, env={"ATTENTIONS": "flash performer"})
    assert proc.returncode == 0, proc.stderr
    benches = [c["argv"] for c in calls if c["argv"][:2] == ["bench", "models"] and "--tokens-per-batch" in c["argv"]]
    assert [(b[b.index("--tokens-per-batch") + 1], b[b.index("--seq-lens") + 1]) for b in benches] == [
        ("64000", "2000"), ("262144", "1024")]  # ListOps 32 x 2,000 and Pathfinder-32 256 x 1,024 (the presets)
    # every attention of the table, not only the trained ones: its speed-ups are relative to softmax
    assert all(b[b.index("--attentions") + 1:b.index("--resume")] == [
        "softmax", "sdpa", "flash", "flash_sparse", "performer", "linformer", "bigbird"] for b in benches)
    sweep_at = next(i for i, c in enumerate(calls) if c["argv"][0] == "sweep")
    assert all(calls.index(c) > sweep_at for c in calls if c["argv"][:2] == ["bench", "models"])
    # a benchmark that wrote its CSV feeds the tables' and plots' speed figures
    assert all("--speed" not in c["argv"] for c in calls if c["argv"][0] in ("table", "plot"))
    (tmp_path / "out" / "speed").mkdir(parents=True)
    (tmp_path / "out" / "speed" / "bench_listops.csv").write_text("attention\n")
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path, env={"ATTENTIONS": "flash softmax"})
    assert proc.returncode == 0, proc.stderr
    for c in (c["argv"] for c in calls if c["argv"][0] in ("table", "plot")):
        assert c[c.index("--speed") + 1] == str(tmp_path / "out" / "speed" / "bench_listops.csv")


def test_lra_table_measures_the_efficiency_half_across_lengths(tmp_path):
    """Every attention's training step at the Pathfinder batch, compiled, N = 1K-16K, once the runs
    are done, into OUT/speed/efficiency.csv (resumed cell by cell); its table once the CSV exists."""
    out = tmp_path / "out"
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path, "30", env={"ATTENTIONS": "flash"})
    assert proc.returncode == 0, proc.stderr
    argvs = [c["argv"] for c in calls]
    efficiency = next(a for a in argvs if a[:2] == ["bench", "models"] and "--regimes" in a)
    assert efficiency[efficiency.index("--regimes") + 1] == "paper"
    assert efficiency[efficiency.index("--seq-lens") + 1:efficiency.index("--modes")] == ["1K", "2K", "4K", "8K", "16K"]
    assert efficiency[efficiency.index("--modes") + 1] == "compiled" and "--resume" in efficiency
    assert efficiency[efficiency.index("--attentions") + 1:efficiency.index("--resume")] == [
        "softmax", "sdpa", "flash", "flash_sparse", "performer", "linformer", "bigbird"]
    assert efficiency[efficiency.index("--out") + 1] == str(out / "speed" / "efficiency.csv")
    assert argvs.index(efficiency) > next(i for i, a in enumerate(argvs) if a[0] == "sweep")
    assert not any(a[:2] == ["table", "efficiency"] for a in argvs)  # the stub wrote no CSV
    (out / "speed").mkdir(parents=True, exist_ok=True)
    (out / "speed" / "efficiency.csv").write_text("attention\n")
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path, "30", env={"ATTENTIONS": "flash"})
    assert proc.returncode == 0, proc.stderr
    table = next(c["argv"] for c in calls if c["argv"][:2] == ["table", "efficiency"])
    assert table[table.index("--bench") + 1] == str(out / "speed" / "efficiency.csv")
    assert table[table.index("--out") + 1] == str(out / "efficiency.md")


def test_lra_table_without_budget_passes_none(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "lra_table.sh", tmp_path)
    assert proc.returncode == 0, proc.stderr
    sweep = next(c["argv"] for c in calls if c["argv"][0] == "sweep")
    assert "--budget-minutes" not in sweep


def test_transfer_chain_stops_its_runs_at_the_deadline(tmp_path):
    proc, calls = run_recipe(SCRIPTS / "transfer_chain.sh", tmp_path, "60", env={"TARGETS": "pathx"})
    assert proc.returncode == 0, proc.stderr
    chains = [c for c in calls if c["argv"][0] == "transfer"]
    assert chains and all(c["stop_at"] and float(c["stop_at"]) > 0 for c in chains)
    first, scratch = chains[0]["argv"], chains[1]["argv"]
    assert first[first.index("--preset") + 1] == "pathx-transfer" and "--from-scratch" in scratch
    assert any("--estimate-cost" in c["argv"] for c in chains)
