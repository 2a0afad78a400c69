"""`lra train` end to end on CPU with the real tasks and registry: records, checkpoints, resume,
failures, DDP; plus the schedule and the throughput bookkeeping."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import pytorch_lightning as pl
import torch

from lra.callbacks import TrainingStats
from lra.cli import main
from lra.config import resolve
from lra.module import LraModule, lr_factor, one_cycle, split_weight_decay
from lra.train import RunFailed, train

# The schema of docs/interfaces.md, exactly.
RECORD_FIELDS = {
    "schema", "run_id", "task", "attention", "attention_options", "seq_len", "seed", "preset", "status",
    "error", "best_val_acc", "test_acc", "val_acc_curve", "steps", "epochs", "wall_time_s",
    "time_to_best_s", "step_time_ms", "train_samples_per_s", "train_tokens_per_s", "peak_mem_gb",
    "num_params", "batch_size", "device", "devices", "precision", "compile", "versions", "git_rev",
    "kernel_env", "created", "config", "sharing", "data",
}
# Smaller than the smoke preset: a few steps on a few dozen examples.
FAST = ["train.max_steps=6", "train.val_check_interval=3", "train.batch_size=8", "data.limit_train=48",
        "data.limit_eval=16", "train.throughput_warmup_steps=1", "optim.warmup_steps=2"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def only_record(runs: Path) -> dict:
    paths = sorted(runs.glob("**/result.json"))
    assert len(paths) == 1, paths
    return load(paths[0])


@pytest.mark.cpu_machine("expects a CPU run: no peak GPU memory, 32-bit precision")
def test_listops_run_writes_record_logs_and_checkpoints(tmp_path, data_dir, capsys):
    runs = tmp_path / "runs"
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(runs), "--data-dir", str(data_dir), *FAST])
    assert code == 0, capsys.readouterr().err
    rec = only_record(runs)
    assert set(rec) == RECORD_FIELDS
    assert rec["schema"] == 1 and rec["status"] == "completed" and rec["error"] is None
    assert (rec["task"], rec["attention"], rec["seq_len"], rec["seed"], rec["preset"]) == \
        ("listops", "softmax", 64, 0, "smoke")
    assert rec["steps"] == 6 and rec["batch_size"] == 8 and rec["devices"] == 1
    assert [p["step"] for p in rec["val_acc_curve"]] == [3, 6]
    assert all(0.0 <= p["val_acc"] <= 1.0 for p in rec["val_acc_curve"])
    assert rec["best_val_acc"] == max(p["val_acc"] for p in rec["val_acc_curve"])
    assert 0.0 <= rec["test_acc"] <= 1.0
    assert rec["wall_time_s"] >= rec["time_to_best_s"] > 0
    # Throughput over the 5 steps after the 1 warm-up step: samples/s and tokens/s agree.
    assert rec["train_samples_per_s"] > 0 and rec["step_time_ms"] > 0
    assert rec["train_tokens_per_s"] == pytest.approx(64 * rec["train_samples_per_s"])
    assert rec["peak_mem_gb"] is None and rec["precision"] == "32-true" and rec["compile"] is False
    assert set(rec["versions"]) == {"python", "torch", "triton", "lightning"}
    assert rec["config"]["model"]["dim"] == 32 and rec["config"]["train"]["max_steps"] == 6
    assert rec["num_params"] > 0 and rec["epochs"] == pytest.approx(6 * 8 / 48)

    run_dir = runs / "listops" / "softmax" / rec["run_id"]
    assert (run_dir / "config.yaml").is_file()
    metrics = pd.read_csv(next((run_dir / "logs").glob("version_*/metrics.csv")))
    # per logged training step: the loss and that batch's accuracy (a multiple of 1/8 at batch 8)
    train_rows = metrics.dropna(subset=["train/acc"])
    assert len(train_rows) >= 1 and train_rows["train/loss"].notna().all()
    # logged only on the steps the logger writes (every log_every_n_steps = 3 here, and the last)
    assert sorted(train_rows["step"]) == [2, 5]
    assert ((train_rows["train/acc"] * 8).round(6) % 1 == 0).all() and train_rows["train/acc"].between(0, 1).all()
    assert metrics["val/acc"].dropna().between(0, 1).all()
    best = list((run_dir / "checkpoints").glob("best-step*.ckpt"))
    assert len(best) == 1 and (run_dir / "checkpoints" / "last.ckpt").is_file()
    # The checkpoint rebuilds the model on its own: resolved config + data spec.
    module = LraModule.load_from_checkpoint(best[0], map_location="cpu")
    assert module.run_config.run_id() == rec["run_id"] and module.spec.vocab_size == 16
    out = capsys.readouterr().out
    assert "completed" in out and rec["run_id"] in out

    # Re-running a completed run is refused (exit 2); --resume leaves it as it is.
    args = ["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
            "--runs-dir", str(runs), "--data-dir", str(data_dir), *FAST]
    assert main(args) == 2
    assert "already completed" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert load(run_dir / "result.json")["created"] == rec["created"]


def test_pathfinder_uses_a_2d_grid_embedding(tmp_path, data_dir):
    runs = tmp_path / "runs"
    code = main(["train", "--task", "pathfinder32", "--attention", "linformer", "--preset", "smoke",
                 "--runs-dir", str(runs), "--data-dir", str(data_dir), "train.max_steps=2",
                 "train.val_check_interval=2", "train.batch_size=4", "data.limit_train=8",
                 "data.limit_eval=4", "optim.warmup_steps=1", "train.throughput_warmup_steps=0"])
    assert code == 0
    rec = only_record(runs)
    assert rec["status"] == "completed" and rec["seq_len"] == 1024
    assert rec["attention_options"]["proj_k"] == 32  # the smoke preset's per-attention option
    ckpt = torch.load(next(runs.glob("**/last.ckpt")), map_location="cpu", weights_only=False)
    assert ckpt["state_dict"]["model.encoder.positions.weight"].shape == (32, 32, 32)
    assert ckpt["hyper_parameters"]["data_spec"]["image_shape"] == [32, 32]
    assert ckpt["hyper_parameters"]["config"]["model"]["positional"] == "learned"


def test_pathfinder_difficulty_reaches_the_data(tmp_path):
    from lra.train import build_datamodule, resolve_runtime

    config = resolve("pathfinder32", "softmax", preset="smoke", data_dir=tmp_path,
                     overrides=["data.difficulty=easy", "data.limit_train=4", "data.limit_eval=2"])
    dm = build_datamodule(config, resolve_runtime(config))
    assert dm.source.params.contour_length == 6
    dm.prepare_data()
    folders = [p.name for p in (tmp_path / "generated" / "pathfinder32").iterdir() if p.is_dir()]
    assert len(folders) == 1 and folders[0].startswith("c6-")


def _write_aan(path: Path, rows: int, seed: int) -> None:
    """An AAN pairs file in the official layout: no header; label, id1, id2, text1, text2."""
    import random

    rng = random.Random(seed)

    def text() -> str:
        return " ".join(rng.choice(["graph", "parse", "tree", "neural", "corpus"]) for _ in range(rng.randint(5, 30)))

    lines = [f"{i % 2}\tdoc{i}a\tdoc{i}b\t{text()}\t{text()}" for i in range(rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_retrieval_trains_the_dual_encoder(tmp_path):
    data = tmp_path / "aan"
    for seed, (split, rows) in enumerate((("train", 24), ("eval", 8), ("test", 8))):
        _write_aan(data / "tsv_data" / f"new_aan_pairs.{split}.tsv", rows, seed)
    runs = tmp_path / "runs"
    code = main(["train", "--task", "retrieval", "--attention", "performer", "--preset", "smoke",
                 "--seq-len", "64", "--runs-dir", str(runs), "--data-dir", str(data), "train.max_steps=3",
                 "train.val_check_interval=3", "train.batch_size=8", "optim.warmup_steps=1",
                 "train.throughput_warmup_steps=1"])
    assert code == 0
    rec = only_record(runs)
    assert rec["status"] == "completed" and rec["steps"] == 3
    # Two documents of 64 tokens per example.
    assert rec["train_tokens_per_s"] == pytest.approx(2 * 64 * rec["train_samples_per_s"])
    ckpt = torch.load(next(runs.glob("**/last.ckpt")), map_location="cpu", weights_only=False)
    assert ckpt["state_dict"]["model.head.0.weight"].shape[1] == 4 * 32  # [u, v, u*v, u-v]


class Crash(pl.Callback):
    def __init__(self, at_step: int, error: BaseException):
        self.at_step, self.error = at_step, error

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.at_step:
            raise self.error


class CountBatches(pl.Callback):
    def __init__(self):
        self.steps = []

    def on_train_batch_end(self, trainer, *args):
        self.steps.append(trainer.global_step)


def test_resume_after_interruption_repeats_no_step(tmp_path, data_dir):
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=[*FAST, "train.max_steps=8", "train.val_check_interval=3"])
    with pytest.raises(RunFailed) as failure:
        train(config, callbacks=[Crash(5, RuntimeError("power cut"))], progress_bar=False)
    assert failure.value.status == "failed"
    rec = load(config.run_dir() / "result.json")
    assert rec["status"] == "failed" and rec["error"] == "RuntimeError: power cut" and rec["steps"] == 5
    assert "power cut" in (config.run_dir() / "error.log").read_text()
    last = torch.load(config.run_dir() / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 5

    # Without --resume an interrupted run is not silently restarted.
    with pytest.raises(ValueError, match="pass --resume"):
        train(config, progress_bar=False)

    counter = CountBatches()
    rec = train(config, resume=True, callbacks=[counter], progress_bar=False)
    assert not (config.run_dir() / "error.log").exists()  # the failure's traceback went with its record
    assert counter.steps == [6, 7, 8]  # exactly the missing steps
    assert rec["status"] == "completed" and rec["steps"] == 8
    assert [p["step"] for p in rec["val_acc_curve"]] == [3, 6, 8]  # the point before the interruption is kept
    assert rec["wall_time_s"] > rec["val_acc_curve"][0]["wall_s"]
    assert load(config.run_dir() / "result.json")["status"] == "completed"


def test_a_run_resumes_with_another_number_of_loader_workers(tmp_path, data_dir):
    """A run tree moved to a machine whose data.num_workers differs (the default is 4 with CUDA, 0
    without) resumes with exactly the missing steps, from the loader position its checkpoint holds."""
    def config_with(workers):
        return resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                       overrides=[*FAST, "train.max_steps=8", "train.val_check_interval=3",
                                  f"data.num_workers={workers}"])

    with pytest.raises(RunFailed):
        train(config_with(1), callbacks=[Crash(5, RuntimeError("machine lost"))], progress_bar=False)
    # a loader state of torchdata alone (no position) fits only its own worker layout: a clear error
    # before anything runs, the record untouched
    last = config_with(0).run_dir() / "checkpoints" / "last.ckpt"
    full = torch.load(last, map_location="cpu", weights_only=False)
    bare = copy.deepcopy(full)
    for state in bare["loops"]["fit_loop"]["state_dict"]["combined_loader"]:
        state.pop("lra_position")
    torch.save(bare, last)
    with pytest.raises(ValueError, match=r"1 worker process\(es\) and this run's has 0: resume with data.num_workers=1"):
        train(config_with(0), resume=True, progress_bar=False)
    assert load(config_with(0).run_dir() / "result.json")["status"] == "failed"
    torch.save(full, last)

    counter = CountBatches()
    rec = train(config_with(0), resume=True, callbacks=[counter], progress_bar=False)
    assert counter.steps == [6, 7, 8] and rec["status"] == "completed"


def test_a_moved_run_tree_resumes_with_its_best_checkpoint_state(tmp_path, data_dir):
    """A run tree copied elsewhere (another machine's checkout: the saved checkpoint dirpath is
    absolute) keeps its best score on resume: one best-*.ckpt afterwards, the best of the whole
    run, and last.ckpt names it. Lightning alone forgot the score there, so the first validation
    after the resume became "best" whatever its accuracy and the old best file stayed beside it."""
    import shutil

    def config_in(runs):
        return resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=runs, data_dir=data_dir,
                       overrides=[*FAST, "train.max_steps=12", "train.val_check_interval=3"])

    first = config_in(tmp_path / "a")
    with pytest.raises(RunFailed):
        train(first, callbacks=[Crash(7, RuntimeError("machine lost"))], progress_bar=False)
    shutil.move(str(tmp_path / "a"), str(tmp_path / "b"))
    moved = config_in(tmp_path / "b")
    rec = train(moved, resume=True, progress_bar=False)
    assert rec["status"] == "completed"
    ckpts = moved.run_dir() / "checkpoints"
    best = sorted(ckpts.glob("best-*.ckpt"))
    assert len(best) == 1, best
    state = torch.load(ckpts / "last.ckpt", map_location="cpu", weights_only=False)
    mc = next(v for v in state["callbacks"].values() if "best_model_path" in v)
    assert Path(mc["best_model_path"]) == best[0] and Path(mc["dirpath"]) == ckpts.resolve()
    curve = rec["val_acc_curve"]
    top = max(p["val_acc"] for p in curve)
    first_top = next(p["step"] for p in curve if p["val_acc"] == top)
    assert best[0].name == f"best-step{first_top}.ckpt", (best[0].name, curve)


def test_the_best_checkpoint_holds_the_weights_and_last_ckpt_the_training_state(tmp_path, data_dir):
    """Only last.ckpt is resumed from, so only it carries the optimizer's moments and the callbacks'
    states; the best checkpoint, which testing, `lra eval` and `--init-from` read for its weights,
    carries the weights (and the config that rebuilds the model), at a fraction of the size."""
    from lra.checkpoints import load_checkpoint, run_checkpoint
    from lra.evaluate import evaluate

    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=[*FAST, "train.max_steps=12", "train.val_check_interval=3"])
    rec = train(config, progress_bar=False)
    assert rec["status"] == "completed" and rec["test_acc"] is not None
    best_path, last_path = run_checkpoint(config.run_dir(), "best"), run_checkpoint(config.run_dir(), "last")
    best, last = load_checkpoint(best_path), load_checkpoint(last_path)
    assert "optimizer_states" not in best and "callbacks" not in best
    assert last["optimizer_states"] and last["callbacks"]
    assert best["state_dict"].keys() == last["state_dict"].keys() and best["hyper_parameters"]
    assert best_path.stat().st_size < 0.6 * last_path.stat().st_size
    again = evaluate(config.run_dir(), split="test")
    assert again["accuracy"] == pytest.approx(rec["test_acc"]) and again["step"] == best["global_step"]


def test_ctrl_c_saves_the_step_and_records_the_interruption(tmp_path, data_dir):
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    # Lightning shuts down gracefully and exits with 1; train() ends it as Ctrl-C (the CLI: exit 130)
    with pytest.raises(KeyboardInterrupt):
        train(config, callbacks=[Crash(4, KeyboardInterrupt())], progress_bar=False)
    rec = load(config.run_dir() / "result.json")
    assert rec["status"] == "interrupted" and rec["error"].startswith("interrupted") and rec["steps"] == 4
    last = torch.load(config.run_dir() / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4


def test_a_run_killed_without_a_graceful_stop_resumes_from_its_last_validation(tmp_path, data_dir, monkeypatch):
    """last.ckpt is written after every validation, not only with a new best checkpoint (Lightning's
    save_last), so a hard kill (SIGKILL: no exception handler runs) loses only the steps after the
    last validation; the checkpoint's callback state still names the best checkpoint."""
    from lra import callbacks
    from lra.checkpoints import run_checkpoint

    monkeypatch.setattr(callbacks.SaveOnInterrupt, "on_exception", lambda *args: None)  # as under SIGKILL
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=[*FAST, "train.max_steps=12", "train.val_check_interval=3"])
    with pytest.raises(RunFailed):
        train(config, callbacks=[Crash(11, RuntimeError("machine lost"))], progress_bar=False)
    ckpt_dir = config.run_dir() / "checkpoints"
    last = torch.load(ckpt_dir / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 9                                  # validations at 3, 6, 9
    assert not list(ckpt_dir.glob("*.tmp"))
    states = [v for v in last["callbacks"].values() if "best_model_path" in v]
    assert len(states) == 1 and Path(states[0]["best_model_path"]).name in {p.name for p in ckpt_dir.glob("best-*.ckpt")}
    assert run_checkpoint(config.run_dir(), "best").name == Path(states[0]["best_model_path"]).name
    counter = CountBatches()
    rec = train(config, resume=True, callbacks=[counter], progress_bar=False)
    assert counter.steps == [10, 11, 12] and rec["status"] == "completed"
    assert len(list(ckpt_dir.glob("best-*.ckpt"))) == 1


def test_lra_stop_at_stops_gracefully_and_the_run_resumes(tmp_path, data_dir, monkeypatch):
    """$LRA_STOP_AT: at the first step boundary after the deadline (here: already past) the run stops
    as under Ctrl-C -- last.ckpt at that step, record interrupted -- and --resume trains exactly the
    missing steps."""
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=[*FAST, "train.max_steps=6", "train.val_check_interval=3"])
    monkeypatch.setenv("LRA_STOP_AT", "1")
    with pytest.raises(KeyboardInterrupt):  # Lightning's graceful shutdown, then as Ctrl-C
        train(config, progress_bar=False)
    rec = load(config.run_dir() / "result.json")
    assert rec["status"] == "interrupted" and rec["steps"] == 1
    assert rec["error"] == "interrupted ($LRA_STOP_AT deadline reached at step 1)"
    assert not (config.run_dir() / "error.log").exists()  # a stop is no error: no traceback beside it
    last = torch.load(config.run_dir() / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 1
    monkeypatch.setenv("LRA_STOP_AT", str(10**12))   # far away: installed, never due
    counter = CountBatches()
    rec = train(config, resume=True, callbacks=[counter], progress_bar=False)
    assert counter.steps == [2, 3, 4, 5, 6] and rec["status"] == "completed"


def test_lra_train_stopped_at_its_deadline_exits_as_ctrl_c_does(tmp_path, data_dir, monkeypatch, capsys):
    """Exit 130 and "run the same command again" for a resumable stop, as for Ctrl-C (Lightning
    ends both with SystemExit(1))."""
    from lra.cli import main

    monkeypatch.setenv("LRA_STOP_AT", "1")
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(tmp_path), "--data-dir", str(data_dir), "--no-progress", *FAST])
    assert code == 130 and "interrupted; run the same command again to continue" in capsys.readouterr().err


def test_a_bad_lra_stop_at_is_a_clear_error_before_anything_is_written(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("LRA_STOP_AT", "tomorrow")
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    with pytest.raises(ValueError, match="LRA_STOP_AT must be a time in Unix seconds"):
        train(config, progress_bar=False)
    assert not config.run_dir().exists()


def test_compile_mode_reaches_torch_compile_and_leaves_the_run_id(tmp_path, data_dir, capsys, monkeypatch):
    """--compile-mode (train.compile_mode) is torch.compile's mode; it is recorded in the run's config
    and, being a speed setting, is not part of the run id. An unknown mode is refused before training."""
    modes = []

    def fake_compile(fn, *args, **kwargs):  # records the call; the model runs eagerly
        modes.append(kwargs.get("mode"))
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    runs = tmp_path / "runs"
    argv = ["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
            "--runs-dir", str(runs), "--data-dir", str(data_dir), "--compile"]
    assert main([*argv, "--compile-mode", "reduce-overhead", *FAST]) == 0, capsys.readouterr().err
    assert modes and set(modes) == {"reduce-overhead"}
    rec = only_record(runs)
    assert rec["compile"] is True and rec["config"]["train"]["compile_mode"] == "reduce-overhead"
    plain = resolve("listops", "softmax", preset="smoke", seq_len=64, overrides=FAST)
    assert rec["run_id"] == plain.run_id()

    modes.clear()
    assert main([*argv, "--force", *FAST, "train.compile_mode=max-autotune"]) == 0, capsys.readouterr().err
    assert set(modes) == {"max-autotune"}
    capsys.readouterr()
    assert main([*argv, "--force", "--compile-mode", "fastest", *FAST]) == 2
    assert "train.compile_mode: expected one of 'default', 'reduce-overhead'" in capsys.readouterr().err
    assert set(modes) == {"max-autotune"}  # nothing else was compiled


def _python_output(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_the_cli_is_interruptible_even_when_started_with_sigint_ignored():
    """A background job of a non-interactive shell (`lra train ... &` in a script) starts with SIGINT
    ignored; `lra` re-enables it, so Ctrl-C or `kill -INT` reaches the run and it stops gracefully
    (the tests above show what it then saves). A handler of the caller's own is left alone."""
    assert _python_output(
        "import os, signal\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from lra.cli import interruptible\n"
        "interruptible()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    signal.sigtimedwait([], 0.5)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n") == "interrupted"
    assert _python_output(
        "import signal\n"
        "def mine(*_): pass\n"
        "signal.signal(signal.SIGINT, mine)\n"
        "from lra.cli import interruptible\n"
        "interruptible()\n"
        "print(signal.getsignal(signal.SIGINT) is mine)\n") == "True"


def test_oom_is_recorded_as_oom(tmp_path, data_dir):
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    error = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    with pytest.raises(RunFailed) as failure:
        train(config, callbacks=[Crash(2, error)], progress_bar=False)
    assert failure.value.status == "oom"
    rec = load(config.run_dir() / "result.json")
    assert rec["status"] == "oom" and "CUDA out of memory" in rec["error"]


def test_failed_run_exits_1_with_its_record(tmp_path, data_dir, capsys):
    # A valid setting that fails inside the run here (a misspelt one is refused before the run).
    try:
        import transformer_engine  # noqa: F401
        pytest.skip("transformer_engine is installed: this precision would not fail")
    except ImportError:
        pass
    runs = tmp_path / "runs"
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(runs), "--data-dir", str(data_dir), *FAST, "train.precision=transformer-engine"])
    assert code == 1
    err = capsys.readouterr().err
    assert "run failed" in err and "result.json" in err
    rec = only_record(runs)
    assert rec["status"] == "failed" and "transformer_engine" in rec["error"]


@pytest.mark.cpu_machine("two CPU processes with gloo; Lightning would pick the GPU")
def test_ddp_with_two_cpu_processes(tmp_path, data_dir):
    """Lightning DDP (gloo) with 2 processes: one record from rank 0, the world size in it."""
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lra", "train", "--task", "listops", "--attention", "softmax", "--preset",
         "smoke", "--seq-len", "64", "--runs-dir", str(runs), "--data-dir", str(data_dir), "--devices", "2",
         "--strategy", "ddp", *FAST, "train.max_steps=4", "train.val_check_interval=2"],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = only_record(runs)
    assert rec["status"] == "completed" and rec["devices"] == 2 and rec["steps"] == 4
    assert [p["step"] for p in rec["val_acc_curve"]] == [2, 4]
    assert rec["config"]["train"]["strategy"] == "ddp"


# ---- units ----------------------------------------------------------------------------------------
def test_lr_schedule_warmup_then_decay():
    kw = dict(warmup_steps=4, total_steps=12)
    assert [lr_factor(s, schedule="linear", **kw) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, schedule="linear", **kw) == 1.0
    assert lr_factor(8, schedule="linear", **kw) == pytest.approx(0.5)
    assert lr_factor(12, schedule="linear", **kw) == 0.0
    assert lr_factor(8, schedule="cosine", **kw) == pytest.approx(0.5)
    assert lr_factor(6, schedule="cosine", **kw) == pytest.approx(0.5 * (1 + 2 ** -0.5))
    assert lr_factor(12, schedule="cosine", min_lr_ratio=0.1, **kw) == pytest.approx(0.1)
    assert lr_factor(100, schedule="constant", **kw) == 1.0
    assert lr_factor(0, schedule="linear", warmup_steps=0, total_steps=10) == 1.0


def _onecycle_trace(optimizer, scheduler, steps: int) -> tuple[list, list]:
    """(lr, beta1) that each of `steps` optimizer steps uses, stepping as Lightning does."""
    lrs, beta1s = [], []
    for _ in range(steps):
        group = optimizer.param_groups[0]
        lrs.append(group["lr"])
        beta1s.append(group["betas"][0])
        optimizer.step()
        scheduler.step()
    return lrs, beta1s


def test_onecycle_is_the_nystromformer_schedule():
    """torch's OneCycleLR, pct_start = warmup / total, linear anneal, default div factors and beta1."""
    from lra.model import DataSpec

    lr, warmup, total = 1e-3, 4, 12
    config = resolve("listops", "softmax", preset="smoke",
                     overrides=["optim.schedule=onecycle", f"optim.lr={lr}", f"optim.warmup_steps={warmup}",
                                f"train.max_steps={total}", "optim.beta1=0.9", "optim.weight_decay=0.01"])
    module = LraModule(config.to_dict(), DataSpec(16, 10, 32).to_dict())
    opt = module.configure_optimizers()
    optimizer, scheduler = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
    assert isinstance(scheduler, torch.optim.lr_scheduler.OneCycleLR)
    assert opt["lr_scheduler"]["interval"] == "step" and len(optimizer.param_groups) == 2
    lrs, beta1s = _onecycle_trace(optimizer, scheduler, total)
    low, floor = lr / 25, lr / 25 / 1e4
    # Up linearly from lr/25 to lr in `warmup` steps (the peak at 0-based step warmup - 1) ...
    assert lrs[:warmup] == pytest.approx([low + (lr - low) * k / (warmup - 1) for k in range(warmup)])
    # ... then linearly down to lr/25/1e4 at the last step.
    span = total - warmup
    assert lrs[warmup - 1:] == pytest.approx([lr + (floor - lr) * k / span for k in range(span + 1)])
    assert lrs[0] == pytest.approx(low) and max(lrs) == pytest.approx(lr) and lrs[-1] == pytest.approx(floor)
    # beta1 (optim.beta1 is replaced) runs the other way: 0.95 -> 0.85 at the peak -> 0.95; beta2 stays.
    assert beta1s[0] == pytest.approx(0.95) and beta1s[warmup - 1] == pytest.approx(0.85)
    assert beta1s[-1] == pytest.approx(0.95)
    assert beta1s[:warmup] == pytest.approx([0.95 - 0.1 * k / (warmup - 1) for k in range(warmup)])
    assert all(g["betas"][1] == 0.999 for g in optimizer.param_groups)
    assert all(g["lr"] == optimizer.param_groups[0]["lr"] for g in optimizer.param_groups)
    # The run's total is exactly its optimizer steps: one more step would be an error.
    with pytest.raises(ValueError, match="Tried to step"):
        scheduler.step()


class RecordLr(pl.Callback):
    def __init__(self):
        self.lrs, self.beta1s = [], []

    def on_train_batch_start(self, trainer, *args):
        group = trainer.optimizers[0].param_groups[0]
        self.lrs.append(group["lr"])
        self.beta1s.append(group["betas"][0])


def test_onecycle_run_ends_at_its_last_step_and_resumes_its_schedule(tmp_path, data_dir):
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=[*FAST, "optim.schedule=onecycle", "optim.warmup_steps=3", "train.max_steps=8"])
    before, after = RecordLr(), RecordLr()
    with pytest.raises(RunFailed):
        train(config, callbacks=[before, Crash(5, RuntimeError("power cut"))], progress_bar=False)
    last = torch.load(config.run_dir() / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["lr_schedulers"][0]["total_steps"] == 8 and last["lr_schedulers"][0]["last_epoch"] == 5
    rec = train(config, resume=True, callbacks=[after], progress_bar=False)
    assert rec["status"] == "completed" and rec["steps"] == 8  # no step past the cycle's end
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.optim.lr)
    want_lrs, want_beta1s = _onecycle_trace(
        optimizer, one_cycle(optimizer, lr=config.optim.lr, warmup_steps=3, total_steps=8), 8)
    assert before.lrs + after.lrs == pytest.approx(want_lrs)
    assert before.beta1s + after.beta1s == pytest.approx(want_beta1s)


def test_weight_decay_only_on_linear_weights():
    from lra.model import DataSpec, build_model

    config = resolve("listops", "softmax", preset="smoke")
    model = build_model(config.model, DataSpec(16, 10, 32), attention="softmax")
    decay, no_decay = split_weight_decay(model)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].endswith("weight") and "norm" not in names[id(p)] for p in decay)
    assert {"encoder.embed.weight", "encoder.positions.weight"} <= {names[id(p)] for p in no_decay}
    assert len(decay) + len(no_decay) == len(list(model.parameters()))


def test_weight_decay_spares_the_linear_pixel_embedding():
    from lra.model import DataSpec, build_model

    config = resolve("pathfinder32", "softmax", preset="smoke", overrides=["model.pixel_embedding=linear"])
    model = build_model(config.model, DataSpec(256, 2, 1024, image_shape=(32, 32)), attention="softmax")
    decay, no_decay = split_weight_decay(model)
    names = {id(p): n for n, p in model.named_parameters()}
    assert "encoder.embed.weight" in {names[id(p)] for p in no_decay}
    assert "encoder.embed.weight" not in {names[id(p)] for p in decay}
    assert {"head.0.weight", "encoder.blocks.0.attention.qkv.weight"} <= {names[id(p)] for p in decay}


class _FakeStrategy:
    class root_device:  # noqa: N801 - mimics torch.device
        type = "cpu"


class _FakeTrainer:
    def __init__(self):
        self.strategy, self.world_size, self.accumulate_grad_batches = _FakeStrategy(), 2, 1
        self.sanity_checking, self.global_step, self.max_steps, self.callback_metrics = False, 0, 10, {}


def test_training_stats_exclude_warmup_and_validation(monkeypatch):
    import lra.callbacks as cb

    clock = [100.0]
    monkeypatch.setattr(cb.time, "perf_counter", lambda: clock[0])
    stats, trainer = TrainingStats(warmup_steps=2), _FakeTrainer()
    batch = {"input_ids": torch.zeros(4, 10, dtype=torch.long)}
    stats.on_fit_start(trainer, None)

    def step(seconds):
        stats.on_train_batch_start(trainer, None, batch, 0)
        clock[0] += seconds
        trainer.global_step += 1
        stats.on_train_batch_end(trainer, None, None, batch, 0)

    step(50.0)
    step(50.0)  # two warm-up steps: not measured
    for _ in range(3):
        step(1.0)
    stats.on_validation_start(trainer, None)
    clock[0] += 30.0  # validation: not training time
    trainer.callback_metrics = {"val/acc": torch.tensor(0.75)}
    stats.on_validation_end(trainer, None)
    step(1.0)
    stats.on_train_end(trainer, None)
    s = stats.summary()
    assert s["measured_steps"] == 4 and s["step_time_ms"] == pytest.approx(1000.0)
    assert s["train_samples_per_s"] == pytest.approx(8.0)  # 4 samples x 2 processes per second
    assert s["train_tokens_per_s"] == pytest.approx(80.0)
    assert s["best_val_acc"] == 0.75 and s["time_to_best_s"] == pytest.approx(133.0)
    assert s["val_acc_curve"] == [{"step": 5, "wall_s": 133.0, "val_acc": 0.75}]
    # The checkpointed state restores the whole-run figures and continues the clock.
    again = TrainingStats(warmup_steps=2)
    again.load_state_dict(stats.state_dict())
    assert again.summary()["wall_time_s"] == pytest.approx(134.0)
    assert again.summary()["train_samples_per_s"] == pytest.approx(8.0)


class RecordBatches(pl.Callback):
    """A digest of every training batch's input_ids, in the order trained."""

    def __init__(self):
        self.digests = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import hashlib

        ids = batch["input_ids"].detach().cpu().contiguous().numpy()
        self.digests.append(hashlib.sha1(ids.tobytes()).hexdigest())


@pytest.mark.parametrize("crash_at", [4, 6, 9])  # mid first epoch, at its end, mid second epoch
def test_resumed_run_trains_on_exactly_the_batches_of_an_uninterrupted_one(tmp_path, data_dir, crash_at):
    import warnings

    # 48 examples in batches of 8: 6 batches an epoch, so 11 steps cross an epoch boundary.
    overrides = [*FAST, "train.max_steps=11", "train.val_check_interval=5"]
    whole = RecordBatches()
    train(resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "whole",
                  data_dir=data_dir, overrides=overrides), callbacks=[whole], progress_bar=False)
    assert len(whole.digests) == 11 and whole.digests[:5] != whole.digests[6:11]

    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "cut",
                     data_dir=data_dir, overrides=overrides)
    before, after = RecordBatches(), RecordBatches()
    with pytest.raises(RunFailed):
        train(config, callbacks=[before, Crash(crash_at, RuntimeError("power cut"))], progress_bar=False)
    assert len(before.digests) == crash_at
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec = train(config, resume=True, callbacks=[after], progress_bar=False)
    assert rec["status"] == "completed" and rec["steps"] == 11
    assert before.digests + after.digests == whole.digests
    assert not [w for w in caught if "not resumable" in str(w.message)]


@pytest.mark.parametrize("interrupt", ["crash after batch 9", "ctrl-c in batch 7"])
def test_resume_with_loader_worker_processes_trains_on_exactly_the_batches_of_an_uninterrupted_one(
        tmp_path, data_dir, interrupt):
    """With DataLoader workers the resumed loader draws its first indices before Lightning sets the
    epoch: the saved position carries its epoch (second epoch here: 6 batches an epoch)."""
    overrides = [*FAST, "train.max_steps=11", "train.val_check_interval=5", "data.num_workers=2"]
    whole = RecordBatches()
    train(resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "whole",
                  data_dir=data_dir, overrides=overrides), callbacks=[whole], progress_bar=False)
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "cut",
                     data_dir=data_dir, overrides=overrides)
    before, after = RecordBatches(), RecordBatches()
    stop, trained = ((Crash(9, RuntimeError("power cut")), 9) if interrupt.startswith("crash")
                     else (InterruptAtBatch(7, "start"), 6))
    with pytest.raises((RunFailed, KeyboardInterrupt)):
        train(config, callbacks=[before, stop], progress_bar=False)
    rec = train(config, resume=True, callbacks=[after], progress_bar=False)
    assert rec["status"] == "completed" and rec["steps"] == 11
    assert before.digests[:trained] + after.digests == whole.digests


def test_max_minutes_stops_training_by_wall_clock(tmp_path, data_dir, capsys):
    """train.max_minutes (Lightning's max_time) ends the loop early; the run is still completed and
    tested, and its record says how many steps it made."""
    runs = tmp_path / "runs"
    fast = [a for a in FAST if not a.startswith("train.max_steps")]
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(runs), "--data-dir", str(data_dir), *fast, "train.max_steps=100000",
                 "train.max_minutes=0.0001"])
    assert code == 0, capsys.readouterr().err
    rec = only_record(runs)
    assert rec["status"] == "completed" and 1 <= rec["steps"] < 100000
    assert rec["config"]["train"]["max_minutes"] == 0.0001 and rec["test_acc"] is not None
    assert main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke",
                 "--runs-dir", str(runs), "--data-dir", str(data_dir), "train.max_minutes=0"]) == 2
    assert "train.max_minutes must be > 0" in capsys.readouterr().err


class RecordLosses(pl.Callback):
    """(global step before the batch, digest of its input_ids, its loss) of every training micro-batch."""

    def __init__(self):
        self.rows = []
        self._step = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        import hashlib

        digest = hashlib.sha1(batch["input_ids"].detach().cpu().contiguous().numpy().tobytes()).hexdigest()
        self.rows.append((self._step, digest, float(outputs["loss"])))


class InterruptAtBatch(pl.Callback):
    """Ctrl-C while the n-th training micro-batch of this fit runs (`where="start"`: fetched, not
    yet trained on) or right after it (`where="end"`)."""

    def __init__(self, n: int, where: str):
        self.n, self.where, self.seen = n, where, 0

    def on_train_batch_start(self, trainer, *args):
        self.seen += 1
        if self.seen == self.n and self.where == "start":
            raise KeyboardInterrupt

    def on_train_batch_end(self, trainer, *args):
        if self.seen == self.n and self.where == "end":
            raise KeyboardInterrupt


def _whole_and_resumed(tmp_path, data_dir, overrides, interrupt, stop_at_monkeypatch=None):
    """Loss traces of an uninterrupted run and of the resumed part of an interrupted one, and the
    step of the last.ckpt it resumed from (interrupted by `interrupt`, or $LRA_STOP_AT set to a past
    time through `stop_at_monkeypatch`)."""
    whole = RecordLosses()
    train(resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "whole", data_dir=data_dir,
                  overrides=overrides), callbacks=[whole], progress_bar=False)
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "cut", data_dir=data_dir,
                     overrides=overrides)
    if stop_at_monkeypatch is not None:
        stop_at_monkeypatch.setenv("LRA_STOP_AT", "1")
    with pytest.raises((KeyboardInterrupt, RunFailed)):
        train(config, callbacks=[interrupt] if interrupt else [], progress_bar=False)
    if stop_at_monkeypatch is not None:
        stop_at_monkeypatch.delenv("LRA_STOP_AT")
    last = torch.load(config.run_dir() / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    after = RecordLosses()
    rec = train(config, resume=True, callbacks=[after], progress_bar=False)
    assert rec["status"] == "completed"
    return whole.rows, after.rows, last["global_step"]


def _tail_from_step(rows, step):
    return [r for r in rows if r[0] >= step]


@pytest.mark.cpu_machine("bit-exact resumption; on the GPU the run's float sums vary in their last bits")
def test_resumed_run_draws_the_dropout_masks_of_an_uninterrupted_one(tmp_path, data_dir):
    """The RNG state is in the checkpoint: with dropout the resumed steps' losses are exactly those of
    the uninterrupted run (re-seeded at the restart instead, it would draw the first steps' masks again)."""
    overrides = [*FAST, "train.max_steps=10", "train.val_check_interval=4", "model.dropout=0.1",
                 "model.attention_dropout=0.1"]
    whole, after, step = _whole_and_resumed(tmp_path, data_dir, overrides, Crash(6, RuntimeError("power cut")))
    assert step == 6 and len(after) == 4
    assert after == _tail_from_step(whole, 6)


@pytest.mark.cpu_machine("bit-exact resumption; on the GPU the run's float sums vary in their last bits")
def test_resume_from_a_validation_checkpoint_with_dropout_continues_exactly(tmp_path, data_dir, monkeypatch):
    from lra import callbacks

    monkeypatch.setattr(callbacks.SaveOnInterrupt, "on_exception", lambda *args: None)  # as under SIGKILL
    overrides = [*FAST, "train.max_steps=10", "train.val_check_interval=4", "model.dropout=0.1",
                 "model.attention_dropout=0.1"]
    whole, after, step = _whole_and_resumed(tmp_path, data_dir, overrides, Crash(6, RuntimeError("machine lost")))
    assert step == 4 and len(after) == 6
    assert after == _tail_from_step(whole, 4)


@pytest.mark.cpu_machine("bit-exact resumption; on the GPU the run's float sums vary in their last bits")
def test_ctrl_c_during_a_batch_trains_that_batch_after_resume(tmp_path, data_dir):
    """A batch fetched but interrupted before it was trained on is trained on after --resume (the
    loader's own position counts it as consumed; the resumed run would skip it)."""
    overrides = [*FAST, "train.max_steps=10", "train.val_check_interval=4"]
    whole, after, step = _whole_and_resumed(tmp_path, data_dir, overrides, InterruptAtBatch(6, "start"))
    assert step == 5
    assert after == _tail_from_step(whole, 5)


@pytest.mark.cpu_machine("bit-exact resumption; on the GPU the run's float sums vary in their last bits")
def test_ctrl_c_in_the_first_batch_after_a_resume_keeps_the_resumed_position(tmp_path, data_dir):
    """Interrupted again while the first batch after a resume runs: last.ckpt keeps the loader
    position it resumed from, so that batch is trained on after the next resume."""
    overrides = [*FAST, "train.max_steps=10", "train.val_check_interval=4"]
    whole = RecordLosses()
    train(resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "whole", data_dir=data_dir,
                  overrides=overrides), callbacks=[whole], progress_bar=False)
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path / "cut", data_dir=data_dir,
                     overrides=overrides)
    with pytest.raises(RunFailed):
        train(config, callbacks=[Crash(5, RuntimeError("power cut"))], progress_bar=False)
    with pytest.raises(KeyboardInterrupt):
        train(config, resume=True, callbacks=[InterruptAtBatch(1, "start")], progress_bar=False)
    last = torch.load(config.run_dir() / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 5
    after = RecordLosses()
    assert train(config, resume=True, callbacks=[after], progress_bar=False)["status"] == "completed"
    assert after.rows == _tail_from_step(whole.rows, 5)


def test_validations_after_a_resume_keep_their_steps(tmp_path, data_dir):
    """Ctrl-C on a batch fetched but not trained on (step 5): the resumed run validates at step 8 and
    names its checkpoints by the steps of an uninterrupted run, not one step early (7, best-step7)."""
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=[*FAST, "train.max_steps=10", "train.val_check_interval=4"])
    with pytest.raises(KeyboardInterrupt):
        train(config, callbacks=[InterruptAtBatch(6, "start")], progress_bar=False)
    rec = train(config, resume=True, progress_bar=False)
    assert [p["step"] for p in rec["val_acc_curve"]] == [4, 8, 10]
    best = [p.name for p in (config.run_dir() / "checkpoints").glob("best-*.ckpt")]
    assert len(best) == 1 and best[0] in {"best-step4.ckpt", "best-step8.ckpt", "best-step10.ckpt"}


@pytest.mark.parametrize("batch", [7, 11])  # the first batch of the second epoch; one in the middle of it
def test_ctrl_c_during_a_batch_with_accumulation_resumes_exactly(tmp_path, data_dir, batch):
    overrides = [*FAST, "train.max_steps=8", "train.val_check_interval=4", "train.accumulate_grad_batches=2"]
    whole, after, step = _whole_and_resumed(tmp_path, data_dir, overrides, InterruptAtBatch(batch, "start"))
    assert step == (batch - 1) // 2
    assert after == _tail_from_step(whole, step)


def test_ctrl_c_between_accumulated_micro_batches_keeps_the_validation_checkpoint(tmp_path, data_dir):
    """Interrupted after micro-batch 11 of 2-batch steps (step 6 half accumulated): no checkpoint can
    hold the half-accumulated gradient, so last.ckpt stays at the last validation (step 4) and the
    resumed run repeats steps 5 and 6 exactly (not a step on batch 12's gradient alone)."""
    overrides = [*FAST, "train.max_steps=8", "train.val_check_interval=4", "train.accumulate_grad_batches=2"]
    whole, after, step = _whole_and_resumed(tmp_path, data_dir, overrides, InterruptAtBatch(11, "end"))
    assert step == 4
    assert after == _tail_from_step(whole, 4)


@pytest.mark.cpu_machine("bit-exact resumption; on the GPU the run's float sums vary in their last bits")
def test_lra_stop_at_waits_for_the_end_of_an_accumulated_step(tmp_path, data_dir, monkeypatch):
    overrides = [*FAST, "train.max_steps=6", "train.val_check_interval=3", "train.accumulate_grad_batches=2"]
    # $LRA_STOP_AT already due at the first micro-batch
    whole, after, step = _whole_and_resumed(tmp_path, data_dir, overrides, None, stop_at_monkeypatch=monkeypatch)
    assert step == 1  # not after micro-batch 1, before the first step
    assert after == _tail_from_step(whole, 1)


@pytest.mark.parametrize("override", ["optim.lr=nan", "optim.lr=inf", "optim.grad_clip=nan", "model.dropout=nan"])
def test_non_finite_config_values_are_refused_before_the_run(tmp_path, capsys, override):
    runs = tmp_path / "runs"
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"), *FAST, override])
    assert code == 2 and "must be a finite number" in capsys.readouterr().err
    assert not runs.exists()


def test_a_diverging_run_is_recorded_diverged_and_skipped_by_skip_failed(tmp_path, capsys):
    runs, data = tmp_path / "runs", tmp_path / "data"
    args = ["--preset", "smoke", "--runs-dir", str(runs), "--data-dir", str(data), *FAST,
            "optim.lr=1e12", "optim.grad_clip=0", "optim.warmup_steps=0"]
    code = main(["train", "--task", "listops", "--attention", "softmax", "--seq-len", "64", *args])
    assert code == 1
    rec = only_record(runs)
    assert rec["status"] == "diverged" and "not finite" in rec["error"]
    capsys.readouterr()
    code = main(["sweep", "--tasks", "listops", "--attentions", "softmax", "--seq-lens", "64", "--skip-failed", *args])
    assert "skipped" in capsys.readouterr().out and only_record(runs)["status"] == "diverged"


def test_host_memory_error_is_recorded_as_oom(tmp_path, data_dir):
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    with pytest.raises(RunFailed) as failure:
        train(config, callbacks=[Crash(2, MemoryError())], progress_bar=False)
    assert failure.value.status == "oom" and load(config.run_dir() / "result.json")["status"] == "oom"


def test_the_record_is_readable_by_everyone(tmp_path, data_dir):
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    train(config, progress_bar=False)
    assert (config.run_dir() / "result.json").stat().st_mode & 0o777 == 0o644
    for ckpt in (config.run_dir() / "checkpoints").glob("*.ckpt"):
        assert ckpt.stat().st_mode & 0o777 == 0o644


def test_checkpoints_are_written_in_their_own_folder_then_moved_into_place(tmp_path, data_dir, monkeypatch):
    """Not through the system temp folder (another file system, where a move is a copy): with that
    folder unusable the run still checkpoints, and every file is moved over its target by os.replace."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-folder"))
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: replaced.append((Path(src), Path(dst))) or real_replace(src, dst))
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    assert train(config, progress_bar=False)["status"] == "completed"
    ckpt_dir = config.run_dir() / "checkpoints"
    moves = [(src, dst) for src, dst in replaced if dst.suffix == ".ckpt"]
    assert "last.ckpt" in {dst.name for _, dst in moves} and any(dst.name.startswith("best-") for _, dst in moves)
    assert all(src.parent == dst.parent == ckpt_dir for src, dst in moves)
    assert not list(ckpt_dir.glob(".*.tmp"))


def test_a_full_disk_ends_the_run_with_one_line_and_leaves_it_resumable(tmp_path, data_dir, capsys, monkeypatch):
    """No space left while the run trains (simulated: chmod does not stop root): the command ends
    with one line naming the path and the cause, the record says failed (not running), and --resume
    continues from last.ckpt."""
    import errno

    full = tmp_path / "runs" / "full-disk.bin"

    class DiskFull(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 4:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(full))

    argv = ["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
            "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(data_dir), "--no-progress", *FAST]
    import lra.train as train_module

    original = train_module.train
    with monkeypatch.context() as patch:  # `lra train` with the failing callback in the run
        patch.setattr(train_module, "train", lambda config, **kw: original(config, callbacks=[DiskFull()], **kw))
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"lra train: run failed: OSError: [Errno {errno.ENOSPC}] No space left on device: '{full}'" in err
    rec = only_record(tmp_path / "runs")
    assert rec["status"] == "failed" and "No space left on device" in rec["error"]
    assert main([*argv, "--resume"]) == 0 and only_record(tmp_path / "runs")["status"] == "completed"


def test_a_record_that_cannot_be_written_is_one_line_and_never_stuck_at_running(tmp_path, data_dir, capsys,
                                                                                 monkeypatch):
    import errno

    from lra import records

    real_write = records.atomic_write_text
    calls = []

    def full_after_first(path, text):  # the "running" record lands, then the disk is full
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_write(path, text)

    class Fail(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "checkpoints/last.ckpt")

    monkeypatch.setattr(records, "atomic_write_text", full_after_first)
    config = resolve("listops", "softmax", preset="smoke", seq_len=64, runs_dir=tmp_path, data_dir=data_dir,
                     overrides=FAST)
    with pytest.raises(RunFailed) as failure:
        train(config, callbacks=[Fail()], progress_bar=False)
    assert failure.value.traceback == ""
    err = capsys.readouterr().err
    assert f"could not record the run's end in {config.record_path()}" in err and "No space left" in err
    # the record still says running, but no process holds the run: the next sweep resumes it
    from lra.sweep import _classify

    assert load(config.record_path())["status"] == "running"
    assert _classify(config.run_dir(), skip_failed=True) == ("resume", "interrupted run, resuming from last.ckpt")


def test_a_read_only_runs_dir_is_one_line_with_the_path(tmp_path, data_dir, capsys, monkeypatch):
    import errno

    from lra import run_lock

    def read_only(self):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.path))

    monkeypatch.setattr(run_lock.RunLock, "acquire", read_only)
    code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(data_dir), "--no-progress", *FAST])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("lra train: error: ") and err[-1].endswith("run.lock: Read-only file system")


@pytest.mark.parametrize("setting, message", [
    (["model.head_dim=256"], "head_dim 256 (model.head_dim) is not supported"),
    (["train.precision=64-true"], "not float64 (train.precision)"),
    (["train.batch_size=8192", "model.num_heads=8"],
     "batch size 8192 (train.batch_size) x 8 heads (model.num_heads) = 65,536 (batch, head) pairs, more than "
     "the 65,535"),
])
def test_settings_beyond_the_kernels_limits_are_refused_before_any_run_folder(tmp_path, capsys, setting, message):
    runs = tmp_path / "runs"
    code = main(["train", "--task", "listops", "--attention", "flash", "--preset", "smoke", "--seq-len", "64",
                 "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"), "--yes", *FAST, *setting])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not runs.exists()
