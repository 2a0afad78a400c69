"""`lra train`'s bar: optimizer steps of the run, loss, val_acc, samples/s; warnings above it."""
from __future__ import annotations

import io
import warnings

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from lra.progress_bar import StepProgressBar


class _Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        if self.global_step == 3:
            warnings.warn("a warning raised while training", UserWarning)
        loss = torch.nn.functional.cross_entropy(self.layer(batch["input_ids"]), batch["label"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/acc", 0.5, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    data = [{"input_ids": torch.randn(4), "label": torch.tensor(i % 2)} for i in range(64)]
    return DataLoader(data, batch_size=8)


def test_the_bar_counts_steps_of_the_run_and_shows_loss_val_acc_and_throughput(tmp_path, capsys):
    out = io.StringIO()
    bar = StepProgressBar(console_kwargs={"file": out, "force_terminal": True, "width": 200})
    shown = {}

    class Spy(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 10:
                shown["metrics"] = bar.get_metrics(trainer, trainer.lightning_module)
                task = bar.progress.tasks[bar.train_progress_bar_id]
                shown["bar"] = (task.description, task.completed, task.total)

    trainer = pl.Trainer(max_steps=12, max_epochs=-1, val_check_interval=4, check_val_every_n_epoch=None,
                         callbacks=[bar, Spy()], logger=pl.loggers.CSVLogger(tmp_path), accelerator="cpu",
                         enable_model_summary=False, default_root_dir=tmp_path, num_sanity_val_steps=0)
    before = warnings.showwarning
    trainer.fit(_Tiny(), train_dataloaders=_loader(), val_dataloaders=_loader())
    description, completed, total = shown["bar"]
    assert description.strip() == "step" and (completed, total) == (10, 12)    # not "Epoch 1/-2", 2/8
    metrics = shown["metrics"]
    assert set(metrics) == {"loss", "val_acc", "samples/s"} and metrics["val_acc"] == 0.5
    assert metrics["samples/s"] > 0                                             # no v_num
    text = out.getvalue()
    assert "step" in text and "Epoch" not in text and "v_num" not in text
    # the warning was printed by the bar's console (above the bar), not written into it on stderr
    assert "a warning raised while training" in text
    assert "a warning raised while training" not in capsys.readouterr().err
    assert warnings.showwarning is before                                      # capture is undone
