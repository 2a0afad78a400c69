"""The LightningModule of an LRA run: model, loss, accuracy metrics, AdamW + per-step schedule.

The checkpoint's hyper-parameters are the resolved run config (`config`, a dict of `RunConfig`)
and the data spec (`data_spec`: vocab size, classes, length, dual, image shape), so
`LraModule.load_from_checkpoint(path)` rebuilds the exact model without the data.
"""
from __future__ import annotations

import math

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from kernels import enable_inductor_static_launch
from lra.config import RunConfig
from lra.model import DataSpec, Encoder, build_model, count_parameters


def lr_factor(step: int, *, warmup_steps: int, total_steps: int, schedule: str,
              min_lr_ratio: float = 0.0) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based).

    Linear warm-up from lr/warmup_steps to lr over `warmup_steps` steps, then `linear` or `cosine`
    decay to `min_lr_ratio * lr` at `total_steps` (or `constant`).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    if schedule == "linear":
        shape = 1.0 - progress
    elif schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown lr schedule {schedule!r}; use linear, cosine or constant "
                         "(onecycle is torch's OneCycleLR, see `one_cycle`)")
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def one_cycle(optimizer: torch.optim.Optimizer, *, lr: float, warmup_steps: int,
              total_steps: int) -> torch.optim.lr_scheduler.OneCycleLR:
    """The scheduler of the Nystromformer LRA code (`LRA/code/run_tasks.py`), which FlashAttention's
    LRA runs follow: torch's OneCycleLR with pct_start = warmup / num_train_steps, a linear anneal
    and torch's defaults (spelled out here so that a change of default cannot move them).

    lr: lr/25 at step 0, `lr` at step warmup_steps - 1, lr/25/1e4 at step total_steps - 1 (0-based
    optimizer steps, linear in between); beta1 (AdamW) 0.95 -> 0.85 -> 0.95 over the same phases.
    """
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=total_steps, pct_start=warmup_steps / total_steps,
        anneal_strategy="linear", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
        div_factor=25.0, final_div_factor=1e4, three_phase=False)


def split_weight_decay(model: nn.Module) -> tuple[list, list]:
    """Weight matrices of Linear layers decay; biases, norms, embeddings and positions do not.

    The pixel embedding `model.pixel_embedding=linear` is an `nn.Linear(1, dim)` but an embedding
    (the vector a pixel intensity scales), so it does not decay either."""
    embeddings = {id(m.embed.weight) for m in model.modules() if isinstance(m, Encoder)}
    decay_ids = {id(m.weight) for m in model.modules()
                 if isinstance(m, nn.Linear) and id(m.weight) not in embeddings}
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if id(p) in decay_ids else no_decay).append(p)
    return decay, no_decay


class LraModule(pl.LightningModule):
    def __init__(self, config: dict, data_spec: dict, compile_model: bool = False,
                 attention_factory=None):
        super().__init__()
        self.save_hyperparameters(ignore=["compile_model", "attention_factory"])
        self.run_config = RunConfig.from_dict(config)
        self.spec = DataSpec.from_dict(data_spec)
        self.compile_model = compile_model
        cfg = self.run_config
        self.model = build_model(cfg.model, self.spec, attention=cfg.attention,
                                 attention_options=cfg.attention_options, seed=cfg.seed,
                                 attention_factory=attention_factory)
        n = self.spec.num_classes
        self.val_acc = MulticlassAccuracy(num_classes=n, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes=n, average="micro")

    @property
    def num_params(self) -> int:
        return count_parameters(self.model)

    def configure_model(self) -> None:
        # nn.Module.compile compiles the call in place: parameter names (and checkpoints) stay as
        # they are, unlike a wrapping `torch.compile(model)`.
        if self.compile_model and not getattr(self.model, "_compiled_call_impl", None):
            enable_inductor_static_launch()  # Inductor's static launcher for our Triton kernels too
            self.model.compile(mode=self.run_config.train.compile_mode)

    def forward(self, input_ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(input_ids, padding_mask)

    def _loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(batch["input_ids"], batch.get("padding_mask"))
        return logits, F.cross_entropy(logits.float(), batch["label"])

    def training_step(self, batch, batch_idx):
        logits, loss = self._loss(batch)
        labels = batch["label"]
        # this batch's accuracy as a plain tensor: logging a torchmetrics object costs its forward and
        # Lightning's per-call move of the metric, over a millisecond of host time per step
        if self._logs_this_step():
            accuracy = (logits.detach().argmax(dim=-1) == labels).float().mean()
            self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=labels.shape[0])
            self.log("train/acc", accuracy, on_step=True, on_epoch=False, batch_size=labels.shape[0])
        return loss

    def _logs_this_step(self) -> bool:
        """The first, every `log_every_n_steps`-th and the last step, those whose metrics the loggers
        write: each `self.log` costs host time (Lightning's result bookkeeping and device moves) that a
        host-bound GPU step pays in full, also on the steps whose values no logger keeps."""
        trainer = self._trainer  # Lightning's own rule (`_LoggerConnector.should_update_logs`) is private
        if trainer is None:
            return True
        step = self.global_step
        every = max(1, trainer.log_every_n_steps)
        return step == 0 or (step + 1) % every == 0 or 0 < trainer.max_steps <= step + 1

    def _evaluation_step(self, batch: dict, metric: MulticlassAccuracy, stage: str) -> None:
        """Loss and accuracy accumulated over the split, logged at its end (synchronised under DDP)."""
        logits, loss = self._loss(batch)
        labels = batch["label"]
        metric.update(logits.detach(), labels)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=labels.shape[0],
                 sync_dist=True)
        self.log(f"{stage}/acc", metric, on_step=False, on_epoch=True, prog_bar=True, batch_size=labels.shape[0])

    def validation_step(self, batch, batch_idx):
        self._evaluation_step(batch, self.val_acc, "val")

    def test_step(self, batch, batch_idx):
        self._evaluation_step(batch, self.test_acc, "test")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if not gradient_clip_val:
            return
        if getattr(self.trainer.precision_plugin, "scaler", None) is None:
            # No loss scaling (fp32, bf16-mixed): gradients are final here, so clipping is correct
            # for any optimizer, the fused AdamW included (Lightning's own check refuses fused
            # optimizers under every mixed precision, bf16 included).
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)
        else:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        o = self.run_config.optim
        if o.weight_decay > 0:
            decay, no_decay = split_weight_decay(self.model)
            groups = [{"params": decay, "weight_decay": o.weight_decay},
                      {"params": no_decay, "weight_decay": 0.0}]
        else:
            groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "weight_decay": 0.0}]
        trainer = self._trainer  # None when called outside a Trainer (the `trainer` property raises)
        on_cuda = trainer is not None and trainer.strategy.root_device.type == "cuda"
        # A fused AdamW unscales fp16 gradients inside its step, too late for clipping: with a
        # loss scaler (16-mixed) and clipping it stays off unless asked for.
        scaled = getattr(trainer.precision_plugin, "scaler", None) is not None if trainer is not None else False
        fused = (on_cuda and not (scaled and o.grad_clip > 0)) if o.fused is None else bool(o.fused)
        optimizer = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                                      fused=fused or None)
        total = self.run_config.train.max_steps
        if o.schedule == "onecycle":
            scheduler = one_cycle(optimizer, lr=o.lr, warmup_steps=o.warmup_steps, total_steps=total)
            # OneCycleLR raises when stepped past total_steps; Lightning steps it once per optimizer
            # step, and the Trainer stops at its max_steps (train.max_steps, see lra.train).
            if trainer is not None and not 0 < trainer.max_steps <= total:
                raise ValueError(f"optim.schedule=onecycle spans {total} steps but the Trainer may run "
                                 f"{trainer.max_steps} (-1: unlimited)")
        else:
            def factor(step: int) -> float:
                return lr_factor(step, warmup_steps=o.warmup_steps, total_steps=total,
                                 schedule=o.schedule, min_lr_ratio=o.min_lr_ratio)

            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}
