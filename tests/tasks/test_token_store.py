"""Token splits on disk: written row by row, opened memory-mapped, checked by the cache manifest."""
from __future__ import annotations

import mmap
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tasks import build_datamodule, cache, listops, token_store
from tasks.base import TokenDataset


def _mapped(array: np.ndarray) -> bool:
    return isinstance(array, np.memmap) and isinstance(array._mmap, mmap.mmap)


def test_split_roundtrip_cuts_at_max_len_and_maps_every_array(tmp_path):
    docs = [(np.array([1, 2, 3, 4], np.uint8), np.array([7], np.uint8)),
            (np.array([], np.uint8), np.array([5, 6, 7, 8, 9], np.uint8)),
            (np.array([200], np.uint8), np.array([], np.uint8))]
    rows = [(d, label) for d, label in zip(docs, (1, 0, 1))]
    assert token_store.write_split(tmp_path / "s", iter(rows), documents=2, max_len=3) == 3
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "labels.npy", "offsets_0.npy", "offsets_1.npy", "tokens_0.npy", "tokens_1.npy"]
    split = token_store.open_split(tmp_path / "s")
    assert all(_mapped(a) for seq in split.sequences for a in (seq.flat, seq.offsets)) and _mapped(split.labels)
    assert [split.sequences[0][i].tolist() for i in range(3)] == [[1, 2, 3], [], [200]]
    assert [split.sequences[1][i].tolist() for i in range(3)] == [[7], [5, 6, 7], []]
    assert split.labels.tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="expected 2 document"):
        token_store.write_split(tmp_path / "t", [((np.zeros(1, np.uint8),), 0)], documents=2)


def _listops_module(tmp_path, write_listops, **kwargs):
    write_listops(tmp_path)
    dm = build_datamodule("listops", data_dir=tmp_path, batch_size=2, **kwargs)
    dm.prepare_data()
    dm.setup()
    return dm


def test_listops_split_is_mapped_from_the_cache_and_items_match_the_tsv(tmp_path, write_listops):
    dm = _listops_module(tmp_path, write_listops, seq_len=8)
    ds = dm.dataset("train")
    seq = ds.split.sequences[0]
    assert _mapped(seq.flat) and _mapped(seq.offsets) and _mapped(ds.split.labels)
    entry = ds.split.folder.parent
    assert entry.parent == tmp_path / "cache" and entry.name.startswith("listops-tokens-")
    cache.check_entry(entry)
    manifest = (entry / cache.MANIFEST).read_text()
    assert '"train/tokens_0.npy"' in manifest and '"test/labels.npy"' in manifest
    tsv = tmp_path / "listops-1000" / listops.FILES["train"]
    for i, ((ids,), label) in enumerate(listops.rows(tsv)):
        item = ds[i]
        n = min(len(ids), 8)
        assert item["input_ids"][:n].tolist() == ids[:n].tolist() and item["label"].item() == label
        assert item["padding_mask"].tolist() == [False] * n + [True] * (8 - n)
    # A second module maps the same entry (nothing tokenised again); another seq_len has its own.
    other = build_datamodule("listops", data_dir=tmp_path, batch_size=2, seq_len=8)
    assert other.dataset("train").split.folder == ds.split.folder
    longer = build_datamodule("listops", data_dir=tmp_path, batch_size=2, seq_len=16)
    assert longer.dataset("train").split.folder != ds.split.folder


def test_a_truncated_token_cache_names_the_file_and_how_to_rebuild_it(tmp_path, write_listops):
    dm = _listops_module(tmp_path, write_listops)
    tokens = dm.dataset("train").split.folder / "tokens_0.npy"
    with open(tokens, "r+b") as handle:
        handle.truncate(tokens.stat().st_size - 3)
    fresh = build_datamodule("listops", data_dir=tmp_path, batch_size=2)
    with pytest.raises(cache.DamagedCache, match=rf"{tokens} has \d+ bytes.*the next run tokenises the data again"):
        fresh.setup()


def test_a_mapped_split_pickles_as_its_folder_and_serves_dataloader_workers(tmp_path, write_listops):
    dm = _listops_module(tmp_path, write_listops)
    ds = dm.dataset("train")
    blob = pickle.dumps(ds)
    assert len(blob) < 2000                                  # the folder's name, not the data
    copy = pickle.loads(blob)
    assert _mapped(copy.split.sequences[0].flat) and copy.split.folder == ds.split.folder
    assert torch.equal(copy[3]["input_ids"], ds[3]["input_ids"])
    in_process = [b["input_ids"] for b in DataLoader(ds, batch_size=2)]
    workers = [b["input_ids"] for b in DataLoader(ds, batch_size=2, num_workers=1)]
    assert len(workers) == 2 and all(torch.equal(a, b) for a, b in zip(in_process, workers))


def test_limit_train_serves_the_first_examples_of_the_mapped_split(tmp_path, write_listops):
    dm = _listops_module(tmp_path, write_listops, limit_train=2)
    ds = dm.dataset("train")
    assert isinstance(ds, TokenDataset) and len(ds) == 2 and len(ds.split) == 4
    with pytest.raises(IndexError):
        ds[2]


def test_text_and_retrieval_map_their_token_caches(tmp_path, write_imdb, write_aan):
    write_imdb(tmp_path)
    write_aan(tmp_path)
    for task, documents in (("text", 1), ("retrieval", 2)):
        dm = build_datamodule(task, data_dir=tmp_path, batch_size=2, seq_len=16)
        dm.setup()
        for split in ("train", "val", "test"):
            sequences = dm.dataset(split).split.sequences
            assert len(sequences) == documents and all(_mapped(seq.flat) for seq in sequences)
        entry = dm.dataset("test").split.folder.parent
        assert entry.name.startswith(f"{task}-tokens-") and sorted(p.name for p in entry.iterdir() if p.is_dir()) == [
            "test", "train", "val"]
