"""Validation and test under DDP: every example evaluated exactly once.

Under DDP Lightning gives an evaluation loader that has no sampler of its own a
`DistributedSampler`, which pads the split with repeated examples until its size divides by the
world size; the accuracy that torchmetrics then sums over the ranks counts up to world_size - 1
examples twice (Lightning warns about it for `trainer.test`). `EvalShardSampler` is a
`DistributedSampler`, so Lightning keeps it (`_requires_distributed_sampler` skips loaders whose
sampler already is one), but its shards are disjoint and unpadded: rank r reads examples
r, r + W, r + 2W, ... in order, and a rank may read one example fewer than another. Evaluation
needs no equal shard sizes: the forward passes run under no_grad, where DDP syncs nothing, and the
metrics are reduced once, at the end of the split.
"""
from __future__ import annotations

from typing import Iterator

from torch.utils.data import Dataset, DistributedSampler


class EvalShardSampler(DistributedSampler):
    """Rank `rank`'s strided, unpadded shard of a split, in the split's order."""

    def __init__(self, dataset: Dataset, *, num_replicas: int, rank: int):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        self.total_size = len(dataset)  # type: ignore[arg-type]
        self.num_samples = len(range(rank, self.total_size, num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total_size, self.num_replicas))

    def __len__(self) -> int:
        return self.num_samples
