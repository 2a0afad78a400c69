"""Evaluation under DDP counts every example exactly once (tasks/eval_sampler.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.utils.data import DistributedSampler, SequentialSampler

from tasks import build_datamodule
from tasks.eval_sampler import EvalShardSampler


@pytest.mark.parametrize("n", [1, 2, 5, 23, 24])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_shards_are_disjoint_unpadded_and_cover_the_split(n, world):
    shards = [list(EvalShardSampler(range(n), num_replicas=world, rank=r)) for r in range(world)]
    assert sorted(sum(shards, [])) == list(range(n))              # each example once, none repeated
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    for r, shard in enumerate(shards):
        assert len(EvalShardSampler(range(n), num_replicas=world, rank=r)) == len(shard)
        assert shard == sorted(shard)                                # the split's order
    # what torch's DistributedSampler (Lightning's default under DDP) does instead: pad by repeating
    padded = sum((list(DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=False))
                  for r in range(world)), [])
    assert len(padded) == -(-n // world) * world


def test_datamodule_evaluation_loaders_shard_under_ddp(tmp_path, write_listops):
    rows = {"train": [("( ( ( [MAX 2 ) 9 ) ] )", 9)] * 4,
            "val": [(f"( ( ( [MAX {i} ) 0 ) ] )", i) for i in range(5)],
            "test": [(f"( ( ( [MIN {i} ) 9 ) ] )", i) for i in range(3)]}
    write_listops(tmp_path, rows)
    dm = build_datamodule("listops", data_dir=tmp_path, batch_size=2, source="official")
    dm.prepare_data()
    dm.setup()
    assert isinstance(dm.val_dataloader().sampler, SequentialSampler)   # one process: unchanged
    labels = {}
    for rank in range(2):
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        for split, loader in (("val", dm.val_dataloader()), ("test", dm.test_dataloader())):
            # a DistributedSampler: Lightning keeps it instead of putting its padding one in
            assert isinstance(loader.sampler, EvalShardSampler) and isinstance(loader.sampler, DistributedSampler)
            labels.setdefault(split, []).extend(int(x) for b in loader for x in b["label"])
    assert sorted(labels["val"]) == [0, 1, 2, 3, 4] and sorted(labels["test"]) == [0, 1, 2]
