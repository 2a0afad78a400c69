"""IMDB reviews as UTF-8 bytes (LRA "Text"): tfds `imdb_reviews` or a local `aclImdb/` folder.

Local layout (the Stanford release, aclImdb_v1.tar.gz): `aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`;
label 1 = pos, 0 = neg (as tfds). `train/unsup` is ignored. Reviews are used as raw bytes (HTML
`<br />` included, as in LRA) and cut to `max_len`.

Splits: LRA validated on the test split (IMDB has no validation split). We carve a validation
split from train instead: a fixed-seed random `val_fraction` (10%) of the 25,000 training reviews,
the same for every run, so model selection never sees the test set; test is the 25,000 test reviews.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from . import release, tfds_source
from .base import DataSource, Ragged, TokenSplit

LABELS = {"neg": 0, "pos": 1}


def _review_order(path: Path):
    match = re.match(r"(\d+)_(\d+)$", path.stem)
    return (int(match.group(1)), int(match.group(2))) if match else (1 << 60, path.stem)


def read_folder_split(root: Path, split: str, max_len: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Reviews of aclImdb/<split>/{neg,pos} as byte arrays (cut to max_len) and labels."""
    arrays, labels = [], []
    for name, label in LABELS.items():
        folder = Path(root) / split / name
        if not folder.is_dir():
            raise FileNotFoundError(f"missing folder {folder} (expected aclImdb/{{train,test}}/{{pos,neg}}/*.txt)")
        files = sorted(folder.glob("*.txt"), key=_review_order)
        if not files:
            raise FileNotFoundError(f"no *.txt reviews in {folder}")
        for path in files:
            try:
                data = path.read_bytes()
            except OSError as err:
                raise ValueError(f"unreadable review file {path}: {err}") from None
            if not data.strip():
                raise ValueError(f"empty review file {path}")
            arrays.append(np.frombuffer(data[:max_len], dtype=np.uint8))
            labels.append(label)
    return arrays, np.asarray(labels, dtype=np.int64)


def carve(arrays, labels, split: str, val_fraction: float, seed: int):
    """Fixed-seed random validation split carved from train."""
    order = np.random.default_rng(seed).permutation(len(labels))
    n_val = int(round(val_fraction * len(labels)))
    idx = np.sort(order[:n_val]) if split == "val" else np.sort(order[n_val:])
    return [arrays[i] for i in idx], labels[idx]


class _ImdbSource(DataSource):
    def __init__(self, data_dir: Path, max_len: int, val_fraction: float, split_seed: int):
        self.data_dir = Path(data_dir)
        self.max_len = max_len
        self.val_fraction = val_fraction
        self.split_seed = split_seed
        self._train = None

    def _raw(self, split: str):
        raise NotImplementedError

    def load(self, split: str) -> TokenSplit:
        self.require()
        if split == "test":
            arrays, labels = self._raw("test")
        else:
            if self._train is None:
                self._train = self._raw("train")
            arrays, labels = carve(*self._train, split, self.val_fraction, self.split_seed)
        return TokenSplit((Ragged.from_arrays(arrays, np.uint8, max_len=self.max_len),), labels)


class FolderImdb(_ImdbSource):
    kind = "folder"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.root = release.find_folder(self.data_dir, "aclImdb", ("train/pos", "train/neg", "test/pos", "test/neg"))

    def available(self) -> bool:
        return self.root is not None

    def missing_help(self) -> str:
        return (f"IMDB not found: expected aclImdb/{{train,test}}/{{pos,neg}}/*.txt under {self.data_dir}. "
                f"Download {release.IMDB_URL} and unpack it there (tar xzf aclImdb_v1.tar.gz -C {self.data_dir}), "
                f"or {release.TFDS_HINT} to read tfds 'imdb_reviews'")

    def incomplete(self) -> str | None:
        if self.root is not None:
            return None
        return release.incomplete_folder(
            self.data_dir, "aclImdb", ("train/pos", "train/neg", "test/pos", "test/neg"), "the IMDB folder",
            f"Unpack {release.IMDB_URL} again (tar xzf aclImdb_v1.tar.gz -C {self.data_dir}), or remove the "
            "folder and use source='tfds'.")

    def _raw(self, split):
        return read_folder_split(self.root, split, self.max_len)

    def describe(self) -> str:
        return f"IMDB reviews from {self.root}"


class TfdsImdb(_ImdbSource):
    kind = "tfds"

    def available(self) -> bool:
        return tfds_source.installed()

    def missing_help(self) -> str:
        return (f"IMDB through tfds needs tensorflow-datasets: {release.TFDS_HINT}; or put the Stanford "
                f"aclImdb/ folder ({release.IMDB_URL}) under {self.data_dir}")

    def prepare(self) -> None:
        self.require()
        tfds_source.prepare("imdb_reviews", self.data_dir)

    def _raw(self, split):
        arrays, labels = [], []
        for i, ex in enumerate(tfds_source.examples("imdb_reviews", split, self.data_dir)):
            text = ex["text"]
            data = text if isinstance(text, bytes) else str(text).encode("utf-8")
            label = int(ex["label"])
            if label not in (0, 1):
                raise ValueError(f"tfds imdb_reviews[{split}] example {i}: label {label} is not 0/1")
            arrays.append(np.frombuffer(data[: self.max_len], dtype=np.uint8))
            labels.append(label)
        if not labels:
            raise ValueError(f"tfds imdb_reviews[{split}] is empty")
        return arrays, np.asarray(labels, dtype=np.int64)

    def describe(self) -> str:
        return "IMDB reviews from tfds imdb_reviews"


def make_source(spec, kind: str, *, data_dir: Path, max_len: int, **_unused) -> DataSource:
    o = spec.options
    cls = {"folder": FolderImdb, "tfds": TfdsImdb}.get(kind)
    if cls is None:
        raise ValueError(f"text has no {kind!r} source")
    return cls(data_dir, max_len, o["val_fraction"], o["split_seed"])
