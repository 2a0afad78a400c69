"""Evaluate a saved checkpoint of an `lra train` run on its task's test or validation split.

A run writes its test accuracy only when it completes (on its best-validation checkpoint). A run
stopped early — a long Path-X fine-tune spread over several allocations, a sweep cut short — or a checkpoint
worth a second look (its last one, another attention with the same weights, more evaluation
examples) is evaluated here without touching the run: the run folder's `config.yaml` rebuilds the
model and data exactly as trained, the checkpoint's weights are loaded, and Lightning's
`Trainer.test` / `Trainer.validate` runs the split.

    lra eval runs/pathx/flash/<run-id>                       # its best checkpoint, test split
    lra eval <run>/checkpoints/last.ckpt --split val
    lra eval <run> --attention sdpa                          # the same weights with another exact attention

`--attention` swaps only among the exact dense attentions (`flash`, `sdpa`, `softmax` compute the
same function with the same weights): e.g. a `flash` run evaluated with `sdpa` on a machine without
a GPU. Any other change (an approximation, a sparsity pattern) would evaluate a different model.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from lra.checkpoints import run_checkpoint
from lra.config import RunConfig

SPLITS = ("test", "val")
# attentions that compute the same function with the same weights (dense, exact softmax attention)
INTERCHANGEABLE = ("flash", "sdpa", "softmax")


def locate(target: str | Path, which: str = "best") -> tuple[Path, Path]:
    """(run folder, checkpoint) for a run folder (its `which` checkpoint: best or last) or for a
    checkpoint file inside a run's `checkpoints/`."""
    path = Path(target)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run folder or checkpoint")
    if path.is_dir():
        _config_file(path)
        return path, run_checkpoint(path, which)
    if path.suffix != ".ckpt":
        raise ValueError(f"{path}: give a run folder (with config.yaml) or a .ckpt file in its checkpoints/")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    _config_file(run_dir, checkpoint=path)
    return run_dir, path


def _config_file(run_dir: Path, checkpoint: Path | None = None) -> Path:
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        record = _record(run_dir)
        never = _never_trained(record)
        if never:
            raise FileNotFoundError(f"{run_dir}: this run never trained, so there is nothing to evaluate; {never}")
        copied = _record_only(record)
        if copied:
            raise FileNotFoundError(f"{run_dir} holds a run's record (result.json) without the run's files, as the "
                                    f"committed results do: {copied}; evaluating it again needs the run folder "
                                    "where it trained (config.yaml and checkpoints/)")
        what = f"checkpoint {checkpoint} is not" if checkpoint else f"{run_dir} is not"
        raise FileNotFoundError(f"{what} inside a run folder of `lra train` ({config_file} is missing: "
                                "it holds the model and data settings the evaluation rebuilds)")
    return config_file


def _record(run_dir: Path) -> dict | None:
    """The run record in ``run_dir`` (result.json), or None when there is none or it is unreadable."""
    from lra.records import RECORD_NAME, read_record

    try:
        return read_record(run_dir / RECORD_NAME)
    except (OSError, ValueError):
        return None


def _never_trained(record: dict | None) -> str | None:
    """What the record of a run that ended before training says (e.g. a sweep cell whose data was
    missing: a `failed` record and nothing else), or None."""
    if record is None or record.get("status") in (None, "completed") or record.get("steps"):
        return None
    return f"its record says {record.get('status')}: {record.get('error') or 'no reason given'}"


def _record_only(record: dict | None) -> str | None:
    """What the record of a run that trained says of its result (status, step, test accuracy), for a
    folder that holds the record but not the run's files; or None without a record."""
    if record is None:
        return None
    steps, test = record.get("steps"), record.get("test_acc")
    said = [f"{record.get('status', 'no status')} after {steps:,} steps" if isinstance(steps, int) else
            str(record.get("status", "no status"))]
    if isinstance(test, (int, float)):
        said.append(f"test accuracy {100 * test:.2f} %")
    return "its record says " + ", ".join(said)


def run_config(run_dir: Path) -> RunConfig:
    """The run's RunConfig, from its config.yaml (`locate` checked that it is there)."""
    config_file = run_dir / "config.yaml"
    try:
        saved = yaml.safe_load(config_file.read_text())
        return RunConfig.from_dict(saved["config"])
    except (yaml.YAMLError, KeyError, TypeError) as err:
        raise ValueError(f"{config_file}: not a config written by `lra train` ({type(err).__name__}: {err})") from None


def load_weights(module: torch.nn.Module, checkpoint: Path) -> int:
    """The checkpoint's model weights into `module` (the LightningModule); returns the checkpoint's
    global step. Missing or unexpected tensors are one ValueError naming them."""
    from lra.checkpoints import load_checkpoint

    raw = load_checkpoint(checkpoint)
    if not isinstance(raw, dict) or "state_dict" not in raw:
        raise ValueError(f"{checkpoint} is not a Lightning checkpoint of `lra train` (no state_dict)")
    missing, unexpected = module.load_state_dict(raw["state_dict"], strict=False)
    if missing or unexpected:
        parts = [f"missing {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}" if missing else "",
                 f"unexpected {', '.join(unexpected[:6])}{' ...' if len(unexpected) > 6 else ''}" if unexpected else ""]
        raise ValueError(f"{checkpoint} does not fit the model of its run's config.yaml "
                         f"({'; '.join(p for p in parts if p)})")
    return int(raw.get("global_step", -1))


@dataclass
class Evaluation:
    """One evaluation, resolved and checked before anything is loaded (`plan_evaluation`)."""

    run_dir: Path
    checkpoint: Path
    config: RunConfig            # the run's config.yaml with the evaluation's changes (its data sizes kept)
    split: str
    trained_attention: str
    overrides: dict              # the changes asked for: attention, data_dir, limit, batch_size
    limit: int | None = None     # evaluate the first `limit` examples of the split

    @property
    def examples_limit(self) -> int | None:
        """How many examples of the split at most: `limit`, within the run's own `data.limit_eval`."""
        limits = [n for n in (self.limit, self.config.data.limit_eval) if n is not None]
        return min(limits) if limits else None


def plan_evaluation(target: str | Path, *, which: str = "best", split: str = "test", attention: str | None = None,
                    data_dir: str | None = None, limit: int | None = None, batch_size: int | None = None,
                    devices: str | None = None, compile: bool | None = None) -> Evaluation:
    """The checkpoint and the config an evaluation uses; ValueError / FileNotFoundError for bad input."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: use one of {', '.join(SPLITS)}")
    if which not in ("best", "last"):
        raise ValueError(f"checkpoint {which!r}: use best or last")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit {limit}: give a positive number of examples")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"--batch-size {batch_size}: give a positive number")
    run_dir, checkpoint = locate(target, which)
    config = run_config(run_dir)
    trained_attention = config.attention
    if attention and attention != config.attention:
        if attention not in INTERCHANGEABLE or config.attention not in INTERCHANGEABLE:
            raise ValueError(f"--attention {attention}: the run trained {config.attention!r}; only the exact dense "
                             f"attentions ({', '.join(INTERCHANGEABLE)}) can stand in for each other")
        config.attention = attention
        config.attention_options = {}
    if data_dir is not None:
        config.data.data_dir = data_dir
    if batch_size is not None:
        config.train.batch_size = batch_size
    if compile is not None:
        config.train.compile = compile
    config.train.devices = devices or "1"
    config.train.init_from = None
    overrides = {k: v for k, v in {"attention": attention, "data_dir": data_dir, "limit": limit,
                                   "batch_size": batch_size}.items() if v is not None}
    # `limit` takes the first examples of the run's own split; it does not go into data.limit_eval,
    # which also sizes generated data: a smaller generated ListOps set is another data set, whose test
    # rows are the run's validation rows
    return Evaluation(run_dir, checkpoint, config, split, trained_attention, overrides, limit)


def evaluate(target: str | Path, *, which: str = "best", split: str = "test", attention: str | None = None,
             data_dir: str | None = None, limit: int | None = None, batch_size: int | None = None,
             devices: str | None = None, compile: bool | None = None, progress_bar: bool | None = None) -> dict:
    """Evaluate one checkpoint; returns a dict: run, checkpoint, step, split, examples, accuracy, loss,
    task, attention (the one evaluated), trained_attention, seq_len, precision, device, versions,
    git_rev, date, config_overrides, data (source, id and description of the data read, and
    run_data_id, the id of the data in the run's record)."""
    planned = plan_evaluation(target, which=which, split=split, attention=attention, data_dir=data_dir, limit=limit,
                              batch_size=batch_size, devices=devices, compile=compile)
    return run_evaluation(planned, progress_bar=progress_bar)


def run_evaluation(planned: Evaluation, *, progress_bar: bool | None = None) -> dict:
    """Load the data, the model and the checkpoint's weights of `planned` and evaluate (`evaluate`)."""
    from lra import provenance
    from lra.train import _progress_bar_wanted, _quiet_known_noise, prepare, resolve_runtime
    from tasks.base import data_summary

    _quiet_known_noise()
    config, split = planned.config, planned.split
    runtime = resolve_runtime(config)
    dm, module, spec = prepare(config, runtime)
    if planned.limit is not None:
        dm.limit_evaluation(planned.limit)
    step = load_weights(module, planned.checkpoint)

    import pytorch_lightning as pl

    trainer = pl.Trainer(accelerator="gpu" if runtime.cuda else "cpu", devices=runtime.devices,
                         num_nodes=config.train.num_nodes, strategy=config.train.strategy or "auto",
                         precision=runtime.precision, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, enable_progress_bar=_progress_bar_wanted(progress_bar))
    run = trainer.test if split == "test" else trainer.validate
    results = run(module, datamodule=dm, verbose=False)   # the weights are loaded: no ckpt_path
    metrics = results[0] if results else {}
    loaders = trainer.test_dataloaders if split == "test" else trainer.val_dataloaders
    loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
    examples = len(loader.dataset)
    summary = data_summary(dm.source)  # which data, without hashing it (the run's record has its hash)
    data = {key: summary[key] for key in ("source", "id", "description")}
    trained_on = ((_record(planned.run_dir) or {}).get("data") or {}).get("id")
    data["run_data_id"] = trained_on  # the data the run trained and was tested on (None: not recorded)
    return {
        "run": str(planned.run_dir), "checkpoint": str(planned.checkpoint), "step": step, "split": split,
        "examples": examples, "accuracy": float(metrics[f"{split}/acc"]), "loss": float(metrics[f"{split}/loss"]),
        "task": config.task, "attention": config.attention, "trained_attention": planned.trained_attention,
        "seq_len": config.data.seq_len, "precision": runtime.precision, "device": provenance.device_name(),
        "versions": provenance.versions(), "git_rev": provenance.git_revision(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config_overrides": planned.overrides, "data": data,
    }
