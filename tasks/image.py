"""CIFAR-10 in grayscale, one token per pixel (LRA "Image"): tfds `cifar10` or the python batches.

Local layout (cifar-10-python.tar.gz): `cifar-10-batches-py/data_batch_1..5` and `test_batch`,
pickled dicts with b"data" (10000, 3072) uint8 — the R, G and B planes of 32x32 row-major — and
b"labels". They are read with a restricted unpickler that only builds numpy arrays and plain
containers, so a tampered file cannot run code.

Grayscale as LRA (tf.image.rgb_to_grayscale on uint8 images): in float32,
g = 0.2989 R/255 + 0.5870 G/255 + 0.1140 B/255, then back to uint8 the way TensorFlow's
convert_image_dtype does: trunc(g * 255.5).
Splits as LRA: train = the first 90% of the 50,000 training images, val = the last 10%, test = the
10,000 test images.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from . import release, tfds_source
from .base import DataSource, PixelSplit

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
GRAY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)


def to_gray(rgb: np.ndarray) -> np.ndarray:
    """(..., 3) uint8 RGB -> (...) uint8 gray, as tf.image.rgb_to_grayscale (see module doc)."""
    x = rgb.astype(np.float32) / np.float32(255.0)
    g = x[..., 0] * GRAY_WEIGHTS[0] + x[..., 1] * GRAY_WEIGHTS[1] + x[..., 2] * GRAY_WEIGHTS[2]
    return np.clip(g * np.float32(255.5), 0, 255).astype(np.uint8)


class _Unpickler(pickle.Unpickler):
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("copyreg", "_reconstructor"),
               ("builtins", "object"), ("_codecs", "encode")}  # protocol-2 bytes (harmless)

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One python-pickle batch -> (N, 32, 32) gray uint8 images and labels; ValueError names the
    file (and the row of a bad label)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            batch = _Unpickler(handle, encoding="bytes").load()
    except Exception as err:  # noqa: BLE001 - any unpickling failure means a corrupt file
        raise ValueError(f"{path}: not a readable CIFAR-10 python batch ({err})") from None
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(batch).__name__}")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path}: missing 'data' or 'labels'")
    data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise ValueError(f"{path}: 'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}")
    labels = np.asarray(labels)
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: {data.shape[0]} images but {labels.size} labels")
    if labels.dtype.kind not in "iu":   # floats would be truncated, strings / None fail in numpy
        row = next((i for i, v in enumerate(labels.tolist()) if type(v) is not int), 0)
        raise ValueError(f"{path}: row {row}: label {labels.tolist()[row]!r} is not an integer in 0..9")
    bad = np.flatnonzero((labels < 0) | (labels > 9))
    if len(bad):
        raise ValueError(f"{path}: row {int(bad[0])}: label {int(labels[bad[0]])} is not in 0..9")
    rgb = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return to_gray(rgb), labels.astype(np.int64)


def split_train(images, labels, split: str, val_fraction: float):
    n_train = len(labels) - int(round(val_fraction * len(labels)))
    sl = slice(0, n_train) if split == "train" else slice(n_train, None)
    return images[sl], labels[sl]


class FolderCifar(DataSource):
    kind = "folder"

    def __init__(self, data_dir: Path, val_fraction: float):
        self.data_dir = Path(data_dir)
        self.val_fraction = val_fraction
        self.root = release.find_folder(self.data_dir, "cifar-10-batches-py", TRAIN_FILES + TEST_FILES)

    def available(self) -> bool:
        return self.root is not None

    def missing_help(self) -> str:
        return (f"CIFAR-10 not found: expected cifar-10-batches-py/{{data_batch_1..5,test_batch}} under "
                f"{self.data_dir}. Download {release.CIFAR10_URL} and unpack it there "
                f"(tar xzf cifar-10-python.tar.gz -C {self.data_dir}), or {release.TFDS_HINT} to read tfds 'cifar10'")

    def incomplete(self) -> str | None:
        if self.root is not None:
            return None
        return release.incomplete_folder(
            self.data_dir, "cifar-10-batches-py", TRAIN_FILES + TEST_FILES, "the CIFAR-10 folder",
            f"Unpack {release.CIFAR10_URL} again (tar xzf cifar-10-python.tar.gz -C {self.data_dir}), or "
            "remove the folder and use source='tfds'.")

    def load(self, split: str) -> PixelSplit:
        self.require()
        files = TEST_FILES if split == "test" else TRAIN_FILES
        parts = [read_batch(self.root / name) for name in files]
        images = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        if split != "test":
            images, labels = split_train(images, labels, split, self.val_fraction)
        return PixelSplit(images, labels)

    def describe(self) -> str:
        return f"CIFAR-10 python batches in {self.root}"


class TfdsCifar(DataSource):
    kind = "tfds"

    def __init__(self, data_dir: Path, val_fraction: float):
        self.data_dir = Path(data_dir)
        self.val_fraction = val_fraction

    def available(self) -> bool:
        return tfds_source.installed()

    def missing_help(self) -> str:
        return f"CIFAR-10 through tfds needs tensorflow-datasets: {release.TFDS_HINT}; or {self._elsewhere()}"

    def _elsewhere(self) -> str:
        """The other way to get the images, for tfds's errors."""
        return f"put cifar-10-batches-py/ ({release.CIFAR10_URL}) under {self.data_dir}"

    def prepare(self) -> None:
        self.require()
        tfds_source.prepare("cifar10", self.data_dir, self._elsewhere())

    def load(self, split: str) -> PixelSplit:
        self.require()
        images, labels = [], []
        for i, ex in enumerate(tfds_source.examples("cifar10", "test" if split == "test" else "train",
                                                    self.data_dir, self._elsewhere())):
            img = np.asarray(ex["image"])
            if img.shape != (32, 32, 3):
                raise ValueError(f"tfds cifar10 example {i}: image shape {img.shape}, expected (32, 32, 3)")
            images.append(img)
            labels.append(int(ex["label"]))
        if not labels:
            raise ValueError(f"tfds cifar10[{split}] is empty")
        gray = to_gray(np.stack(images))
        labels = np.asarray(labels, dtype=np.int64)
        if split != "test":
            gray, labels = split_train(gray, labels, split, self.val_fraction)
        return PixelSplit(gray, labels)

    def describe(self) -> str:
        return "CIFAR-10 from tfds cifar10"


def make_source(spec, kind: str, *, data_dir: Path, **_unused) -> DataSource:
    cls = {"folder": FolderCifar, "tfds": TfdsCifar}.get(kind)
    if cls is None:
        raise ValueError(f"image has no {kind!r} source")
    return cls(data_dir, spec.options["val_fraction"])
