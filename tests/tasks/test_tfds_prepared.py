"""The tfds route on prepared data: tfds prepares tiny `imdb_reviews` / `cifar10` stand-ins in
array_record format (tests/tasks/tfds_builders.py), and the project reads them back through
tasks.tfds_source, the Text and Image DataModules and `lra data check`, all without TensorFlow."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow_datasets", reason="tensorflow-datasets (the optional lra[tfds] extra) is not installed")

from lra.cli import main  # noqa: E402
from tasks import build_datamodule, tfds_source  # noqa: E402
from tasks.image import to_gray  # noqa: E402
from tests.tasks import tfds_builders  # noqa: E402


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A data dir whose tensorflow_datasets/ folder holds both stand-ins, as tfds prepared them."""
    data_dir = tmp_path_factory.mktemp("data")
    for name in tfds_builders.BUILDERS:
        folder = tfds_builders.prepare(name, data_dir / "tensorflow_datasets")
        assert sorted(p.name for p in folder.glob("*.array_record-*")) == [
            f"{name}-test.array_record-00000-of-00001", f"{name}-train.array_record-00000-of-00001"]
    return data_dir


def stored_rows(dm, split: str) -> list[tuple]:
    """The split's examples as (*input_ids, label) tuples, sorted (tfds stores them shuffled)."""
    ds = dm.dataset(split)
    return sorted((*ds[i]["input_ids"].tolist(), ds[i]["label"].item()) for i in range(len(ds)))


def test_examples_reads_every_prepared_example(prepared):
    for split in ("train", "test"):
        texts = [(ex["text"], int(ex["label"])) for ex in tfds_source.examples("imdb_reviews", split, prepared)]
        want = [(ex["text"].encode("utf-8"), ex["label"]) for ex in tfds_builders.expected("imdb_reviews", split)]
        assert sorted(texts) == sorted(want)
        images = {ex["id"].decode(): (np.asarray(ex["image"]), int(ex["label"]))
                  for ex in tfds_source.examples("cifar10", split, prepared)}
        for ex in tfds_builders.expected("cifar10", split):
            image, label = images.pop(ex["id"])
            assert label == ex["label"] and image.dtype == np.uint8 and np.array_equal(image, ex["image"])
        assert not images


def test_text_datamodule_reads_prepared_imdb_reviews(prepared):
    dm = build_datamodule("text", data_dir=prepared, batch_size=4, source="tfds", seq_len=32)
    dm.prepare_data()                                   # tfds finds the prepared files: no download
    dm.setup()
    assert dm.split_sizes["train"] + dm.split_sizes["val"] == 12 and dm.split_sizes["test"] == 6
    want = []
    for ex in tfds_builders.expected("imdb_reviews", "test"):
        ids = [b + 1 for b in ex["text"].encode("utf-8")[:32]]          # byte + 1; 0 pads
        want.append((*ids, *[0] * (32 - len(ids)), ex["label"]))
    assert stored_rows(dm, "test") == sorted(want)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 32) and set(batch["label"].tolist()) <= {0, 1}


def test_image_datamodule_reads_prepared_cifar10(prepared):
    dm = build_datamodule("image", data_dir=prepared, batch_size=4, source="tfds")
    dm.prepare_data()
    dm.setup()
    assert dm.split_sizes == {"train": 11, "val": 1, "test": 6}      # LRA: train[:90%] / train[90%:]
    want = [(*to_gray(ex["image"]).reshape(-1).tolist(), ex["label"])
            for ex in tfds_builders.expected("cifar10", "test")]
    assert stored_rows(dm, "test") == sorted(want)


def test_data_check_reads_prepared_imdb_reviews(prepared, capsys):
    assert main(["data", "check", "text", "--source", "tfds", "--data-dir", str(prepared), "--seq-len", "32"]) == 0
    out = capsys.readouterr().out
    assert "IMDB reviews from tfds imdb_reviews" in out and "test        6 examples, labels [3, 3]" in out
