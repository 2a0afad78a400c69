"""One trainer per run folder (`lra.run_lock`): a second `lra train` / `lra sweep` on a run that another
process trains names that process and leaves the run alone; a crashed holder leaves no stale lock;
the children of a SIGKILLed sweep die with it, and the next sweep resumes their runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lra.cli import main
from lra.config import resolve
from lra.run_lock import LOCK_NAME, RunLock, RunLocked, holder

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ["train.batch_size=4", "data.limit_train=64", "data.limit_eval=8", "train.val_check_interval=2",
             "optim.warmup_steps=1"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run_dir(tmp_path: Path, *extra: str) -> Path:
    return resolve("listops", "softmax", preset="smoke", seed=0, seq_len=64, overrides=[*OVERRIDES, *extra],
                   runs_dir=str(tmp_path / "runs"), data_dir=str(tmp_path / "data")).run_dir()


def _hold(run_dir: Path) -> subprocess.Popen:
    """Another process holding the run folder's lock until it is killed."""
    code = f"from lra.run_lock import RunLock; RunLock({str(run_dir)!r}).acquire(); print('held', flush=True); " \
           "import time; time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie has ended; only its reaping is left to its new parent


def test_a_lock_names_its_holder_and_dies_with_it(tmp_path):
    run_dir = tmp_path / "run"
    proc = _hold(run_dir)
    try:
        assert holder(run_dir) == f"pid {proc.pid} on {os.uname().nodename}"
        try:
            RunLock(run_dir).acquire()
            raise AssertionError("a second lock was granted")
        except RunLocked as err:
            assert f"pid {proc.pid}" in str(err)
    finally:
        proc.kill()
        proc.wait()
    assert (run_dir / LOCK_NAME).exists() and holder(run_dir) is None  # the file stays, the lock does not
    with RunLock(run_dir):
        assert f"pid={os.getpid()}" in (run_dir / LOCK_NAME).read_text()
    assert holder(tmp_path / "never") is None and not (tmp_path / "never").exists()


def test_a_discarded_lock_removes_only_the_empty_folders_it_created(tmp_path):
    runs = tmp_path / "runs"
    (runs / "listops").mkdir(parents=True)
    RunLock(runs / "listops" / "softmax" / "run-a").acquire().discard()
    assert sorted(p.name for p in runs.iterdir()) == ["listops"] and not any((runs / "listops").iterdir())

    kept = RunLock(runs / "listops" / "softmax" / "run-b").acquire()
    (kept.run_dir / "config.yaml").write_text("written under the lock\n")
    kept.discard()  # something was written: the folder stays, the lock is released
    assert (kept.run_dir / "config.yaml").exists() and holder(kept.run_dir) is None

    existing = runs / "listops" / "softmax" / "run-c"
    existing.mkdir()
    RunLock(existing).acquire().discard()  # a folder that was there before stays
    assert existing.is_dir()


def test_train_on_a_locked_run_says_who_holds_it_and_writes_nothing(tmp_path, capsys):
    run_dir = _run_dir(tmp_path)
    proc = _hold(run_dir)
    try:
        code = main(["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
                     "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--no-progress",
                     *OVERRIDES])
    finally:
        proc.kill()
        proc.wait()
    err = capsys.readouterr().err
    assert code == 2 and f"in use by another trainer (pid {proc.pid} on" in err
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_NAME]


def test_sweep_leaves_a_locked_run_to_its_holder(tmp_path, capsys):
    run_dir = _run_dir(tmp_path)
    proc = _hold(run_dir)
    try:
        code = main(["sweep", "--tasks", "listops", "--attentions", "softmax", "--preset", "smoke",
                     "--seq-lens", "64", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
                     "--heartbeat", "0", *OVERRIDES])
    finally:
        proc.kill()
        proc.wait()
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"running elsewhere (pid {proc.pid} on" in out and "1 running elsewhere" in out
    assert not (run_dir / "result.json").exists() and not (run_dir / "train.log").exists()


def test_a_killed_sweep_takes_its_child_along_and_the_next_sweep_resumes(tmp_path, capsys):
    run_dir = _run_dir(tmp_path, "train.max_steps=100000")
    argv = [sys.executable, "-m", "lra", "sweep", "--tasks", "listops", "--attentions", "softmax", "--preset",
            "smoke", "--seq-lens", "64", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
            "--heartbeat", "0", *OVERRIDES, "train.max_steps=100000"]
    sweep = subprocess.Popen(argv, env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 60
    while time.time() < deadline and sweep.poll() is None and not last.exists():
        time.sleep(0.2)
    if not last.exists():
        sweep.kill()
        raise AssertionError(sweep.communicate()[0][-3000:])
    time.sleep(1.0)  # the child back in its training loop after the validation that wrote last.ckpt
    child = int(holder(run_dir).split()[1])
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.time() + 15
    # the leader of a dying multi-threaded process shows as a zombie while its other threads still
    # exit; its files (and so the lock) go with the last of them: wait for both
    while time.time() < deadline and not (_gone(child) and holder(run_dir) is None):
        time.sleep(0.2)
    assert _gone(child), "the sweep's child outlived it"
    assert holder(run_dir) is None
    record = json.loads((run_dir / "result.json").read_text())
    log = (run_dir / "train.log").read_text(errors="replace")[-3000:] if (run_dir / "train.log").exists() else ""
    assert record["status"] == "interrupted", f"{record['status']}: {record.get('error')}\n{log}"
    assert main([*argv[3:], "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "1 resume" in plan and "resuming from last.ckpt" in plan, plan
