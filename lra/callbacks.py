"""Lightning callbacks of a training run: throughput / memory / timing statistics (`TrainingStats`),
validation after the final step (`ValidateAtEnd`), the RNG state in checkpoints (`RngState`), a
resumable stop at a wall-clock deadline (`StopAt`) and `last.ckpt` at an interruption
(`SaveOnInterrupt`). The checkpoints of every validation are Lightning's (`lra.checkpoints`).

`TrainingStats` measures what a run record reports:
- training throughput in samples/s and tokens/s and the mean step time, over the training steps
  after the first `warmup_steps` of each (re)start (compilation, autotuning, cache warm-up) and
  excluding the time spent in validation; data loading is included, as it is part of a step;
- peak GPU memory (`torch.cuda.max_memory_allocated`, GiB);
- wall-clock training time, the validation-accuracy curve [{step, wall_s, val_acc}] and the time
  to the best validation accuracy, all on a clock that continues across `--resume`.
Its state is saved in checkpoints, so a resumed run reports the whole run, not the last part.
Tokens are counted as the positions the model processes (B x N, both documents for retrieval),
padding included, because that is what the compute scales with.
"""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.rank_zero import rank_zero_info

GIB = 2**30


def _sync(trainer: pl.Trainer) -> None:
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize(trainer.strategy.root_device)


class TrainingStats(pl.Callback):
    """Throughput, step time, peak memory, wall time, val-accuracy curve, time to best."""

    def __init__(self, *, warmup_steps: int = 10, monitor: str = "val/acc", verbose: bool = False):
        super().__init__()
        self.warmup_steps = warmup_steps
        self.monitor = monitor
        self.verbose = verbose
        # Persistent state (checkpointed).
        self.elapsed_before = 0.0      # wall seconds of this run before its latest (re)start
        self.train_time_s = 0.0        # measured training time (warm-up and validation excluded)
        self.measured_batches = 0
        self.measured_samples = 0
        self.measured_tokens = 0
        self.curve: list[dict] = []
        self.best_val_acc: float | None = None
        self.best_step: int | None = None
        self.time_to_best_s: float | None = None
        self.peak_mem_bytes: int | None = None
        # State of the latest (re)start.
        self._t0: float | None = None
        self._mark: float | None = None
        self._batches_this_start = 0
        self._batch_samples = 0
        self._batch_tokens = 0
        self._accumulate = 1

    # ---- clock ------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        if self._t0 is None:
            return self.elapsed_before
        return self.elapsed_before + time.perf_counter() - self._t0

    def _close_interval(self, trainer: pl.Trainer) -> None:
        if self._mark is not None:
            _sync(trainer)
            self.train_time_s += time.perf_counter() - self._mark
            self._mark = None

    # ---- hooks --------------------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module):
        self._t0 = time.perf_counter()
        self._batches_this_start = 0
        self._accumulate = max(1, int(trainer.accumulate_grad_batches))
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        ids = batch["input_ids"]
        self._batch_samples = int(ids.shape[0]) * trainer.world_size
        self._batch_tokens = int(ids.numel()) * trainer.world_size
        measuring = self._batches_this_start >= self.warmup_steps * self._accumulate
        if measuring and self._mark is None:
            _sync(trainer)
            self._mark = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._mark is not None:
            self.measured_batches += 1
            self.measured_samples += self._batch_samples
            self.measured_tokens += self._batch_tokens
        self._batches_this_start += 1

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._close_interval(trainer)

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        val_acc = float(value)
        step, wall = int(trainer.global_step), self.elapsed()
        self.curve.append({"step": step, "wall_s": round(wall, 3), "val_acc": val_acc})
        if self.best_val_acc is None or val_acc > self.best_val_acc:
            self.best_val_acc, self.best_step, self.time_to_best_s = val_acc, step, wall
        self._update_peak(trainer)
        if self.verbose:
            rank_zero_info(f"step {step}/{trainer.max_steps}  val_acc {val_acc:.4f}  "
                           f"best {self.best_val_acc:.4f} (step {self.best_step})  {wall:.1f}s")

    def on_train_end(self, trainer, pl_module):
        self._close_interval(trainer)
        self._update_peak(trainer)

    def on_exception(self, trainer, pl_module, exception):
        self._close_interval(trainer)
        self._update_peak(trainer)

    def _update_peak(self, trainer: pl.Trainer) -> None:
        if trainer.strategy.root_device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(trainer.strategy.root_device)
            self.peak_mem_bytes = max(self.peak_mem_bytes or 0, peak)

    # ---- results ------------------------------------------------------------------------------------
    def summary(self) -> dict:
        steps = self.measured_batches / self._accumulate
        return {
            "best_val_acc": self.best_val_acc,
            "best_step": self.best_step,
            "time_to_best_s": self.time_to_best_s,
            "val_acc_curve": list(self.curve),
            "wall_time_s": self.elapsed(),
            "measured_steps": steps,
            "step_time_ms": 1000.0 * self.train_time_s / steps if steps else None,
            "train_samples_per_s": self.measured_samples / self.train_time_s if self.train_time_s else None,
            "train_tokens_per_s": self.measured_tokens / self.train_time_s if self.train_time_s else None,
            "peak_mem_gb": self.peak_mem_bytes / GIB if self.peak_mem_bytes is not None else None,
        }

    # ---- checkpointing --------------------------------------------------------------------------------
    _STATE = ("train_time_s", "measured_batches", "measured_samples", "measured_tokens", "curve",
              "best_val_acc", "best_step", "time_to_best_s", "peak_mem_bytes")

    def state_dict(self) -> dict:
        state = {key: getattr(self, key) for key in self._STATE}
        state["elapsed_s"] = self.elapsed()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        for key in self._STATE:
            if key in state_dict:
                setattr(self, key, state_dict[key])
        self.elapsed_before = float(state_dict.get("elapsed_s", 0.0))
        self.curve = list(self.curve)


class Diverged(RuntimeError):
    """The training loss became NaN or infinite: the run cannot recover, and is recorded `diverged`."""


class StopOnDivergence(pl.Callback):
    """Stop a fit whose training loss is no longer finite (too high a learning rate, fp16 overflow).
    The check is kept on the device (no host sync per step) and read every `every` optimizer steps,
    before each validation and at the end, so a diverged run stops within `every` steps."""

    def __init__(self, every: int = 50):
        super().__init__()
        self.every = int(every)
        self._bad: torch.Tensor | None = None
        self._since: int | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):
            return
        bad = ~torch.isfinite(loss.detach())
        self._bad = bad if self._bad is None else self._bad | bad
        self._since = trainer.global_step if self._since is None else self._since
        if trainer.global_step - self._since >= self.every:
            self._check(trainer)

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._check(trainer)

    def on_train_end(self, trainer, pl_module):
        self._check(trainer)

    def _check(self, trainer) -> None:
        bad, self._bad, self._since = self._bad, None, None
        if bad is not None and bool(trainer.strategy.reduce_boolean_decision(bool(bad), all=False)):
            raise Diverged(f"training loss is not finite by step {trainer.global_step} (NaN or inf): the run "
                           "diverged; lower optim.lr, use bf16 instead of fp16, or clip gradients (optim.grad_clip)")


class ValidateAtEnd(pl.Callback):
    """Validate after the last step even when `max_steps` is not a multiple of the val interval.

    Setting `trainer.should_stop` on the final step is Lightning's documented early-stop signal,
    and the loop validates before it stops, so the final model is always evaluated (and can be
    the best checkpoint that the test uses).
    """

    def __init__(self, val_check_interval: int):
        super().__init__()
        self.val_check_interval = val_check_interval

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if trainer.max_steps > 0 and step >= trainer.max_steps and step % self.val_check_interval:
            trainer.should_stop = True


class RngState(pl.Callback):
    """Random-number generator state in checkpoints, so that a resumed run draws the dropout masks
    (torch's generators: `nn.Dropout` and the attention kernels' dropout seeds) of an uninterrupted
    one. Lightning restores weights, optimizer, scheduler and loader position but not the RNGs: without
    this, a resumed run re-seeded by `seed_everything` would repeat the masks of the first steps.

    Validation is made RNG-neutral (the state before it is put back after it: an evaluation loader
    draws a base seed from the global generator), so the training stream depends on training steps
    only, whatever the validations, sanity check or restart path in between. The saved state is
    applied when training starts (after the sanity check). Stored as tensors and plain lists, so
    checkpoints stay readable with `torch.load(weights_only=True)`."""

    def __init__(self):
        super().__init__()
        self._before_validation: dict | None = None
        self._restored: dict | None = None

    @staticmethod
    def capture() -> dict:
        import random

        import numpy as np

        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        return {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "numpy": [str(kind), torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos),
                          int(has_gauss), float(gauss)],
                "python": [int(version), list(internal), gauss_next]}

    @staticmethod
    def apply(state: dict) -> None:
        import random

        import numpy as np

        torch.set_rng_state(state["torch"])
        cuda = list(state.get("cuda") or [])
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        if state.get("numpy") is not None:
            kind, keys, pos, has_gauss, gauss = state["numpy"]
            np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        if state.get("python") is not None:
            version, internal, gauss_next = state["python"]
            random.setstate((version, tuple(internal), gauss_next))

    def on_validation_start(self, trainer, pl_module):
        if trainer.state.fn == TrainerFn.FITTING:
            self._before_validation = self.capture()

    def on_validation_end(self, trainer, pl_module):
        if self._before_validation is not None:
            self.apply(self._before_validation)
            self._before_validation = None

    def on_train_start(self, trainer, pl_module):
        if self._restored is not None:
            self.apply(self._restored)
            self._restored = None

    def state_dict(self) -> dict:
        # within a validation (last.ckpt is written at its end): the training stream's state
        return self._before_validation if self._before_validation is not None else self.capture()

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = dict(state_dict)


STOP_AT_ENV = "LRA_STOP_AT"


def _optimizer_stepped(callback: pl.Callback, trainer: pl.Trainer) -> bool:
    """Whether the batch that just ended stepped the optimizer (``callback._last_step`` keeps the step
    seen last). Stops happen only there: with gradient accumulation, a stop after a micro-batch that
    did not step would lose its gradients (the checkpoint holds no .grad)."""
    stepped = trainer.global_step != getattr(callback, "_last_step", None)
    callback._last_step = trainer.global_step
    return stepped


class StopAt(pl.Callback):
    """Interrupt a fit at the first optimizer-step boundary at or after `deadline` (Unix seconds), as
    Ctrl-C would: `SaveOnInterrupt` writes last.ckpt at that step, the record says "interrupted" and
    `--resume` (or the next `lra sweep`) continues. `lra train` reads the deadline from $LRA_STOP_AT,
    so that a run that must end by a fixed time (a batch job's wall-clock limit, a recipe's time
    budget) stops in time and loses nothing. Under DDP rank 0's clock decides for all ranks, every
    `DDP_EVERY` steps.

    Lightning's `max_time` lacks this: it is a training-time budget after which the run counts as
    finished (tested, completed), and it restarts with each run of a sweep rather than naming one
    wall-clock deadline for all of them."""

    def __init__(self, deadline: float):
        super().__init__()
        self.deadline = float(deadline)
        self.stopped_at_step: int | None = None  # set when the deadline stops the fit

    @classmethod
    def from_env(cls) -> "StopAt | None":
        raw = os.environ.get(STOP_AT_ENV, "").strip()
        if not raw:
            return None
        try:
            deadline = float(raw)
        except ValueError:
            raise ValueError(f"${STOP_AT_ENV} must be a time in Unix seconds (e.g. $(( $(date +%s) + 600 ))), "
                             f"got {raw!r}") from None
        return cls(deadline)

    # under DDP the decision is a collective (rank 0's clock for all): taken every this many steps
    DDP_EVERY = 20

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args) -> None:
        if not _optimizer_stepped(self, trainer):
            return
        if trainer.world_size > 1:
            if trainer.global_step % self.DDP_EVERY:
                return
            stop = bool(trainer.strategy.broadcast(time.time() >= self.deadline, src=0))
        else:
            stop = time.time() >= self.deadline
        if stop:
            self.stopped_at_step = trainer.global_step
            rank_zero_info(f"${STOP_AT_ENV} reached at step {trainer.global_step}: stopping (resume with --resume)")
            raise KeyboardInterrupt(f"${STOP_AT_ENV} reached")


class SigtermStopsAllRanks(pl.Callback):
    """Under DDP, a SIGTERM to any rank (a scheduler's preemption or time limit, `kill`, the sweep)
    stops every rank at the same optimizer step, every `StopAt.DDP_EVERY` steps, as one collective
    decision; the run then ends as on a single process (SIGTERMException: record `interrupted`,
    `--resume` continues from the last checkpoint). Single-process runs keep Lightning's own stop.

    Lightning 2.6 lacks this: its SIGTERM handler broadcasts from inside the signal handler and each
    rank then stops on its own flag, so the ranks stop at different steps and the run hangs in a
    collective or dies of a closed connection (Lightning-AI/pytorch-lightning#20806). Here its
    handler is switched off (the handler of `lra.term_signal.ending_on_sigterm`, which Lightning calls
    after its own, notes the signal) and no rank stops but by the shared decision."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.world_size > 1:  # before the fit registers its handlers, which read this attribute
            trainer._signal_connector._sigterm_notifier_fn = _note_only

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args) -> None:
        from lra.term_signal import sigterm_received

        stepped = _optimizer_stepped(self, trainer)
        if not stepped or trainer.world_size < 2 or trainer.global_step % StopAt.DDP_EVERY:
            return
        if trainer.strategy.reduce_boolean_decision(sigterm_received(), all=False):
            from pytorch_lightning.utilities.exceptions import SIGTERMException

            rank_zero_info(f"SIGTERM: every rank stops at step {trainer.global_step} (resume with --resume)")
            raise SIGTERMException()


def _note_only(signum, frame) -> None:
    """Lightning's SIGTERM notifier under DDP, switched off (see SigtermStopsAllRanks)."""


def trained_batches(trainer: pl.Trainer) -> int | None:
    """Training batches of the current epoch trained on (forward, backward, optimizer) by now; None
    where Lightning's progress counters are not available. A batch whose `on_train_batch_end` ran
    counts, although Lightning marks it completed only after every callback's hook returned."""
    try:
        current = trainer.fit_loop.epoch_loop.batch_progress.current
        ready, started, processed, completed = (int(current.ready), int(current.started),
                                                int(current.processed), int(current.completed))
    except (AttributeError, TypeError, ValueError):
        return None
    if ready == started == processed == completed + 1:  # stopped in or after on_train_batch_end
        return processed
    return completed


class SaveOnInterrupt(pl.Callback):
    """On an exception during training (Ctrl-C, a crash, $LRA_STOP_AT), save `last.ckpt` at the
    current step so `--resume` repeats no finished step.

    Lightning's `OnExceptionCheckpoint` is not enough: it saves between the micro-batches of an
    accumulated step too (whose gradients no checkpoint holds), counts a batch fetched but not
    trained as consumed in the loader's saved position, and deletes its file when a fit ends.
    Here a batch fetched but interrupted before it was trained on stays in the loader's position
    (the position saved before it was fetched), so the resumed run trains on it; between two
    optimizer steps nothing is saved (last.ckpt of the last validation remains). Single-process runs
    only: under DDP the other ranks may not reach the save's barrier."""

    def __init__(self, path):
        super().__init__()
        self.path = Path(path)
        self._before_fetch: tuple[int, dict] | None = None  # (batches trained, loader position then)
        self._resumed_state: dict | None = None             # the loader position a resumed fit starts at
        self._loader_state: dict | None = None              # put into the checkpoint being written
        self._trained: int | None = None                    # batches of the epoch trained, for that checkpoint

    @staticmethod
    def _loader(trainer: pl.Trainer):
        loader = getattr(trainer, "train_dataloader", None)
        return loader if hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict") else None

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        states = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {}).get("combined_loader")
        self._resumed_state = copy.deepcopy(states[0]) if states and len(states) == 1 else None

    def on_train_start(self, trainer, pl_module):
        # a resumed fit: the position it resumed from (the restored loader reports it only once iterated)
        done = trained_batches(trainer)
        resumed, self._resumed_state = self._resumed_state, None
        self._before_fetch = (done, resumed) if resumed is not None and done is not None else None

    def on_train_epoch_start(self, trainer, pl_module):
        # the position after the previous epoch's last batch resumes with this epoch whole
        # (tasks.resumable_loader.EpochSampler); before the first epoch: the empty state, no position
        self._before_fetch = (0, self._before_fetch[1] if self._before_fetch is not None else {})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loader = self._loader(trainer)
        if loader is not None and trainer.world_size == 1:
            self._before_fetch = (batch_idx + 1, copy.deepcopy(loader.state_dict()))

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, Diverged):  # a diverged model is no state to continue from
            return
        if trainer.world_size != 1 or not trainer.training or trainer.sanity_checking:
            return
        if trainer.global_step <= 0:
            return
        done = trained_batches(trainer)
        if done is not None:
            accumulate = max(1, int(trainer.accumulate_grad_batches))
            if done % accumulate and done < trainer.num_training_batches:
                rank_zero_info(f"interrupted between two optimizer steps (micro-batch {done % accumulate} of "
                               f"{accumulate}): last.ckpt stays at the last validation")
                return
            if self._before_fetch is not None and self._before_fetch[0] == done:
                self._loader_state = self._before_fetch[1]
        self._trained = done
        try:
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: resuming needs it
        except Exception as err:  # noqa: BLE001 - never hide the original exception
            rank_zero_info(f"could not save an interrupt checkpoint: {err}")
        finally:
            self._loader_state = self._trained = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
        if self._trained is not None:
            _forget_untrained_batch(fit_loop.get("epoch_loop.batch_progress"), self._trained)
        if self._loader_state is None:
            return
        fit_state = fit_loop.get("state_dict", {})
        if len(fit_state.get("combined_loader") or []) == 1:
            fit_state["combined_loader"] = [self._loader_state]


def _forget_untrained_batch(progress: dict | None, trained: int) -> None:
    """A batch fetched but not trained on leaves the saved batch counters, the total ones too.

    Lightning's restore (`_BatchProgress.reset_on_restart`) takes such a batch back from the counters
    of the current epoch only; the total count, which places the validations (`val_check_interval`),
    would stay one ahead, and every later validation would come one step early (step 39, 49, ...)."""
    if not isinstance(progress, dict):
        return
    current = progress.get("current") or {}
    untrained = int(current.get("ready", trained)) - int(trained)
    if untrained <= 0:
        return
    for scope in ("current", "total"):
        counts = progress.get(scope)
        if isinstance(counts, dict) and "ready" in counts:
            counts["ready"] -= untrained
            for key in ("started", "processed"):
                if key in counts:
                    counts[key] = min(counts[key], counts["ready"])
