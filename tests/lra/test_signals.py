"""SIGTERM (a cluster's time limit, preemption) and SIGINT (Ctrl-C) sent to a real training process
both end the run `interrupted` with a last.ckpt, and running it again with --resume completes it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ARGS = ["--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
        "train.batch_size=4", "data.limit_train=64", "data.limit_eval=8", "train.val_check_interval=2",
        "train.max_steps=100000", "optim.warmup_steps=1", "--no-progress"]


def _train(tmp_path, *extra):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, "-m", "lra", "train", *ARGS, "--runs-dir", str(tmp_path / "runs"),
                             "--data-dir", str(tmp_path / "data"), *extra], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_run_interrupted_and_resumable(tmp_path, sig):
    proc = _train(tmp_path)
    deadline = time.time() + 240
    last = None
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "runs").glob("listops/softmax/*/checkpoints/last.ckpt"))
        if found:   # it has trained and validated at least once
            last = found[0]
            break
        time.sleep(0.5)
    assert last is not None, proc.communicate()[0][-3000:]
    time.sleep(1.0)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    record = json.loads((last.parent.parent / "result.json").read_text())
    assert record["status"] == "interrupted", out[-3000:]
    assert record["steps"] > 0 and last.exists()
    steps = record["steps"]
    # the same command with --resume continues from that step (stopped again by $LRA_STOP_AT, so
    # that the test ends): more steps than before, and Lightning restored the checkpoint
    os.environ["LRA_STOP_AT"] = str(int(time.time()) + 25)
    try:
        proc = _train(tmp_path, "--resume")
    finally:
        del os.environ["LRA_STOP_AT"]
    out, _ = proc.communicate(timeout=240)
    again = json.loads((last.parent.parent / "result.json").read_text())
    assert again["status"] == "interrupted" and again["steps"] > steps, out[-3000:]
    assert "Restoring states from the checkpoint" in out


@pytest.mark.cpu_machine("two CPU processes with gloo; Lightning would pick the GPU")
def test_a_sigterm_under_ddp_stops_every_rank_at_one_step(tmp_path):
    """DDP with two processes, SIGTERM to the launching rank only (`kill`, `timeout`, the sweep): every
    rank stops at the same step, by a collective decision, and the run ends `interrupted`. With
    Lightning's own handling the ranks stopped at different steps: the run hung in a collective
    (its record still `running`) or died of a closed connection."""
    proc = _train(tmp_path, "--devices", "2", "--strategy", "ddp")
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if list((tmp_path / "runs").glob("listops/softmax/*/checkpoints/last.ckpt")):
            break
        time.sleep(0.5)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the DDP run did not end after SIGTERM") from None
    record = json.loads(next((tmp_path / "runs").glob("listops/softmax/*/result.json")).read_text())
    assert record["status"] == "interrupted" and record["error"] == "interrupted (SIGTERMException)", out[-3000:]
    from lra.callbacks import StopAt

    assert record["steps"] > 0 and record["steps"] % StopAt.DDP_EVERY == 0, out[-3000:]
    assert f"SIGTERM: every rank stops at step {record['steps']}" in out
