"""A run's progress as lines of its train.log: written by `StepLines` while it trains without a
progress bar, read back by `read_progress` (the sweep's live display and heartbeat).

Two kinds of lines carry it:
    step 120/5000  loss 1.7312  201 samples/s        (StepLines: the first step, then every few seconds)
    step 150/5000  val_acc 0.3725  best ...          (lra.callbacks.TrainingStats at every validation)
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl

STEP_LINE = re.compile(r"^step (\d+)/(-?\d+)\b")
VAL_ACC = re.compile(r"\bval_acc (\d+(?:\.\d+)?)")


class StepLines(pl.Callback):
    """Prints `step S/T  loss L  N samples/s` after the first training step and then every
    `every_s` seconds (global rank 0), so that a run without a bar shows it is training."""

    def __init__(self, every_s: float = 15.0):
        super().__init__()
        self.every_s = every_s
        self._last: float | None = None
        self._samples = 0                   # samples trained since the last line
        self._trained_s = 0.0               # seconds spent training (not validating) since the last line
        self._since: float | None = None    # start of the current stretch of training

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._since is None:
            self._since = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        ids = batch.get("input_ids") if isinstance(batch, dict) else None
        self._samples += int(ids.shape[0]) * trainer.world_size if ids is not None else 0
        now = time.perf_counter()
        if self._last is not None and now - self._last < self.every_s:
            return
        self._last = now
        if not trainer.is_global_zero:
            return
        loss = trainer.callback_metrics.get("train/loss")
        parts = [f"step {trainer.global_step}/{trainer.max_steps}"]
        if loss is not None:
            parts.append(f"loss {float(loss):.4f}")
        elapsed = self._trained_s + now - (self._since or now)
        if elapsed > 0 and self._samples:
            parts.append(f"{self._samples / elapsed:,.0f} samples/s")
        self._samples, self._trained_s, self._since = 0, 0.0, now
        print("  ".join(parts), flush=True)

    def on_validation_start(self, trainer, pl_module):
        # throughput of training only: the stretch before a validation counts, the validation not
        if self._since is not None:
            self._trained_s += time.perf_counter() - self._since
            self._since = None


@dataclass(frozen=True)
class RunProgress:
    step: int
    max_steps: int
    val_acc: float | None

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.step / self.max_steps) if self.max_steps > 0 else None

    def short(self) -> str:
        """E.g. 'step 120/5000 val 0.373' (the sweep's bar)."""
        val = f" val {self.val_acc:.3f}" if self.val_acc is not None else ""
        return f"step {self.step}/{self.max_steps}{val}"

    def long(self) -> str:
        """E.g. 'step 120/5000  val_acc 0.3725' (the sweep's heartbeat lines)."""
        val = f"  val_acc {self.val_acc:.4f}" if self.val_acc is not None else "  no validation yet"
        return f"step {self.step}/{self.max_steps}{val}"


def read_progress(log_path: Path, tail_bytes: int = 32768) -> RunProgress | None:
    """The latest step (either kind of line) and validation accuracy in the tail of a train.log;
    None before its first step."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - tail_bytes))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    step = val_acc = None
    for line in reversed(tail.splitlines()):
        match = STEP_LINE.match(line.strip())
        if not match:
            continue
        if step is None:
            step = (int(match.group(1)), int(match.group(2)))
        acc = VAL_ACC.search(line)
        if acc:
            val_acc = float(acc.group(1))
            break
    if step is None:
        return None
    return RunProgress(step[0], step[1], val_acc)
