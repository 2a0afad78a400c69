"""The cost of a transfer chain in GPU-hours, from measured training-step times (`lra transfer
--estimate-cost`), and the short `lra train` run that measures a stage's step time."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lra.records import RECORD_NAME
from lra.transfer_chain import PlannedStage, existing_record

@dataclass
class StageCost:
    """Inputs of one stage's cost: GPU-hours = devices x (steps x ms/step + evals x val_batches x ms/val) / 3.6e6."""

    stage: str
    task: str
    attention: str
    batch_size: int
    devices: int
    steps_per_epoch: int
    epochs: float
    evals: int                      # validations over the whole stage
    val_batches: int | None         # batches per validation (None: unknown)
    step_ms: float | None           # measured training step (forward + backward + optimizer)
    val_ms: float | None = None     # measured validation batch; None: estimated from step_ms (below)
    step_source: str = ""
    accumulate: int = 1             # micro-batches per optimizer step (a validation batch is one of them)

    @property
    def steps(self) -> int:
        return max(1, round(self.epochs * self.steps_per_epoch))

    def hours(self) -> dict:
        if self.step_ms is None:
            return {"train_h": None, "val_h": None, "gpu_h": None}
        train_h = self.steps * self.step_ms / 3.6e6
        val_ms = self.val_ms if self.val_ms is not None else self.step_ms / self.accumulate / 3.0
        val_h = self.evals * (self.val_batches or 0) * val_ms / 3.6e6
        return {"train_h": train_h, "val_h": val_h, "gpu_h": self.devices * (train_h + val_h)}


def estimate_cost(stages: Iterable[StageCost]):
    """GPU-hours per stage and in total (a pandas DataFrame; the last row is the total).

    Training: steps = steps_per_epoch x epochs, each taking the measured `step_ms` (the `step_time_ms`
    of a run record: a training step after warm-up, validation excluded). Validation: `evals`
    passes of `val_batches` batches; a validation batch is a forward pass only over one micro-batch,
    so without a measurement it is taken as step_ms / accumulate / 3 (forward ~ 1/3 of forward +
    backward; an optimizer step of `accumulate` micro-batches costs `accumulate` of them). Wall hours times
    the number of GPUs gives GPU-hours. A stage without a measured step time shows no hours.
    """
    import pandas as pd

    rows = []
    for s in stages:
        hours = s.hours()
        rows.append({"stage": s.stage, "task": s.task, "attention": s.attention, "batch": s.batch_size,
                     "GPUs": s.devices, "steps/epoch": s.steps_per_epoch, "epochs": s.epochs, "steps": s.steps,
                     "ms/step": s.step_ms, "step time from": s.step_source or "-",
                     "evals": s.evals, "val batches": s.val_batches, **hours})
    df = pd.DataFrame(rows)
    if not df.empty:
        known = df["gpu_h"].notna()
        total = {c: None for c in df.columns}
        total.update(stage="total", steps=int(df["steps"].sum()),
                     train_h=df.loc[known, "train_h"].sum() if known.any() else None,
                     val_h=df.loc[known, "val_h"].sum() if known.any() else None,
                     gpu_h=df.loc[known, "gpu_h"].sum() if known.all() else None)
        df = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    return df


def measured_step_ms(stage: PlannedStage, roots: Iterable[Path]) -> tuple[float | None, str]:
    """The step time of the stage's own record, else of the newest record with the same task,
    attention, batch size, model width/depth and precision under `roots`."""
    own = existing_record(stage.record_path)
    if own and own.get("step_time_ms"):
        return float(own["step_time_ms"]), str(stage.record_path)
    c = stage.config
    best = None
    for root in roots:
        for path in sorted(Path(root).glob(f"{c.task}/{c.attention}/*/{RECORD_NAME}")):
            record = existing_record(path)
            if not record or not record.get("step_time_ms"):
                continue
            rc = record.get("config") or {}
            model, train_cfg = rc.get("model") or {}, rc.get("train") or {}
            if (record.get("batch_size") != c.train.batch_size or model.get("dim") != c.model.dim
                    or model.get("depth") != c.model.depth or record.get("attention_options") != c.attention_options
                    or train_cfg.get("accumulate_grad_batches", 1) != c.train.accumulate_grad_batches):
                continue
            if best is None or str(record.get("created", "")) > str(best[1].get("created", "")):
                best = (path, record)
    if best is None:
        return None, ""
    return float(best[1]["step_time_ms"]), str(best[0])


def measure_command(stage: PlannedStage, steps: int = 60) -> str:
    """An `lra train` command that measures the stage's step time (a short run; see result.json)."""
    c = stage.config
    options = " ".join(f"attention.{k}={v}" for k, v in sorted(c.attention_options.items()) if v is not None)
    data = f"--data-dir {shlex.quote(str(c.data.data_dir))} " if c.data.data_dir else ""
    return (f"lra train --task {c.task} --attention {c.attention} --preset {stage.spec.base_preset} "
            f"--runs-dir runs-measure {data}train.batch_size={c.train.batch_size} "
            f"train.accumulate_grad_batches={c.train.accumulate_grad_batches} train.max_steps={steps} "
            f"train.val_check_interval={steps} train.limit_val_batches=2 optim.warmup_steps=10 "
            f"data.limit_train={steps * c.train.batch_size * c.train.accumulate_grad_batches} "
            f"data.limit_eval={2 * c.train.batch_size} {options}").strip()


def print_table(df, *, file=None) -> None:
    print(df.to_markdown(index=False, floatfmt=".3g"), file=file)
