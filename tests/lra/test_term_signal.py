"""SIGTERM ends a run resumably however often it comes (`lra.term_signal`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra.config import resolve
from lra.term_signal import ending_on_sigterm

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ["train.batch_size=4", "data.limit_train=64", "data.limit_eval=8", "train.val_check_interval=2",
             "optim.warmup_steps=1", "train.max_steps=100000"]


def test_outside_a_fit_the_first_sigterm_interrupts_and_later_ones_are_ignored():
    before = signal.getsignal(signal.SIGTERM)
    with ending_on_sigterm():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode; never reached
        os.kill(os.getpid(), signal.SIGTERM)  # the run is ending: ignored
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_run_under_a_stream_of_sigterms_records_itself_interrupted(tmp_path):
    """A sweep killed by SIGKILL sends its child one SIGTERM per thread it dies through; without a
    handler of ours, Lightning's teardown left the default action in place and the second signal
    killed the run before it recorded itself (record `running`)."""
    config = resolve("listops", "softmax", preset="smoke", seed=0, seq_len=64, overrides=OVERRIDES,
                     runs_dir=str(tmp_path / "runs"), data_dir=str(tmp_path / "data"))
    run_dir = config.run_dir()
    argv = [sys.executable, "-m", "lra", "train", "--task", "listops", "--attention", "softmax", "--preset", "smoke",
            "--seq-len", "64", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
            "--no-progress", "--yes", *OVERRIDES]
    with open(tmp_path / "train.log", "w") as log:
        child = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                                 stderr=subprocess.STDOUT)
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 90
    while time.time() < deadline and child.poll() is None and not last.exists():
        time.sleep(0.1)
    assert last.exists(), (tmp_path / "train.log").read_text()[-3000:]
    sent = 0
    while child.poll() is None and sent < 1000:  # every 10 ms until it has ended
        child.send_signal(signal.SIGTERM)
        sent += 1
        time.sleep(0.01)
    child.wait(timeout=60)
    record = json.loads((run_dir / "result.json").read_text())
    assert sent > 1
    assert record["status"] == "interrupted", (record["status"], (tmp_path / "train.log").read_text()[-3000:])
    assert last.exists()
