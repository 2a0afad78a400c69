"""A training DataLoader that an interrupted run resumes mid-epoch with exactly the batches it would
have seen.

Lightning 2.x saves the state of every training dataloader that has `state_dict()` /
`load_state_dict()` (its `_Stateful` protocol) in the fit loop's checkpoint entry and hands it back
before the first `iter()` of a resumed fit. The pieces:

* `EpochPermutationSampler`: a `DistributedSampler` whose order is a function of (seed, epoch)
  only — a new permutation each epoch, this rank's disjoint shard of it — and which can skip the
  first n indices of its next pass (skipping costs nothing: no example is loaded). Being a
  `DistributedSampler`, Lightning neither replaces nor wraps it under DDP, and calls its
  `set_epoch` at every epoch start.
* `ResumableDataLoader`: counts the batches it hands out in the current epoch; its state is
  {"epoch", "batches_done"}, and after `load_state_dict` its next pass over that epoch starts at
  batch `batches_done`. The count is exact because Lightning does not prefetch from a loader whose
  length is known (each batch handed out is a batch trained on).
"""
from __future__ import annotations

from typing import Any, Iterator

from torch.utils.data import DataLoader, Dataset, DistributedSampler


class EpochPermutationSampler(DistributedSampler):
    """This rank's shard of a (seed, epoch)-determined permutation, optionally skipping a prefix.

    `len()` stays the shard's full size (Lightning sizes the epoch from it); a skip applies to the
    next pass only."""

    def __init__(self, dataset: Dataset, *, seed: int, num_replicas: int = 1, rank: int = 0,
                 shuffle: bool = True):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=False)
        self._skip_next = 0

    def skip_next(self, samples: int) -> None:
        """Leave out the first `samples` indices of the next pass (those already trained on)."""
        if samples < 0:
            raise ValueError(f"cannot skip a negative number of samples ({samples})")
        self._skip_next = int(samples)

    def __iter__(self) -> Iterator[int]:
        skip, self._skip_next = self._skip_next, 0
        indices = list(super().__iter__())
        return iter(indices[skip:])


class ResumableDataLoader(DataLoader):
    """A DataLoader over an `EpochPermutationSampler` whose position in the epoch is checkpointed.

    State: {"epoch": the sampler epoch of the current pass, "batches_done": batches handed out in
    it}. After `load_state_dict`, the next pass over that same epoch skips those batches' samples in
    the sampler; a pass over another epoch (e.g. the state was saved at an epoch's last batch)
    starts from the beginning."""

    def __init__(self, dataset: Dataset, *, sampler: EpochPermutationSampler, batch_size: int, **kwargs):
        if not isinstance(sampler, EpochPermutationSampler):
            raise TypeError(f"ResumableDataLoader needs an EpochPermutationSampler, got {type(sampler).__name__}")
        if kwargs.get("drop_last"):
            raise ValueError("ResumableDataLoader does not support drop_last=True (the skip is counted "
                             "in whole batches of the sampler's order)")
        super().__init__(dataset, sampler=sampler, batch_size=batch_size, **kwargs)
        self._epoch = sampler.epoch
        self._batches_done = 0
        self._resume_at: tuple[int, int] | None = None   # (epoch, batches) for the next pass

    def __iter__(self) -> Iterator[Any]:
        # A generator: the body runs at the first `next()`, after Lightning's `set_epoch`.
        epoch = self.sampler.epoch
        skip = 0
        if self._resume_at is not None and self._resume_at[0] == epoch:
            skip = self._resume_at[1]
        self._resume_at = None
        self.sampler.skip_next(skip * self.batch_size)
        self._epoch, self._batches_done = epoch, skip
        for batch in super().__iter__():
            self._batches_done += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        if self._resume_at is not None:  # restored but not iterated yet: keep the restored position
            return {"epoch": self._resume_at[0], "batches_done": self._resume_at[1]}
        return {"epoch": int(self._epoch), "batches_done": int(self._batches_done)}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        try:
            epoch, done = int(state_dict["epoch"]), int(state_dict["batches_done"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a ResumableDataLoader state (need integer 'epoch' and "
                             f"'batches_done'): {state_dict!r}") from err
        if epoch < 0 or done < 0:
            raise ValueError(f"ResumableDataLoader state must not be negative: {state_dict!r}")
        if done >= len(self):  # saved after the epoch's last batch: the next pass is a new epoch
            epoch, done = epoch + 1, 0
        self.sampler.set_epoch(epoch)
        self._resume_at = (epoch, done)
        self._epoch, self._batches_done = epoch, done
