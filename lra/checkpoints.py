"""The checkpoints of a run folder (`<run>/checkpoints/`): `best-step<N>.ckpt`, the best by
validation accuracy, and `last.ckpt`, the one a run resumes from; how they are written and found."""
from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
import torch

CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"


def save_checkpoint_atomically(trainer: pl.Trainer, path: Path) -> None:
    """`trainer.save_checkpoint` to a temporary file renamed over `path`: a process killed while
    writing leaves the previous checkpoint intact. Collective under DDP, like save_checkpoint."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if trainer.is_global_zero:
        path.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_checkpoint(tmp)
    if trainer.is_global_zero:
        os.replace(tmp, path)


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
            raw = torch.load(last, map_location="cpu", weights_only=True)
            for key, value in (raw.get("callbacks") or {}).items():
                if key.startswith("ModelCheckpoint") and value.get("best_model_path"):
                    chosen = ckpt_dir / Path(value["best_model_path"]).name
                    if chosen.is_file():
                        return chosen
        raise ValueError(f"{ckpt_dir} holds several best checkpoints ({', '.join(p.name for p in best)}) and "
                         f"last.ckpt does not say which one is best; keep only one")
    raise FileNotFoundError(f"no best-*.ckpt in {ckpt_dir}: the run in {run_dir} never validated")
