"""The `lra` command line: bad input is one clear message, exit 2; one naming scheme in every command
(exact names, did-you-mean errors, help for every option); `--version`, `train --print-config`; a parser
that builds without the heavy libraries."""
from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from lra.cli import build_parser, main, version

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
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--gpus", "0,1"],
     "--gpus 0,1: a list is space-separated: --gpus 0 1"),
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--seq-lens", "4M"],
     "--seq-lens: bad sequence length '4M'"),
    pytest.param(["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--gpus", "0"],
                 "--gpus 0: no CUDA GPU is visible here", marks=NEEDS_NO_CUDA),
    pytest.param(["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke", "--runs-per-gpu",
                  "2"], "--runs-per-gpu 2: no GPU is visible", marks=NEEDS_NO_CUDA),
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
    assert main(["table", "--runs-dir", str(empty), "--out", str(blocker / "t.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lra table: error:") and "afile" in err and "Traceback" not in err
    assert main(["plot", "--runs-dir", str(empty), "--out", str(blocker), "accuracy"]) == 2
    err = capsys.readouterr().err
    assert "lra plot: error: --out" in err and "is a file" in err


# ---- one consistent command line --------------------------------------------------------------
def _parsers(parser=None, name="lra"):
    """(name, parser) of `lra` and of every command and sub-command."""
    parser = parser or build_parser()
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def _options(parser) -> dict[str, argparse.Action]:
    return {s: a for s, a in parser._option_string_actions.items() if a.help is not argparse.SUPPRESS}


@pytest.mark.parametrize("argv, usage, hint", [
    (["train", "--task", "listops", "--attention", "softmax", "--presett", "smoke"], "lra train", "--preset"),
    (["sweep", "--tasks", "listops", "--attentions", "softmax", "--seed", "1"], "lra sweep", "--seeds"),
    (["table", "--task", "listops", "--runs-dirr", "runs"], "lra table", "--runs-dir"),
    (["bench", "models", "--seq-len", "1K"], "lra bench models", "--seq-lens"),
    (["data", "check", "listops", "--data-dri", "d"], "lra data check", "--data-dir"),
])
def test_an_unknown_option_is_an_error_of_its_command_with_a_suggestion(argv, usage, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"usage: {usage} " in err and f"(did you mean {hint}?)" in err, err


@pytest.mark.parametrize("argv", [
    ["sweep", "--tasks", "listops", "--attentions", "softmax", "--seed", "1", "--dry-run"],  # --seeds
    ["train", "--task", "listops", "--attention", "softmax", "--pres", "smoke"],           # --preset
    ["table", "--runs", "runs", "--form", "csv"],                                           # --format
    ["bench", "kernels", "--seq", "1k"],                                                    # --seq-lens
])
def test_option_names_are_never_abbreviated(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_a_mistyped_command_choice_or_list_gets_what_was_meant(capsys):
    for argv, hint in ((["trian"], "did you mean 'train'?"), (["table", "--format", "mdd"], "did you mean 'md'?"),
                       (["bench", "kernels", "--head-dims", "32,64"], "a list is space-separated: 32 64"),
                       (["bench", "kernels", "--impls", "ours,flex"], "a list is space-separated: ours flex")):
        with pytest.raises(SystemExit):
            main(argv)
        assert hint in capsys.readouterr().err


def test_renamed_options_still_work_with_one_warning_each(capsys):
    args = build_parser().parse_args(["table", "--runs", "r", "--task", "listops", "--seq-len", "4K"])
    assert args.runs_dir == [Path("r")] and args.tasks == ["listops"] and args.seq_lens == [4096]
    err = capsys.readouterr().err.splitlines()
    assert err == ["lra table: warning: --runs is deprecated; use --runs-dir",
                   "lra table: warning: --task is deprecated; use --tasks",
                   "lra table: warning: --seq-len is deprecated; use --seq-lens"]
    args = build_parser().parse_args(["data", "generate", "listops", "--out=d"])
    assert args.data_dir == "d" and "use --data-dir" in capsys.readouterr().err


def test_one_name_per_thing_and_plural_flags_take_lists():
    singular = ("--task", "--attention", "--seed", "--seq-len", "--preset")
    for name, parser in _parsers():
        options = _options(parser)
        for flag in singular:
            if flag in options:
                assert options[flag].nargs is None, (name, flag)
                assert flag + "s" not in options, (name, flag)  # one or the other
            if flag + "s" in options:
                assert options[flag + "s"].nargs in ("+", "*"), (name, flag + "s")
        # the run tree is --runs-dir and the data folder --data-dir in every command
        assert not {"--runs", "--data", "--data-root", "--runs-root"} & set(options), name
    data_generate = dict(_parsers())["lra data generate"]
    assert "--data-dir" in _options(data_generate) and "--out" not in _options(data_generate)


def test_every_option_of_every_command_has_help():
    missing = []
    for name, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {c.dest}" for c in action._choices_actions if not c.help]
            elif not (action.help or "").strip():
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


def test_version():
    proc = subprocess.run([sys.executable, "-m", "lra", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"lra {version()}\n", proc.stderr
    import lra

    assert version() == lra.__version__


def test_building_the_parser_imports_no_heavy_library():
    """`lra --help` and `lra <command> --help` stay fast: building and printing every parser imports
    none of torch, Triton, Lightning, pandas, matplotlib."""
    code = textwrap.dedent("""
        import contextlib, io, sys
        import lra.cli
        parser = lra.cli.build_parser()
        commands = [["--help"], *([c, "--help"] for c in lra.cli.COMMANDS),
                    ["bench", "kernels", "--help"], ["bench", "models", "--help"],
                    ["data", "generate", "--help"], ["data", "check", "--help"]]
        for argv in commands:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                parser.parse_args(argv)
        heavy = ("torch", "triton", "pytorch_lightning", "lightning", "pandas", "matplotlib")
        print(sorted(m for m in heavy if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_print_config_prints_the_resolved_config_and_runs_nothing(tmp_path, capsys):
    argv = ["train", "--task", "listops", "--attention", "performer", "--preset", "smoke", "--seq-len", "1K",
            "--seed", "3", "--attention.nb_features", "16", "model.dim=32", "optim.lr=2e-3", "--print-config",
            "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")]
    assert main(argv) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    from lra.config import RunConfig, resolve

    config = RunConfig.from_dict(printed)
    assert (config.task, config.attention, config.preset, config.seed) == ("listops", "performer", "smoke", 3)
    assert config.model.dim == 32 and config.optim.lr == 2e-3 and config.data.seq_len == 1024
    assert config.attention_options["nb_features"] == 16 and config.attention_options["kernel"] == "softmax"
    expected = resolve("listops", "performer", preset="smoke", seed=3, seq_len=1024,
                       overrides=["model.dim=32", "optim.lr=2e-3"], attention_options={"nb_features": 16},
                       runs_dir=tmp_path / "runs", data_dir=tmp_path / "data")
    assert printed == expected.to_dict()
    assert list(tmp_path.iterdir()) == []  # no run folder, no data
