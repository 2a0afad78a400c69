"""Image (CIFAR-10 gray): python-pickle batches, grayscale formula, splits, errors, tfds."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from tasks import build_datamodule, image


def reference_gray(row: np.ndarray) -> np.ndarray:
    """tf.image.rgb_to_grayscale on uint8, written out pixel by pixel: float32 weighted sum of the
    channels scaled to [0, 1], then uint8(trunc(x * 255.5))."""
    r, g, b = (row[c * 1024:(c + 1) * 1024].astype(np.float32) / np.float32(255) for c in range(3))
    gray = r * np.float32(0.2989) + g * np.float32(0.5870) + b * np.float32(0.1140)
    return np.array([int(v * np.float32(255.5)) for v in gray], dtype=np.uint8)


def test_cifar_batches_gray_splits_and_black_pixels(nested, write_cifar):
    data_dir, inner = nested
    _, written = write_cifar(inner, per_batch=10)
    dm = build_datamodule("image", data_dir=data_dir, batch_size=5)
    assert dm.source.kind == "folder" and dm.image_shape == (32, 32) and dm.vocab_size == 256
    dm.setup()
    assert dm.split_sizes == {"train": 45, "val": 5, "test": 10}      # LRA: train[:90%] / train[90%:]
    data, labels = written["data_batch_1"]
    item = dm.dataset("train")[3]
    assert item["input_ids"].tolist() == reference_gray(data[3]).tolist() and item["label"].item() == labels[3]
    black = dm.dataset("train")[0]
    assert (black["input_ids"] == 0).all() and not black["padding_mask"].any()   # pixel 0 is not padding
    val0 = dm.dataset("val")[0]
    data5, labels5 = written["data_batch_5"]
    assert val0["input_ids"].tolist() == reference_gray(data5[5]).tolist() and val0["label"].item() == labels5[5]
    test_data, test_labels = written["test_batch"]
    assert dm.dataset("test")[9]["input_ids"].tolist() == reference_gray(test_data[9]).tolist()
    batch = next(iter(dm.test_dataloader()))
    assert batch["input_ids"].shape == (5, 1024) and batch["input_ids"].dtype == torch.long
    assert batch["padding_mask"].dtype == torch.bool and not batch["padding_mask"].any()
    with pytest.raises(ValueError, match="seq_len must be 1024"):
        build_datamodule("image", data_dir=data_dir, batch_size=5, seq_len=2048)


def test_white_maps_to_255():
    assert image.to_gray(np.full((1, 3), 255, np.uint8)).tolist() == [255]
    assert image.to_gray(np.zeros((1, 3), np.uint8)).tolist() == [0]


@pytest.mark.parametrize("content, message", [
    (b"garbage", "not a readable CIFAR-10 python batch"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 11]}), "row 1: label 11 is not in 0..9"),
    (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 1]}), r"must be uint8 of shape \(N, 3072\)"),
    (pickle.dumps({b"labels": [1]}), "missing 'data' or 'labels'"),
    # not integers: a float would be truncated silently (1.7 -> 1), str / None failed inside numpy
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1.7, 2.0]}),
     r"row 0: label 1\.7 is not an integer in 0\.\.9"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, "cat"]}),
     r"row 0: label '3' is not an integer"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, None]}),
     "row 1: label None is not an integer"),
])
def test_corrupt_batches_name_the_file(tmp_path, write_cifar, content, message):
    folder, _ = write_cifar(tmp_path, per_batch=4)
    (folder / "data_batch_2").write_bytes(content)
    dm = build_datamodule("image", data_dir=tmp_path, batch_size=2)
    with pytest.raises(ValueError, match=rf"data_batch_2: .*{message}"):
        dm.setup("fit")


def test_unpickler_refuses_code(tmp_path, write_cifar):
    folder, _ = write_cifar(tmp_path, per_batch=4)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(ValueError, match="refusing to load builtins.print"):
        image.read_batch(folder / "test_batch")


def test_missing_cifar_says_how_to_get_it(tmp_path, monkeypatch):
    # The message a user without the tfds extra sees (with tfds, auto would download through it).
    from tasks import tfds_source

    monkeypatch.setattr(tfds_source, "installed", lambda: False)
    with pytest.raises(FileNotFoundError) as err:
        build_datamodule("image", data_dir=tmp_path, batch_size=2)
    msg = str(err.value)
    assert "cifar-10-batches-py" in msg and "cifar-10-python.tar.gz" in msg and "lra[tfds]" in msg


def test_image_tfds_through_mock_data(tmp_path, monkeypatch):
    tfds = pytest.importorskip("tensorflow_datasets",
                               reason="tensorflow-datasets (the optional lra[tfds] extra) is not installed")
    from tasks import tfds_source

    # mock_data stands in for the download, so the download server counts as reachable
    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: None)
    with tfds.testing.mock_data(num_examples=20):
        dm = build_datamodule("image", data_dir=tmp_path, batch_size=4, source="tfds")
        dm.setup()
        batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 1024) and not batch["padding_mask"].any()
    assert dm.split_sizes == {"train": 18, "val": 2, "test": 20}
