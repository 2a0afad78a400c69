"""The training loader: torchdata's `StatefulDataLoader`, which an interrupted run resumes mid-epoch
with exactly the batches it would have seen.

Lightning saves the `state_dict()` of a training loader that has one in the fit loop's checkpoint
entry and hands it back (`load_state_dict`) before a resumed fit iterates it. The order is a
`DistributedSampler`'s: a function of (seed, epoch) only — a new permutation each epoch, this
rank's disjoint shard of it; Lightning sets its epoch at every epoch start and, it being a
`DistributedSampler`, neither replaces nor wraps it under DDP. Resuming skips the consumed indices
in the sampler, so no skipped example is loaded.
"""
from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler


class EpochSampler(StatefulDistributedSampler):
    """torchdata's resumable `DistributedSampler`, except that a state saved after an epoch's last
    index resumes with a whole pass (torchdata's would skip the whole next epoch, which Lightning
    then starts)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if self.next_yielded >= self.num_samples:
            self.next_yielded = 0


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
