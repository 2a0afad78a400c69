"""The training loader: torchdata's `StatefulDataLoader`, which an interrupted run resumes mid-epoch
with exactly the batches it would have seen.

Lightning saves the `state_dict()` of a training loader that has one in the fit loop's checkpoint
entry and hands it back (`load_state_dict`) before a resumed fit iterates it. The order is a
`DistributedSampler`'s: a function of (seed, epoch) only — a new permutation each epoch, this
rank's disjoint shard of it; Lightning sets its epoch at every epoch start and, it being a
`DistributedSampler`, neither replaces nor wraps it under DDP. The loader's state holds the
sampler's (epoch, indices handed out); resuming skips the consumed indices in the sampler, so no
skipped example is loaded.
"""
from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler


class EpochSampler(StatefulDistributedSampler):
    """torchdata's resumable `DistributedSampler` with the epoch in its state, which torchdata's
    lacks: a resumed loader with worker processes draws its first indices when Lightning iterates it,
    before Lightning sets the epoch, so the restored position must bring its epoch. A state saved
    after an epoch's last index resumes with the next epoch, whole (torchdata's would skip it)."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "epoch": int(self.epoch)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        try:
            epoch = int(state_dict["epoch"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"not an EpochSampler state (needs an integer 'epoch'): {state_dict!r}") from None
        if self.next_yielded >= self.num_samples:
            epoch, self.next_yielded = epoch + 1, 0
        self.set_epoch(epoch)


def train_loader(dataset: Dataset, *, seed: int, batch_size: int, num_replicas: int = 1, rank: int = 0,
                 **kwargs) -> StatefulDataLoader:
    """A resumable loader over this rank's shard of a (seed, epoch)-determined permutation of `dataset`.
    `kwargs` go to the DataLoader (num_workers, pin_memory, ...); drop_last is not supported (the
    resumed position is counted in whole batches of the sampler's order)."""
    if kwargs.get("drop_last"):
        raise ValueError("train_loader does not support drop_last=True (a resumed position is counted in "
                         "whole batches of the sampler's order)")
    sampler = EpochSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
    return StatefulDataLoader(dataset, sampler=sampler, batch_size=batch_size, **kwargs)
