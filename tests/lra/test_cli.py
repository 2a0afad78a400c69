"""The `lra train` / `lra sweep` / `lra info` command lines: bad input is one clear message, exit 2."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from lra.cli import main

NEEDS_NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine these devices are valid")
BASE = ["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke"]


@pytest.mark.parametrize("argv, message", [
    (["train", "--task", "lisops", "--attention", "softmax"], "unknown task 'lisops'; available: listops"),
    (["train", "--task", "listops", "--attention", "flashy"], "unknown attention 'flashy'; available: flash"),
    ([*BASE, "attention.nb_features=8"], "attention 'softmax': unknown option(s) 'nb_features'"),
    ([*BASE, "--attention.nb_features", "8"], "attention 'softmax': unknown option(s) 'nb_features'"),
    (["train", "--task", "listops", "--attention", "performer", "--preset", "smoke", "attention.nb_features=lots"],
     "option 'nb_features': expected an integer, got 'lots'"),
    ([*BASE, "model.dimm=8"], "unknown config key 'model.dimm'; did you mean 'model.dim'?"),
    ([*BASE, "model.dim"], "not of the form key=value"),
    ([*BASE, "--preset", "huge"], "task 'listops' has no preset 'huge'; available: paper, cpu, smoke"),
    (["train", "--task", "pathfinder32", "--attention", "softmax", "--preset", "smoke", "--seq-len", "4096"],
     "seq_len must be 1024 (got 4096); pathfinder64 has 4096 pixels"),
    (["train", "--task", "listops", "--attention", "bigbird", "--preset", "smoke", "--seq-len", "64"],
     "attention 'bigbird' needs at least 113 tokens"),
    ([*BASE, "--seq-len", "0"], "data.seq_len must be > 0"),
    ([*BASE, "--devices", "two"], "train.devices: expected auto, a count or a list"),
    # These three were accepted, then failed inside the run: a traceback and a `failed` record.
    ([*BASE, "--devices", "0"], "train.devices: a count must be >= 1"),
    ([*BASE, "--strategy", "dpp"], "train.strategy: unknown Lightning strategy 'dpp'; did you mean 'ddp'?"),
    ([*BASE, "train.precision=bf61-mixed"], "train.precision: 'bf61-mixed' is not one of auto"),
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "flashy", "--preset", "smoke"],
     "unknown attention(s) ['flashy']"),
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--parallel", "0"],
     "--parallel must be >= 1"),
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--seeds", "zero"],
     "--seeds: expected integers, got 'zero'"),
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--strategy", "bogus"],
     "train.strategy: unknown Lightning strategy 'bogus'"),
    (["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--resume", "--force"],
     "--resume and --force contradict each other"),
    pytest.param(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--devices", "-1"],
                 "train.devices=-1: GPU indices and -1 (all GPUs) need CUDA", marks=NEEDS_NO_CUDA),
    pytest.param(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--devices", "0,1"],
                 "train.devices=0,1: GPU indices", marks=NEEDS_NO_CUDA),
    pytest.param(["train", "--task", "listops", "--attention", "sdpa", "--preset", "smoke", "--attention.backend",
                  "flash", "model.attention_dropout=0.1"],
                 "sdpa with backend=flash runs on the CPU only without attention dropout", marks=NEEDS_NO_CUDA),
])
def test_bad_input_is_one_clear_message_and_exit_2(argv, message, tmp_path, capsys):
    code = main([*argv, "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_missing_data_says_how_to_get_it(tmp_path, capsys):
    code = main(["train", "--task", "retrieval", "--attention", "softmax", "--preset", "smoke",
                 "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert code == 2 and "tsv_data/new_aan_pairs" in err and "Traceback" not in err


def test_argparse_errors_exit_2():
    proc = subprocess.run([sys.executable, "-m", "lra", "train", "--task", "listops"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--attention" in proc.stderr


def test_train_help_lists_overrides_and_attention_options(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "model.dim=128" in out and "--attention.nb_features" in out and "exit status" in out


def test_info_reports_versions_device_and_attentions(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for needle in ("torch ", "triton ", "lightning ", "CUDA ", "TRITON_INTERPRET=", "attentions on"):
        assert needle in out
    from lra import attention

    for name in attention.available():
        assert f"  {name} " in out
    from lra.commands.info import collect

    info = collect("cpu")
    assert set(info["attentions"]) == set(attention.available())
    assert all(isinstance(v["can_run"], bool) and v["reason"] for v in info["attentions"].values())
    import kernels

    settings = kernels.kernel_settings()
    assert info["kernel_settings"] == settings
    assert f"torch.compile sees them as {settings['compile_op']} ops" in out
    assert f"dropout backward {settings['dropout_backward']}, 7 Philox rounds" in out


def test_output_paths_that_cannot_be_written_are_one_line(tmp_path, capsys):
    # `lra table --out FILE/x.md` (a file where a folder goes) ended in a FileExistsError traceback.
    blocker = tmp_path / "afile"
    blocker.write_text("")
    empty = tmp_path / "runs"
    empty.mkdir()
    from lra.records import write_record

    write_record(empty / "listops" / "softmax" / "r" / "result.json",
                 {"task": "listops", "attention": "softmax", "status": "completed", "seq_len": 64, "seed": 0,
                  "test_acc": 0.3, "best_val_acc": 0.3})
    assert main(["table", "--runs", str(empty), "--out", str(blocker / "t.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lra table: error:") and "afile" in err and "Traceback" not in err
    assert main(["plot", "--runs", str(empty), "--out", str(blocker), "accuracy"]) == 2
    err = capsys.readouterr().err
    assert "lra plot: error: --out" in err and "is a file" in err
