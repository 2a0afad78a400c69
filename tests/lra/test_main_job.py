"""The README's main job on CPU (`lra sweep --preset cpu --tasks listops ...`, then `lra table` and
`lra plot`): its preset learns ListOps above chance, and what it writes stays out of git."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lra.cli import main
from lra.config import resolve

REPO = Path(__file__).resolve().parents[2]
# What the main job writes, relative to the folder it runs in (.gitignore).
OUTPUTS = ("runs/listops/flash/cpu-n32-s0-0/result.json", "data/generated/listops/basic_train.tsv",
           "plots/accuracy_vs_speedup.png", "lightning_logs/version_0/metrics.csv")


@pytest.mark.slow
@pytest.mark.cpu_machine("the preset is sized for a CPU run")
def test_the_cpu_preset_learns_listops_above_chance(tmp_path, capsys):
    """One run of the preset as the main job runs it (softmax: seconds on 2 idle cores). Chance is
    10 %; predicting the most frequent answer scores about 16 %."""
    runs = tmp_path / "runs"
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "cpu", "--runs-dir", str(runs),
                 "--data-dir", str(tmp_path / "data")])
    assert code == 0, capsys.readouterr().err
    [path] = runs.glob("**/result.json")
    record = json.loads(path.read_text())
    assert record["steps"] == resolve("listops", "softmax", preset="cpu").train.max_steps
    assert record["test_acc"] >= 0.25 and record["best_val_acc"] >= 0.25, record["val_acc_curve"]


def test_the_cpu_preset_fits_every_attention_of_the_main_job():
    from lra import attention

    for name in ("flash", "softmax", "performer", "linformer", "bigbird"):
        config = resolve("listops", name, preset="cpu")
        shortest = attention.min_supported_len(name, config.attention_options)
        assert shortest is None or shortest <= config.data.seq_len, name


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git checkout")
def test_the_main_jobs_outputs_are_git_ignored():
    result = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index", *OUTPUTS],
                            capture_output=True, text=True)
    assert sorted(result.stdout.split()) == sorted(OUTPUTS), result.stderr
