"""The training loader: torchdata's `StatefulDataLoader`, which an interrupted run resumes mid-epoch
with exactly the batches it would have seen.

Lightning saves the `state_dict()` of a training loader that has one in the fit loop's checkpoint
entry and hands it back (`load_state_dict`) before a resumed fit iterates it. The order is a
`DistributedSampler`'s: a function of (seed, epoch) only — a new permutation each epoch, this
rank's disjoint shard of it; Lightning sets its epoch at every epoch start and, it being a
`DistributedSampler`, neither replaces nor wraps it under DDP. The loader's state holds the
sampler's (epoch, indices handed out); resuming skips the consumed indices in the sampler, so no
skipped example is loaded.

torchdata's state fits only the worker layout that wrote it (a state of 4 worker processes does not
load into a loader without workers), so `ResumableLoader` adds its position in a form that does not
depend on the workers: a run moved to a machine with another `data.num_workers` resumes from it,
with the same examples in the same order.
"""
from __future__ import annotations

import sys
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


class ResumableLoader(StatefulDataLoader):
    """`StatefulDataLoader` whose state also holds its position independently of the worker processes
    (`POSITION`: epoch, batches handed out in it, batch size, workers). A state of the same worker
    layout resumes through torchdata's own state; one of another layout resumes from the position, by
    the sampler alone (worker random streams start afresh). A state of another layout without the
    position is a clear error naming the `data.num_workers` that wrote it."""

    POSITION = "lra_position"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._batches: int | None = 0    # batches handed out in the current pass (None: not known)
        self._resume_at: int | None = 0  # where the next pass starts (a restored position)

    def __iter__(self):
        iterator = super().__iter__()
        self._batches, self._resume_at = self._resume_at, 0
        return _Counting(iterator, self)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self._batches is None:  # resumed from a state that did not say where it was: no position to give
            return state
        return {**state, self.POSITION: {"epoch": int(self.sampler.epoch), "batches": self._batches,
                                         "batch_size": self.batch_size, "workers": self.num_workers}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        problem = resume_problem(state_dict, self.num_workers)
        if problem:
            raise ValueError(problem)
        state = dict(state_dict)
        position = state.pop(self.POSITION, None)
        if position is None:
            super().load_state_dict(state)
            done = _native_batches(state)
            # a state saved after an epoch's last batch resumes with the next epoch, whole
            self._resume_at = None if done is None else 0 if done * self.batch_size >= self.sampler.num_samples else done
            return
        consumed = int(position["batches"]) * int(position["batch_size"])
        self._resume_at = 0 if consumed >= self.sampler.num_samples else int(position["batches"])
        if int(position["workers"]) == self.num_workers:
            super().load_state_dict(state)
            return
        self.sampler.load_state_dict({"yielded": consumed, "epoch": int(position["epoch"])})
        print(f"resuming the training data at epoch {position['epoch']}, batch {position['batches']} from its "
              f"position (written with {position['workers']} loader worker(s), read with {self.num_workers}): "
              "the same examples in the same order", file=sys.stderr, flush=True)


class _Counting:
    """The loader's iterator, counting the batches it hands out (the position `ResumableLoader` saves)."""

    def __init__(self, iterator, loader: ResumableLoader):
        self._iterator, self._loader = iterator, loader

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._iterator)
        if self._loader._batches is not None:
            self._loader._batches += 1
        return batch

    def __len__(self) -> int:
        return len(self._iterator)


def resume_problem(state: dict[str, Any], num_workers: int) -> str:
    """Why a loader with `num_workers` worker processes cannot resume from a training-loader state
    (`ResumableLoader.state_dict`, as a checkpoint holds it), or "" when it can: a state of another
    worker layout needs the position, which states of torchdata's loader alone lack."""
    if not isinstance(state, dict) or ResumableLoader.POSITION in state:
        return ""
    saved = _native_workers(state)
    if saved is None or saved == num_workers:
        return ""
    return (f"the checkpoint's training-loader state was written by a loader with {saved} worker process(es) "
            f"and this run's has {num_workers}: resume with data.num_workers={saved}")


def _native_batches(state: dict[str, Any]) -> int | None:
    """The batches of the current pass that torchdata's own state says were handed out (its flat or
    snapshot layout), None if it does not say."""
    try:
        snapshot = state.get("_snapshot")
        if isinstance(snapshot, dict):
            return int(snapshot["_main_snapshot"]["_sampler_iter_yielded"]) + int(state.get("_steps_since_snapshot", 0))
        return int(state["_sampler_iter_yielded"])
    except (KeyError, TypeError, ValueError):
        return None


def _native_workers(state: dict[str, Any]) -> int | None:
    """The worker processes of the loader that wrote torchdata's own state (its layout: a snapshot of
    the main process and of each worker, or a flat state without workers); None if unknown."""
    snapshot = state.get("_snapshot")
    if isinstance(snapshot, dict):
        main = snapshot.get("_main_snapshot")
        return int(main["_num_workers"]) if isinstance(main, dict) and "_num_workers" in main else None
    return 0 if "_sampler_iter_state" in state else None


def train_loader(dataset: Dataset, *, seed: int, batch_size: int, num_replicas: int = 1, rank: int = 0,
                 **kwargs) -> ResumableLoader:
    """A resumable loader over this rank's shard of a (seed, epoch)-determined permutation of `dataset`.
    `kwargs` go to the DataLoader (num_workers, pin_memory, ...); drop_last is not supported (the
    resumed position is counted in whole batches of the sampler's order)."""
    if kwargs.get("drop_last"):
        raise ValueError("train_loader does not support drop_last=True (a resumed position is counted in "
                         "whole batches of the sampler's order)")
    sampler = EpochSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
    return ResumableLoader(dataset, sampler=sampler, batch_size=batch_size, **kwargs)
