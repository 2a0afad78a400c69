"""Text (IMDB bytes) and Retrieval (AAN pairs): readers, vocabulary, truncation, errors, tfds."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tasks import build_datamodule, retrieval, text


def ids_of(raw: bytes) -> list[int]:
    return [b + 1 for b in raw]


def test_imdb_folder_bytes_labels_and_validation_carve(tmp_path, write_imdb):
    root = write_imdb(tmp_path)
    dm = build_datamodule("text", data_dir=tmp_path, batch_size=4, seq_len=48)
    assert dm.source.kind == "folder" and dm.vocab_size == 257 and dm.max_len == 48
    dm.setup()
    assert dm.split_sizes == {"train": 11, "val": 1, "test": 12}       # 12 train reviews, 10% carved
    test = dm.dataset("test")
    # test: neg files in numeric order, then pos
    raw = (root / "test" / "neg" / "0_2.txt").read_bytes()
    item = test[0]
    n = min(len(raw), 48)
    assert item["input_ids"][:n].tolist() == ids_of(raw[:n]) and item["label"].item() == 0
    assert test[6]["label"].item() == 1
    long = test[11]                                                     # longest pos review: cut at 48
    assert not long["padding_mask"].any() and long["input_ids"].min() >= 1
    short = dm.dataset("val")[0]
    assert short["padding_mask"].dtype == torch.bool
    # The carve is fixed (same for any run seed) and disjoint from train.
    other = build_datamodule("text", data_dir=tmp_path, batch_size=4, seq_len=48, seed=5)
    other.setup()
    assert torch.equal(other.dataset("val")[0]["input_ids"], short["input_ids"])
    train_rows = {tuple(dm.dataset("train")[i]["input_ids"].tolist()) for i in range(11)}
    assert tuple(short["input_ids"].tolist()) not in train_rows
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 48) and batch["input_ids"].dtype == torch.long
    assert torch.equal(batch["padding_mask"], batch["input_ids"] == 0)


def test_imdb_errors(tmp_path, write_imdb, monkeypatch):
    # The messages a user without the tfds extra sees (with tfds, auto would download through it).
    monkeypatch.setattr(text.tfds_source, "installed", lambda: False)
    with pytest.raises(FileNotFoundError) as err:
        build_datamodule("text", data_dir=tmp_path, batch_size=2)
    msg = str(err.value)
    assert "aclImdb/{train,test}/{pos,neg}/*.txt" in msg and "aclImdb_v1.tar.gz" in msg and "lra[tfds]" in msg
    with pytest.raises(FileNotFoundError, match="IMDB through tfds needs tensorflow-datasets"):
        build_datamodule("text", data_dir=tmp_path, batch_size=2, source="tfds")
    monkeypatch.undo()
    root = write_imdb(tmp_path)
    (root / "train" / "pos" / "3_7.txt").write_bytes(b"  \n")
    dm = build_datamodule("text", data_dir=tmp_path, batch_size=2)
    with pytest.raises(ValueError, match=r"empty review file .*train/pos/3_7\.txt"):
        dm.setup()


def test_text_tfds_through_mock_data(tmp_path, monkeypatch):
    tfds = pytest.importorskip("tensorflow_datasets",
                               reason="tensorflow-datasets (the optional lra[tfds] extra) is not installed")
    from tasks import tfds_source

    # mock_data stands in for the download, so the download server counts as reachable
    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: None)
    with tfds.testing.mock_data(num_examples=20):
        dm = build_datamodule("text", data_dir=tmp_path, batch_size=4, source="tfds", seq_len=64)
        dm.setup()
        batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 64) and set(batch["label"].tolist()) <= {0, 1}
    assert dm.split_sizes["train"] + dm.split_sizes["val"] == 20


def test_aan_pairs_nested_layout(nested, write_aan):
    data_dir, inner = nested
    write_aan(inner)
    dm = build_datamodule("retrieval", data_dir=data_dir, batch_size=3, seq_len=32)
    assert dm.dual and dm.max_len == 32 and dm.vocab_size == 257
    dm.setup()
    batch = next(iter(dm.test_dataloader()))
    assert batch["input_ids"].shape == (3, 2, 32) and batch["padding_mask"].shape == (3, 2, 32)
    assert batch["label"].tolist() == [1, 0, 1]
    assert batch["input_ids"][0, 0, :25].tolist() == ids_of(b"Attention is all you need")
    assert batch["padding_mask"][0, 0, 25:].all() and not batch["padding_mask"][0, 0, :25].any()
    assert batch["input_ids"][1, 1, :18].tolist() == ids_of(b'quoted "text" here')
    assert not batch["padding_mask"][2, 0].any()              # 50 bytes cut to 32
    assert batch["padding_mask"][2, 1, 1:].all()


@pytest.mark.parametrize("row, message", [
    ("1\ta\tb\tonly four", "expected 5 tab-separated fields"),
    ("yes\ta\tb\tx\ty", "label must be 0 or 1, got 'yes'"),
    ("2.0\ta\tb\tx\ty", "label must be 0 or 1"),
])
def test_aan_corrupt_row_names_file_and_line(tmp_path, write_aan, row, message):
    folder = write_aan(tmp_path)
    with open(folder / "new_aan_pairs.eval.tsv", "a", encoding="utf-8") as handle:
        handle.write(row + "\n")
    dm = build_datamodule("retrieval", data_dir=tmp_path, batch_size=2)
    with pytest.raises(ValueError, match=rf"new_aan_pairs\.eval\.tsv:4: {message}"):
        dm.setup("validate")


def test_aan_undecodable_bytes_name_file_and_line(tmp_path, write_aan):
    folder = write_aan(tmp_path)
    with open(folder / "new_aan_pairs.test.tsv", "ab") as handle:
        handle.write("1\ta\tb\tcaf\u00e9\tok\n".encode("utf-8") + b"0\ta\tb\tcaf\xe9\tok\n")
    with pytest.raises(ValueError, match=r"new_aan_pairs\.test\.tsv:5: not valid UTF-8 \(byte 0xe9 at column 10\)"):
        list(retrieval.rows(folder / "new_aan_pairs.test.tsv"))


def test_aan_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tsv_data/new_aan_pairs\.\{train,eval,test\}\.tsv.*lra_release\.gz"):
        build_datamodule("retrieval", data_dir=tmp_path, batch_size=2)
    with pytest.raises(ValueError, match="retrieval has no 'generated' source; it supports official"):
        build_datamodule("retrieval", data_dir=tmp_path, batch_size=2, source="generated")


def test_ragged_roundtrip():
    from tasks.base import Ragged
    r = Ragged.from_arrays([np.array([1, 2, 3]), np.array([], dtype=np.uint8), np.array([9])], max_len=2)
    assert len(r) == 3 and r[0].tolist() == [1, 2] and r[1].tolist() == [] and r.lengths().tolist() == [2, 0, 1]
