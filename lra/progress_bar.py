"""The progress bar of `lra train`: Lightning's rich bar counting optimizer steps of the whole run.

What Lightning's `RichProgressBar` lacks for step-based runs: it counts the batches of the current
epoch under `Epoch 0/-2` (max_epochs=-1) and shows the logger's `v_num`. `StepProgressBar` keeps its
columns, bars and refresh logic and changes only what they show:

    step ━━━━━━━━━━━━━━━━  1200/5000 0:03:12 • 0:09:45 6.3it/s loss: 1.71 val_acc: 0.372 samples/s: 201

i.e. the optimizer step out of `max_steps` (right after a resume too), the latest training loss
and validation accuracy, and the training throughput over the last batches.

Python warnings raised while the bar is live go through `logging.captureWarnings` to the bar's
console, which prints them above the bar instead of into it.
"""
from __future__ import annotations

import collections
import logging
import time
import warnings

from pytorch_lightning.callbacks import RichProgressBar

SHOWN = {"train/loss": "loss", "val/acc": "val_acc"}   # logged metric -> label in the bar
THROUGHPUT_WINDOW = 20                                  # batches the samples/s is measured over


class _ToConsole(logging.Handler):
    """Prints captured warnings through a rich console (above a live bar)."""

    def __init__(self, bar: "StepProgressBar"):
        super().__init__(logging.WARNING)
        self.bar = bar

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().rstrip()
        console = self.bar.progress.console if self.bar.progress is not None else None
        if console is None:
            import sys
            print(text, file=sys.stderr, flush=True)
        else:
            console.print(text, markup=False, highlight=False, style="yellow")


class StepProgressBar(RichProgressBar):
    """`RichProgressBar` over the run's optimizer steps, with loss, val_acc and samples/s."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._batches: collections.deque = collections.deque(maxlen=THROUGHPUT_WINDOW)
        self._handler: _ToConsole | None = None
        self._saved: tuple | None = None

    # ---- what the bar counts ------------------------------------------------------------------------
    @property
    def total_train_batches(self):
        max_steps = self.trainer.max_steps
        return max_steps if max_steps and max_steps > 0 else super().total_train_batches

    def _get_train_description(self, current_epoch: int) -> str:
        return "step"

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._update(self.train_progress_bar_id, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._batches.append((time.perf_counter(), _samples(batch) * trainer.world_size))
        if not self.is_disabled and self.train_progress_bar_id is None:
            self._initialize_train_progress_bar_id()
        self._update(self.train_progress_bar_id, trainer.global_step)
        self._update_metrics(trainer, pl_module)
        self.refresh()

    # ---- what it shows next to the bar ----------------------------------------------------------------
    def get_metrics(self, trainer, pl_module) -> dict:
        items = super().get_metrics(trainer, pl_module)
        shown = {label: items[name] for name, label in SHOWN.items() if name in items}
        rate = self.samples_per_second()
        if rate is not None:
            shown["samples/s"] = round(rate)
        return shown

    def samples_per_second(self) -> float | None:
        """Samples over the time between the first and the last of the recent batches."""
        if len(self._batches) < 2:
            return None
        (t_first, _), (t_last, _) = self._batches[0], self._batches[-1]
        samples = sum(n for _, n in list(self._batches)[1:])
        return samples / (t_last - t_first) if t_last > t_first else None

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        self._batches.clear()           # validation time is not training throughput

    # ---- warnings above the bar -----------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.is_enabled and self._handler is None:
            logger = logging.getLogger("py.warnings")
            self._saved = (warnings.showwarning, logger.propagate)
            logging.captureWarnings(True)
            self._handler = _ToConsole(self)
            logger.addHandler(self._handler)
            logger.propagate = False

    def teardown(self, trainer, pl_module, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        if self._handler is not None:
            logger = logging.getLogger("py.warnings")
            logger.removeHandler(self._handler)
            showwarning, logger.propagate = self._saved
            logging.captureWarnings(False)
            warnings.showwarning = showwarning
            self._handler = None


def _samples(batch) -> int:
    """Sequences in a batch (`input_ids` of an LRA batch, else the first dimension)."""
    if isinstance(batch, dict) and "input_ids" in batch:
        return int(batch["input_ids"].shape[0])
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 0
