"""The resumable training loader (torchdata's StatefulDataLoader over `EpochSampler`): (seed, epoch)
order, disjoint DDP shards, and a state round trip that continues an interrupted epoch with exactly
the batches it would have seen."""
from __future__ import annotations

import pytest
import torch
from lightning_fabric.utilities.types import _Stateful
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tasks.resumable_loader import train_loader


class Indices(Dataset):
    """Example i is i; records which examples were loaded (main process only)."""

    def __init__(self, n: int):
        self.n = n
        self.loaded: list[int] = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.loaded.append(int(i))
        return torch.tensor(i)


def loader(n=23, batch_size=4, seed=7, epoch=0, world=1, rank=0, **kw) -> StatefulDataLoader:
    """A loader as Lightning drives it: its sampler's epoch set before a pass."""
    dl = train_loader(Indices(n), seed=seed, batch_size=batch_size, num_replicas=world, rank=rank, **kw)
    dl.sampler.set_epoch(epoch)
    return dl


def batches(dl) -> list[list[int]]:
    return [b.tolist() for b in dl]


def test_order_is_a_seeded_permutation_new_each_epoch():
    first = sum(batches(loader(epoch=0)), [])
    assert sorted(first) == list(range(23))
    assert first == sum(batches(loader(epoch=0)), [])          # a function of (seed, epoch)
    assert first != sum(batches(loader(epoch=1)), [])          # a new order each epoch
    assert first != sum(batches(loader(epoch=0, seed=8)), [])  # and of the seed
    assert first != list(range(23))


def test_ddp_ranks_read_disjoint_shards_covering_the_data():
    shards = [sum(batches(loader(n=24, world=2, rank=r, epoch=3)), []) for r in range(2)]
    assert set(shards[0]).isdisjoint(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(24))


@pytest.mark.parametrize("world,rank,num_workers", [(1, 0, 0), (2, 1, 0), (1, 0, 2)])
def test_state_round_trip_skips_exactly_the_consumed_batches(world, rank, num_workers):
    kw = dict(world=world, rank=rank, epoch=2, num_workers=num_workers)
    full = batches(loader(**kw))
    interrupted = loader(**kw)
    assert isinstance(interrupted, _Stateful)  # what Lightning checks before saving its state
    it = iter(interrupted)
    seen = [next(it).tolist() for _ in range(2)]
    state = interrupted.state_dict()
    assert seen == full[:2]

    resumed = loader(**{**kw, "epoch": 0})  # a fresh process: the epoch comes from the state
    resumed.load_state_dict(state)
    assert batches(resumed) == full[2:]
    if num_workers == 0:  # the skipped examples are never loaded
        assert sorted(resumed.dataset.loaded) == sorted(sum(full[2:], []))
    resumed.sampler.set_epoch(3)  # the next epoch is whole again
    assert batches(resumed) == batches(loader(**{**kw, "epoch": 3}))


@pytest.mark.parametrize("with_position", [True, False])
def test_state_saved_after_the_last_batch_resumes_with_a_whole_next_epoch(with_position):
    done = loader(epoch=4)
    it = iter(done)
    for _ in range(len(done)):  # Lightning stops at the known length, before StopIteration
        next(it)
    state = done.state_dict() if with_position else {k: v for k, v in done.state_dict().items()
                                                     if k != "lra_position"}
    resumed = loader()
    resumed.load_state_dict(state)
    assert batches(resumed) == batches(loader(epoch=5))
    assert resumed.sampler.epoch == 5
    assert resumed.state_dict()["lra_position"]["batches"] == len(done)  # counted from the new epoch's start


def test_bad_state_and_drop_last_are_clear_errors():
    with pytest.raises(ValueError, match="negative"):
        loader().sampler.load_state_dict({"yielded": -1, "epoch": 0})
    with pytest.raises(ValueError, match="needs an integer 'epoch'"):
        loader().sampler.load_state_dict({"yielded": 3})
    with pytest.raises(ValueError, match="drop_last"):
        loader(drop_last=True)


def test_datamodule_train_loader_is_resumable_and_sharded_by_the_trainer(nested, write_listops):
    from types import SimpleNamespace

    from tasks import build_datamodule

    data_dir, inner = nested
    write_listops(inner)
    dm = build_datamodule("listops", data_dir=data_dir, batch_size=1, seed=3)
    dm.setup("fit")
    single = dm.train_dataloader()
    assert isinstance(single, StatefulDataLoader) and isinstance(single, _Stateful)
    assert single.sampler.seed == 3 and single.sampler.num_replicas == 1 and len(single) == 4
    dm.trainer = SimpleNamespace(world_size=2, global_rank=1)
    shard = dm.train_dataloader()
    assert (shard.sampler.num_replicas, shard.sampler.rank, len(shard)) == (2, 1, 2)
    assert not isinstance(dm.val_dataloader(), StatefulDataLoader)  # evaluation order is fixed


@pytest.mark.parametrize("saved_workers,resumed_workers", [(2, 0), (0, 2), (2, 1)])
def test_a_state_resumes_in_a_loader_with_other_worker_processes(saved_workers, resumed_workers, capsys):
    """torchdata's own state fits only the worker layout that wrote it; the position beside it (epoch,
    batches handed out) resumes a run moved to a machine with another data.num_workers: the same
    batches, then whole epochs."""
    full = batches(loader(epoch=2, num_workers=saved_workers))
    interrupted = loader(epoch=2, num_workers=saved_workers)
    it = iter(interrupted)
    seen = [next(it).tolist() for _ in range(3)]
    state = interrupted.state_dict()
    assert seen == full[:3] and state["lra_position"] == {"epoch": 2, "batches": 3, "batch_size": 4,
                                                          "workers": saved_workers}
    resumed = loader(num_workers=resumed_workers)  # a fresh process: epoch 0 until the state says 2
    resumed.load_state_dict(state)
    assert batches(resumed) == full[3:]
    assert "epoch 2, batch 3 from its position" in capsys.readouterr().err
    assert resumed.state_dict()["lra_position"]["batches"] == len(full)
    resumed.sampler.set_epoch(3)
    assert batches(resumed) == batches(loader(epoch=3))


def test_a_state_of_another_worker_layout_without_a_position_is_a_clear_error():
    interrupted = loader(epoch=1, num_workers=2)
    it = iter(interrupted)
    next(it)
    state = {k: v for k, v in interrupted.state_dict().items() if k != "lra_position"}
    with pytest.raises(ValueError, match="2 worker process.*resume with data.num_workers=2"):
        loader(num_workers=0).load_state_dict(state)
    resumed = loader(num_workers=2)  # the layout that wrote it
    resumed.load_state_dict(state)
    assert len(batches(resumed)) == len(batches(loader(epoch=1))) - 1


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_resumed_from_torchdata_state_alone_knows_its_position(workers):
    """A state without the position (torchdata's own) resumes in its worker layout, and the position
    the resumed loader then saves counts the batches before the resume too (else a later move to
    another layout would repeat them)."""
    full = batches(loader(epoch=1, num_workers=workers))
    first = loader(epoch=1, num_workers=workers)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = {k: v for k, v in first.state_dict().items() if k != "lra_position"}
    second = loader(num_workers=workers)
    second.load_state_dict(state)
    it = iter(second)
    assert next(it).tolist() == full[2]
    position = second.state_dict()["lra_position"]
    assert (position["epoch"], position["batches"]) == (1, 3)
    moved = loader(num_workers=1 - min(workers, 1))  # to the other layout, by the position
    moved.load_state_dict(second.state_dict())
    assert batches(moved) == full[3:]
