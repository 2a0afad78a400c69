"""The checkpoints of a run folder (`<run>/checkpoints/`): `best-step<N>.ckpt`, the best by
validation accuracy, and `last.ckpt`, the one a run resumes from; how they are kept and found.

Lightning writes both (`ModelCheckpoint` with `save_last`; `RunCheckpoint` says what it adds): at
every validation of a fit, last.ckpt after the best one, so its callback state names the best file;
each through `AtomicCheckpointIO`: a temporary file in the checkpoint's own folder moved over the
target, so a process killed (or a disk filled) while writing leaves the previous file intact.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
BEST_PATTERN = "best-step{step}"


class UnsafeCheckpoint(ValueError):
    """A checkpoint that holds more than tensors and plain data (a pickled object that would run
    code when loaded), or that cannot be read at all."""


def load_checkpoint(path: str | Path) -> dict:
    """`path` read as data only (`torch.load(weights_only=True)`): the one way this project opens a
    checkpoint. Run trees travel between machines and users; nothing in one may run code here. A
    file holding pickled objects beyond tensors and plain containers is refused, naming the object."""
    import pickle

    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        detail = str(err).strip().splitlines()
        unsafe = next((line for line in detail if "GLOBAL" in line or "global" in line), None)
        if unsafe is None:  # a damaged file, not a foreign object
            why = next((line for line in detail if "Unsupported" in line), detail[0] if detail else "")
            raise UnsafeCheckpoint(f"{path} is not a readable checkpoint (UnpicklingError: {why.strip()})") from None
        raise UnsafeCheckpoint(f"refusing to load {path}: it holds objects other than tensors and plain data, "
                               f"which could run code when loaded ({unsafe.strip()}). `lra train` never writes "
                               "such a file: it was made or altered elsewhere") from None
    except Exception as err:  # noqa: BLE001 - zip / truncation / I/O errors all mean "not readable"
        first = (str(err).strip().splitlines() or [""])[0]
        raise UnsafeCheckpoint(f"{path} is not a readable checkpoint ({type(err).__name__}: {first})") from None


def rebase_checkpoint_state(state: dict, old_dir: str, new_dir: str) -> dict:
    """A ModelCheckpoint state dict with the files directly under `old_dir` named under `new_dir`
    (best_k_models' keys and the best / kth / last paths) and dirpath `new_dir`; other paths unchanged."""
    old_dir = os.path.normpath(old_dir)

    def move(path):
        if isinstance(path, str) and path and os.path.dirname(os.path.normpath(path)) == old_dir:
            return os.path.join(new_dir, os.path.basename(path))
        return path

    state = dict(state, dirpath=new_dir)
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        if key in state:
            state[key] = move(state[key])
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {move(path): score for path, score in state["best_k_models"].items()}
    return state


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O, each file written to a temporary file in its own folder, synced and
    moved over the target with `os.replace`. Lightning's own transaction lacks this: it stages the
    file in the system temp folder and moves it from there, a copy (not atomic) when that folder is on
    another file system."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint with three things it lacks:

    - the best checkpoint holds the weights only (Lightning's `save_weights_only` applies to last.ckpt
      too, which resuming needs whole): testing, `lra eval` and `--init-from` read nothing else, and
      without the optimizer's moments and the callbacks' states it is a third of last.ckpt's size,
      which is what a run tree carried to another machine mostly consists of;
    - last.ckpt at every validation: Lightning's `save_last` refreshes it only when a new top-k
      checkpoint is saved, so a run killed without a graceful stop (SIGKILL, a lost machine) would
      resume from its best step instead of its last validation;
    - a run tree that was moved (copied to another machine or folder) keeps its best-k state:
      Lightning restores it only when the saved (absolute) dirpath is this one, else the first
      validation after a resume becomes "best" whatever its accuracy and the old best file stays
      beside the new one. Paths inside the saved dirpath are moved to this one."""

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_skip_saving_checkpoint(trainer):  # nothing was saved at this step
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        self.save_weights_only = Path(filepath).name != LAST  # read by Lightning's _save_checkpoint
        super()._save_checkpoint(trainer, filepath)

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and saved != self.dirpath:
            state_dict = rebase_checkpoint_state(state_dict, saved, self.dirpath)
        super().load_state_dict(state_dict)


def checkpoint_callback(ckpt_dir: Path, monitor: str) -> ModelCheckpoint:
    """The best checkpoint by `monitor` (higher is better) and last.ckpt, both at every validation."""
    return RunCheckpoint(dirpath=ckpt_dir, filename=BEST_PATTERN, monitor=monitor, mode="max", save_top_k=1,
                         save_last=True, auto_insert_metric_name=False, enable_version_counter=False)


def training_loader_states(checkpoint: dict) -> list:
    """The training loaders' states a Lightning checkpoint holds for a resumed fit (the fit loop's
    `combined_loader` entry: one per stateful loader; [] when there is none)."""
    loop = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}
    states = loop.get("combined_loader") or []
    return list(states) if isinstance(states, (list, tuple)) else []


def best_model_path(checkpoint: dict) -> str | None:
    """The best checkpoint a Lightning checkpoint's ModelCheckpoint state names (None: none)."""
    for value in (checkpoint.get("callbacks") or {}).values():
        if isinstance(value, dict) and value.get("best_model_path"):
            return str(value["best_model_path"])
    return None


def run_checkpoint(run_dir: Path, which: str) -> Path:
    """The `last` checkpoint or the `best` (validation accuracy) checkpoint of a run folder."""
    ckpt_dir = Path(run_dir) / CHECKPOINT_DIR
    if which == "last":
        path = ckpt_dir / LAST
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the run in {run_dir} left no last checkpoint")
        return path
    best = sorted(ckpt_dir.glob("best-*.ckpt"))
    if len(best) == 1:
        return best[0]
    if len(best) > 1:  # e.g. a file copied in beside the run's own: last.ckpt says which one is best
        last = ckpt_dir / LAST
        if last.is_file():
            named = best_model_path(load_checkpoint(last))
            if named and (ckpt_dir / Path(named).name).is_file():
                return ckpt_dir / Path(named).name
        raise ValueError(f"{ckpt_dir} holds several best checkpoints ({', '.join(p.name for p in best)}) and "
                         f"last.ckpt does not say which one is best; keep only one")
    raise FileNotFoundError(f"no best-*.ckpt in {ckpt_dir}: the run in {run_dir} never validated")
