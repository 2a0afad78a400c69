"""One training run: config -> DataModule + model -> Lightning Trainer -> test on the best
checkpoint -> `runs/<task>/<attention>/<run-id>/result.json`.

The run folder holds `config.yaml` (the resolved config and data spec), `logs/` (CSV, and
TensorBoard when installed), `checkpoints/` (`best-*.ckpt` by validation accuracy, its weights, and
`last.ckpt`, the full training state, written at every validation, on an interruption and at the
end) and `result.json`, written atomically: `running` when training starts, then `completed`,
`interrupted` (Ctrl-C, SIGTERM, the deadline below: resumable), `diverged` (the loss stopped being
finite), `failed` (with the error text) or `oom` (out of GPU or host memory). `--resume` continues
from `last.ckpt` to the same final step count. $LRA_STOP_AT (Unix seconds) stops a run at that time
as Ctrl-C does (last.ckpt at the current step, record `interrupted`, resumable): machines with a
time limit stop runs that way.

The config, the attention's limits (`lra.attention.kernel_limit_problem`), a checkpoint to start from
and the data (`lra.data_check`: sources prepared, released files parsed) are checked before the run
folder exists: bad input ends the run with nothing written.

Only global rank 0 touches the run folder; under DDP the other ranks just train. Rank 0 holds the
folder's lock (`lra.run_lock`) for the whole run: a second trainer of the same run stops at once,
naming the process that holds it.
"""
from __future__ import annotations

import datetime as _dt
import functools
import inspect
import logging
import math
import os
import shutil
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from lra import provenance
from lra.checkpoint_transfer import InitialWeights, check_compatible, read_checkpoint
from lra.callbacks import (STOP_AT_ENV, Diverged, RngState, SaveOnInterrupt, SigtermStopsAllRanks, StopAt,
                           StopOnDivergence, TrainingStats, ValidateAtEnd)
from lra.checkpoints import CHECKPOINT_DIR, LAST, AtomicCheckpointIO, checkpoint_callback
from lra.config import RunConfig, parse_devices
from lra.data_check import check_data
from lra.model import DataSpec
from lra.module import LraModule
from lra.progress_bar import StepProgressBar
from lra.run_progress import StepLines
from lra.records import write_record
from lra.run_lock import RunLock
from lra.term_signal import ending_on_sigterm
from tasks.base import data_record, identity_id

MONITOR = "val/acc"
ERROR_LOG = "error.log"  # the traceback of a run that failed, beside its record


class _DropAdverts(logging.Filter):
    """Lightning prints product tips at every Trainer start; they are not about the run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("\N{ELECTRIC LIGHT BULB} Tip:")


def _quiet_known_noise() -> None:
    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_DropAdverts())
    # Lightning 2.6 with torch >= 2.13 (its own pytree call; nothing to act on).
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # torchdata's StatefulDataLoader calls torch.set_vital, which torch deprecates (nothing to act on).
    warnings.filterwarnings("ignore", message=r"'set_vital' is deprecated")
    # Expected when --resume continues a run in its own checkpoint folder.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


class RunFailed(RuntimeError):
    """A run started but did not complete; its record (status failed/oom) has been written."""

    def __init__(self, status: str, error: str, record_path: Path, tb: str = ""):
        super().__init__(f"run {status}: {error}")
        self.status, self.error, self.record_path, self.traceback = status, error, record_path, tb


# Lightning opens checkpoints as data only too (`lra.checkpoints.load_checkpoint` says why).
_OWN_CHECKPOINT = ({"weights_only": True}
                   if "weights_only" in inspect.signature(pl.Trainer.test).parameters else {})


def is_global_zero() -> bool:
    return rank_zero_only.rank == 0


# ---- runtime choices ------------------------------------------------------------------------------
@dataclass
class Runtime:
    """What `auto` resolves to on this machine."""

    cuda: bool
    precision: str
    compile: bool
    num_workers: int
    devices: object


def resolve_runtime(config: RunConfig) -> Runtime:
    t = config.train
    cuda = torch.cuda.is_available()
    if t.precision == "auto":
        precision = ("bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed") if cuda else "32-true"
    else:
        precision = t.precision
    compile_model = cuda if t.compile is None else bool(t.compile)
    num_workers = (4 if cuda else 0) if config.data.num_workers is None else config.data.num_workers
    return Runtime(cuda=cuda, precision=precision, compile=compile_model, num_workers=num_workers,
                   devices=parse_devices(t.devices))


# The dtype of the activations (and so of an attention's q, k, v) under each Lightning precision;
# the others are taken as float32.
PRECISION_DTYPES = {"64-true": torch.float64, "64": torch.float64, "16-true": torch.float16,
                    "16-mixed": torch.float16, "16": torch.float16, "bf16-true": torch.bfloat16,
                    "bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16}


def attention_dtype(precision: str) -> torch.dtype:
    return PRECISION_DTYPES.get(precision, torch.float32)


# ---- building -------------------------------------------------------------------------------------
def build_datamodule(config: RunConfig, runtime: Runtime):
    import tasks

    if config.task not in tasks.TASKS:
        raise ValueError(f"unknown task {config.task!r}; available: {', '.join(sorted(tasks.TASKS))}")
    d = config.data
    return tasks.build_datamodule(config.task, data_dir=d.data_dir, batch_size=config.train.batch_size,
                                  seq_len=d.seq_len, num_workers=runtime.num_workers, seed=config.seed,
                                  limit_train=d.limit_train, limit_eval=d.limit_eval, source=d.source,
                                  difficulty=d.difficulty, augment=d.augment)


def check_attention(config: RunConfig, attn_len: int) -> None:
    from lra import attention

    names = attention.available()
    if config.attention not in names:
        raise ValueError(f"unknown attention {config.attention!r}; available: {', '.join(sorted(names))}")
    options = {**config.attention_options, "num_heads": config.model.num_heads,
               "head_dim": config.model.head_dim, "max_len": attn_len}
    where = (f"the model attends over {attn_len} tokens (task {config.task}, seq_len "
             f"{config.data.seq_len}{', + CLS' if config.model.pooling == 'cls' else ''})")
    limit = attention.max_supported_len(config.attention, options)
    if limit is not None and attn_len > limit:
        raise ValueError(f"attention {config.attention!r} supports at most {limit} tokens with "
                         f"{config.attention_options}, but {where}")
    low = attention.min_supported_len(config.attention, dict(config.attention_options))
    if low is not None and attn_len < low:
        raise ValueError(f"attention {config.attention!r} needs at least {low} tokens with "
                         f"{config.attention_options}, but {where}; use a longer --seq-len or "
                         f"smaller blocks (e.g. attention.block_size=...)")


def validate_run(config: RunConfig, runtime: Runtime):
    """Check the config against the task and the attention; returns (datamodule, data spec).

    Fills in `config.data.seq_len` from the task when the preset left it open. Raises ValueError
    for any combination that cannot run. Nothing is written and no data is read.
    """
    if not runtime.cuda and (isinstance(runtime.devices, list) or runtime.devices == -1):
        raise ValueError(f"train.devices={config.train.devices}: GPU indices and -1 (all GPUs) need CUDA, which "
                         "this machine lacks; on the CPU give a number of processes (e.g. --devices 2) or auto")
    dm = build_datamodule(config, runtime)
    spec = DataSpec.from_datamodule(dm)
    if config.data.seq_len is None:
        config.data.seq_len = spec.max_len
    check_attention(config, spec.max_len + (1 if config.model.pooling == "cls" else 0))
    from lra import attention

    limit = attention.kernel_limit_problem(
        config.attention, {**config.attention_options, "head_dim": config.model.head_dim,
                           "num_heads": config.model.num_heads},
        attention_dtype(runtime.precision), batch_size=config.train.batch_size,
        sequences_per_example=2 if spec.dual else 1)
    if limit is not None:
        raise ValueError(f"attention {config.attention!r}: {limit}")
    # an attention that cannot run here with these settings (a back-end, the kernels' interpreter): before the run
    ok, why = attention.can_run(config.attention, "cuda" if runtime.cuda else "cpu",
                                {**config.attention_options, "dropout": config.model.attention_dropout})
    if not ok:
        raise ValueError(f"attention {config.attention!r} cannot run here: {why}")
    return dm, spec


def prepare(config: RunConfig, runtime: Runtime | None = None, *, attention_factory=None):
    """`validate_run`, then the LightningModule: returns (datamodule, module, data spec)."""
    runtime = runtime or resolve_runtime(config)
    if attention_factory is None:
        dm, spec = validate_run(config, runtime)
    else:  # a test double stands in for the registry
        dm = build_datamodule(config, runtime)
        spec = DataSpec.from_datamodule(dm)
        config.data.seq_len = config.data.seq_len or spec.max_len
    module = LraModule(config.to_dict(), spec.to_dict(), compile_model=runtime.compile,
                       attention_factory=attention_factory)
    return dm, module, spec


def _progress_bar_wanted(progress_bar: bool | None) -> bool:
    if progress_bar is not None:
        return progress_bar
    return sys.stdout.isatty() and sys.stderr.isatty() and "PYTEST_CURRENT_TEST" not in os.environ


def build_trainer(config: RunConfig, runtime: Runtime, run_dir: Path, *, progress_bar: bool,
                  callbacks=()) -> tuple[pl.Trainer, TrainingStats, ModelCheckpoint]:
    t, o = config.train, config.optim
    ckpt_dir = run_dir / CHECKPOINT_DIR
    stats = TrainingStats(warmup_steps=t.throughput_warmup_steps, monitor=MONITOR, verbose=not progress_bar)
    best = checkpoint_callback(ckpt_dir, MONITOR)
    cbs = [StopOnDivergence(), stats, best, ValidateAtEnd(t.val_check_interval), SaveOnInterrupt(ckpt_dir / LAST),
           RngState(), SigtermStopsAllRanks(),
           LearningRateMonitor(logging_interval="step"), *callbacks]
    cbs.append(StepProgressBar() if progress_bar else StepLines())
    loggers = [CSVLogger(save_dir=run_dir, name="logs")]
    try:
        from pytorch_lightning.loggers import TensorBoardLogger
        from pytorch_lightning.loggers.tensorboard import _TENSORBOARD_AVAILABLE

        if _TENSORBOARD_AVAILABLE:
            loggers.append(TensorBoardLogger(save_dir=run_dir, name="tensorboard"))
    except ImportError:  # pragma: no cover - depends on the Lightning build
        pass
    devices = runtime.devices
    if devices == "auto" and not runtime.cuda:
        devices = 1
    trainer = pl.Trainer(
        accelerator="auto", devices=devices, num_nodes=t.num_nodes, strategy=t.strategy,
        precision=runtime.precision, max_steps=t.max_steps, max_epochs=-1,
        max_time=_dt.timedelta(minutes=t.max_minutes) if t.max_minutes is not None else None,
        val_check_interval=t.val_check_interval, check_val_every_n_epoch=None,
        limit_val_batches=t.limit_val_batches,
        accumulate_grad_batches=t.accumulate_grad_batches,
        gradient_clip_val=o.grad_clip if o.grad_clip > 0 else None,
        deterministic=t.deterministic, callbacks=cbs, logger=loggers, plugins=[AtomicCheckpointIO()],
        enable_progress_bar=progress_bar, enable_model_summary=progress_bar,
        log_every_n_steps=max(1, min(50, t.val_check_interval)), default_root_dir=run_dir,
    )
    return trainer, stats, best


# ---- records ------------------------------------------------------------------------------------
def _record(config: RunConfig, *, status: str, error: str | None, created: str, runtime: Runtime,
            module: LraModule | None, summary: dict | None, trainer: pl.Trainer | None,
            test_acc: float | None, data: dict | None = None, runs_per_gpu: int = 1) -> dict:
    summary = summary or {}
    if data is None:  # a run that never read its data: what it would have read
        identity = config.resolve_data_identity()
        data = {"source": (identity or {}).get("source", config.data.source),
                "id": identity_id(identity) if identity else "unresolved",
                "description": None, "generator": (identity or {}).get("generator"),
                "identity": identity, "splits": {}, "content_hash": None}
    steps = int(trainer.global_step) if trainer is not None else 0
    epochs = None
    if trainer is not None:
        per_epoch = trainer.num_training_batches
        if isinstance(per_epoch, (int, float)) and per_epoch and math.isfinite(per_epoch):
            epochs = round(steps * config.train.accumulate_grad_batches / per_epoch, 4)
    world = int(trainer.world_size) if trainer is not None else None
    return {
        "run_id": config.run_id(),
        "task": config.task,
        "attention": config.attention,
        "attention_options": dict(config.attention_options),
        "seq_len": config.data.seq_len,
        "seed": config.seed,
        "preset": config.preset,
        "status": status,
        "error": error,
        "best_val_acc": summary.get("best_val_acc"),
        "test_acc": test_acc,
        "val_acc_curve": summary.get("val_acc_curve", []),
        "steps": steps,
        "epochs": epochs,
        "wall_time_s": summary.get("wall_time_s"),
        "time_to_best_s": summary.get("time_to_best_s"),
        "step_time_ms": summary.get("step_time_ms"),
        "train_samples_per_s": summary.get("train_samples_per_s"),
        "train_tokens_per_s": summary.get("train_tokens_per_s"),
        "peak_mem_gb": summary.get("peak_mem_gb"),
        # the step time and throughput above were measured with this many runs sharing the GPU
        "sharing": {"runs_per_gpu": int(runs_per_gpu)},
        "data": data,
        "num_params": module.num_params if module is not None else None,
        "batch_size": config.train.batch_size,
        "device": provenance.device_name(),
        "devices": world,
        "precision": runtime.precision,
        "compile": runtime.compile,
        "versions": provenance.versions(),
        "git_rev": provenance.git_revision(),
        "kernel_env": provenance.kernel_env(),
        "created": created,
        "config": config.to_dict(),
    }


def write_status_record(config: RunConfig, status: str, error: str | None) -> Path:
    """A record for a run that never trained (e.g. an impossible combination in a sweep)."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    path = config.record_path()
    return write_record(path, _record(config, status=status, error=error, created=now,
                                      runtime=resolve_runtime(config), module=None, summary=None,
                                      trainer=None, test_acc=None))


def _read_existing(path: Path) -> dict | None:
    try:
        from lra.records import read_record

        return read_record(path)
    except (OSError, ValueError):
        return None


def _was_interrupted(err: BaseException) -> bool:
    """Ctrl-C (SIGINT), SIGTERM (what SLURM sends at a time limit or on preemption; Lightning raises
    SIGTERMException), $LRA_STOP_AT or an exit: the run stopped, it did not fail, and resumes."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    return isinstance(err, (KeyboardInterrupt, SIGTERMException)) or (
        isinstance(err, SystemExit) and err.code not in (0, None))


def _error_text(err: BaseException) -> str:
    if _was_interrupted(err):
        return f"interrupted ({type(err).__name__}{': ' + str(err) if str(err) else ''})"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, (torch.cuda.OutOfMemoryError, MemoryError)):  # GPU or host memory
        return True
    return isinstance(err, RuntimeError) and "CUDA out of memory" in str(err)


# ---- the run --------------------------------------------------------------------------------------
def train(config: RunConfig, *, resume: bool = False, force: bool = False, callbacks=(),
          progress_bar: bool | None = None, attention_factory=None, runs_per_gpu: int = 1) -> dict:
    """Run one training and return its record. Bad input (config values, the attention's limits, a
    checkpoint to start from, missing or corrupt data: `lra.data_check`): ValueError or
    FileNotFoundError before the run folder exists.
    A run that starts and then fails: its record is written and `RunFailed` raised.
    `runs_per_gpu`: how many runs share this GPU (`lra sweep --runs-per-gpu`), recorded beside the
    measured throughput so that speed tables use solo runs only."""
    if isinstance(runs_per_gpu, bool) or not isinstance(runs_per_gpu, int) or runs_per_gpu < 1:
        raise ValueError(f"runs_per_gpu must be an integer >= 1, got {runs_per_gpu!r}")
    _quiet_known_noise()
    # $LRA_STOP_AT: a resumable stop at a wall-clock deadline (Lightning's max_time would end the run
    # as completed)
    stop_at = StopAt.from_env()
    if stop_at is not None:
        callbacks = (*callbacks, stop_at)
    runtime = resolve_runtime(config)
    pl.seed_everything(config.seed, workers=True, verbose=False)
    dm, module, spec = prepare(config, runtime, attention_factory=attention_factory)
    init_from = config.train.init_from
    if init_from and (Path(init_from).exists() or not resume):  # a resumed run may start without it
        check_compatible(read_checkpoint(init_from), config.model, spec)
    locked = functools.partial(_train_locked, config, runtime, dm, module, spec, resume=resume, force=force,
                               callbacks=callbacks, progress_bar=progress_bar, runs_per_gpu=runs_per_gpu)
    with ending_on_sigterm():
        if not is_global_zero():
            return locked()
        check_data(dm)  # missing or corrupt data: a clear error before the run folder exists
        # the run folder's lock before anything in it is read or written: one trainer per run folder
        lock = RunLock(config.run_dir()).acquire()
        try:
            return locked()
        except BaseException:
            lock.discard()  # a run refused under the lock leaves no folder it created behind
            raise
        finally:
            lock.release()


def _train_locked(config: RunConfig, runtime: Runtime, dm, module: LraModule, spec: DataSpec, *, resume: bool,
                  force: bool, callbacks, progress_bar: bool | None, runs_per_gpu: int) -> dict:
    run_dir = config.run_dir()
    last = run_dir / CHECKPOINT_DIR / LAST
    record_path = config.record_path()
    rank0 = is_global_zero()
    existing = _read_existing(record_path) if record_path.exists() else None

    if rank0 and existing is not None and existing.get("status") == "completed" and not force:
        if resume:
            print(f"run already completed: {record_path}")
            return existing
        raise ValueError(f"run already completed: {record_path}; pass --force to train it again")
    if rank0 and last.exists() and not resume and not force:
        raise ValueError(f"an interrupted run exists in {run_dir}; pass --resume to continue it "
                         f"or --force to start it over")
    resume_from = str(last) if resume and last.exists() else None
    if resume_from is not None:
        from lra.checkpoints import load_checkpoint, training_loader_states
        from tasks.resumable_loader import resume_problem

        checkpoint = load_checkpoint(resume_from)  # an unsafe or unreadable file: a clear error before anything runs
        for state in training_loader_states(checkpoint):
            problem = resume_problem(state, runtime.num_workers)
            if problem:
                raise ValueError(f"{problem} ({resume_from})")
        del checkpoint
    if config.train.init_from:
        # `train` has checked the initial checkpoint against the model; its weights are loaded when a
        # fresh fit starts. A resumed run restores its own weights from last.ckpt, so the initial
        # checkpoint may be absent then (a run tree carried to another machine without it); the path
        # stays in the config, and so in the run id.
        if not Path(config.train.init_from).exists():  # only with --resume
            if resume_from is None:
                raise ValueError(
                    f"--init-from {config.train.init_from}: no such file, and no interrupted run to resume in "
                    f"{run_dir}. The --init-from path is part of the run id: to resume a run started from "
                    "another path, pass that path exactly as before (the file itself is not read on a resume)")
            if rank0:
                print(f"resuming from {last}: the initial checkpoint {config.train.init_from} is not needed "
                      "(and not here)", flush=True)
        callbacks = (*callbacks, InitialWeights(config.train.init_from))
    if rank0:
        if force and not resume_from:
            for sub in (CHECKPOINT_DIR, "logs", "tensorboard"):
                shutil.rmtree(run_dir / sub, ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        # the traceback of an earlier attempt's failure would sit beside this attempt's record
        (run_dir / ERROR_LOG).unlink(missing_ok=True)
        (run_dir / "config.yaml").write_text(
            yaml.safe_dump({"config": config.to_dict(), "data_spec": spec.to_dict()}, sort_keys=False))
    created = (existing or {}).get("created") if resume_from else None
    created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

    trainer = stats = summary = None
    show_bar = _progress_bar_wanted(progress_bar)

    data_hash: list = []  # the data's content hash, computed once (the data is prepared by now)

    def data_section() -> dict | None:
        try:
            if not data_hash:
                data_hash.append(dm.source.content_hash())
            return data_record(dm.source, dm.split_sizes, data_hash[0])
        except (OSError, ValueError):
            return None

    def record(status, error=None, test_acc=None) -> dict:
        rec = _record(config, status=status, error=error, created=created, runtime=runtime, module=module,
                      summary=summary or (stats.summary() if stats is not None else None),
                      trainer=trainer, test_acc=test_acc, data=data_section() if rank0 else None,
                      runs_per_gpu=runs_per_gpu)
        if rank0:
            write_record(record_path, rec)
        return rec

    try:
        trainer, stats, best = build_trainer(config, runtime, run_dir, progress_bar=show_bar,
                                             callbacks=callbacks)
        record("running")
        if rank0 and not show_bar:
            print(f"training {config.task}/{config.attention} {config.run_id()} on "
                  f"{provenance.device_name()} ({runtime.precision}"
                  f"{', compiled' if runtime.compile else ''}) -> {run_dir}", flush=True)
        trainer.fit(module, datamodule=dm, ckpt_path=resume_from, **_OWN_CHECKPOINT)
        # Testing restores the best checkpoint's weights: take the summary of the fit first.
        summary = stats.summary()
        trainer.save_checkpoint(last, weights_only=False)  # the final state (a stop may follow the last validation)
        best_path = best.best_model_path or None
        results = trainer.test(module, datamodule=dm, ckpt_path=best_path, verbose=False, **_OWN_CHECKPOINT)
        test_acc = float(results[0]["test/acc"]) if results and "test/acc" in results[0] else None
        return record("completed", test_acc=test_acc)
    except BaseException as err:  # noqa: BLE001 - every failure is recorded, then re-raised
        status = ("oom" if _is_oom(err) else "diverged" if isinstance(err, Diverged)
                  else "interrupted" if _was_interrupted(err) else "failed")
        text = _error_text(err)
        deadline = next((c for c in callbacks if isinstance(c, StopAt) and c.stopped_at_step is not None), None)
        if deadline is not None:  # Lightning turns the stop into SystemExit(1); say what stopped the run
            text = f"interrupted (${STOP_AT_ENV} deadline reached at step {deadline.stopped_at_step})"
        tb = traceback.format_exc()
        if rank0:
            try:
                record(status, text)
                if status != "interrupted":  # a stop (deadline, signal, Ctrl-C) is no error to debug
                    (run_dir / ERROR_LOG).write_text(tb)
            except OSError as again:  # e.g. the disk that failed the run: the record may still say running
                print(f"lra: could not record the run's end in {record_path} ({_error_text(again)}); "
                      f"`lra train --resume` or the next sweep continues it from {last}", file=sys.stderr)
        if isinstance(err, KeyboardInterrupt):
            raise
        # Ctrl-C and $LRA_STOP_AT (Lightning ends both with SystemExit(1) after its graceful shutdown) and
        # SIGTERM end the command as Ctrl-C does (exit 130, "run it again to continue"): resumable
        if status == "interrupted":
            raise KeyboardInterrupt(text) from err
        if isinstance(err, SystemExit):
            raise
        # a file-system error is its one line (path and cause); its traceback stays in error.log
        raise RunFailed(status, text, record_path, "" if isinstance(err, OSError) else tb) from err
