"""IMDB reviews as UTF-8 bytes (LRA "Text"): tfds `imdb_reviews` or a local `aclImdb/` folder.

Local layout (the Stanford release, aclImdb_v1.tar.gz): `aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`;
label 1 = pos, 0 = neg (as tfds). `train/unsup` is ignored. Reviews are used as raw bytes (HTML
`<br />` included, as in LRA) and cut to `max_len`.

Splits: LRA validated on the test split (IMDB has no validation split). We carve a validation
split from train instead: a fixed-seed random `val_fraction` (10%) of the 25,000 training reviews,
the same for every run, so model selection never sees the test set; test is the 25,000 test reviews.
Reviews are tokenised once into a memory-mapped token cache (`tasks.token_store`), keyed by where
they come from (the folder with its file counts and times, or the tfds name), `max_len` and the carve.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Iterator

import numpy as np

from . import release, tfds_source, token_store
from .base import DataSource, TokenSplit

LABELS = {"neg": 0, "pos": 1}


def _review_order(path: Path):
    match = re.match(r"(\d+)_(\d+)$", path.stem)
    return (int(match.group(1)), int(match.group(2))) if match else (1 << 60, path.stem)


def folder_rows(root: Path, split: str) -> Iterator[tuple[tuple[np.ndarray], int]]:
    """The ((review bytes,), label) rows of aclImdb/<split>/{neg,pos}, one file at a time."""
    for name, label in LABELS.items():
        folder = Path(root) / split / name
        for path in _review_files(folder):
            try:
                data = path.read_bytes()
            except OSError as err:
                raise ValueError(f"unreadable review file {path}: {err}") from None
            if not data.strip():
                raise ValueError(f"empty review file {path}")
            yield (np.frombuffer(data, dtype=np.uint8),), label


def _review_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise FileNotFoundError(f"missing folder {folder} (expected aclImdb/{{train,test}}/{{pos,neg}}/*.txt)")
    files = sorted(folder.glob("*.txt"), key=_review_order)
    if not files:
        raise FileNotFoundError(f"no *.txt reviews in {folder}")
    return files


def carve_indices(n: int, split: str, val_fraction: float, seed: int) -> np.ndarray:
    """The training reviews (of `n`) that make up `split` ("train" or "val"): a fixed-seed random
    `val_fraction` is the validation split, in their stored order."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(val_fraction * n))
    return np.sort(order[:n_val]) if split == "val" else np.sort(order[n_val:])


class _ImdbSource(DataSource):
    """Tokenises IMDB once into a memory-mapped token cache (`tasks.token_store`): the test reviews,
    and the training reviews carved into train and val."""

    def __init__(self, data_dir: Path, max_len: int, val_fraction: float, split_seed: int):
        self.data_dir = Path(data_dir)
        self.max_len = max_len
        self.val_fraction = val_fraction
        self.split_seed = split_seed

    def _rows(self, split: str) -> Iterator[tuple[tuple[np.ndarray], int]]:
        """The reviews of IMDB's "train" or "test" split."""
        raise NotImplementedError

    def _key(self) -> dict:
        """What identifies the reviews read (part of the token cache's key)."""
        raise NotImplementedError

    def _write(self, staging: Path) -> None:
        token_store.write_split(staging / "test", self._rows("test"), documents=1, max_len=self.max_len)
        everything = staging / "imdb-train"
        token_store.write_split(everything, self._rows("train"), documents=1, max_len=self.max_len)
        reviews = token_store.open_split(everything)
        for split in ("train", "val"):
            indices = carve_indices(len(reviews), split, self.val_fraction, self.split_seed)
            token_store.write_split(staging / split, token_store.split_rows(reviews, indices), documents=1)
        del reviews
        shutil.rmtree(everything)

    def prepare(self, force: bool = False) -> Path:
        """The token cache of the reviews, tokenised once."""
        self.require()
        key = {"task": "text", **self._key(), "max_len": self.max_len, "val_fraction": self.val_fraction,
               "split_seed": self.split_seed}
        return token_store.build(self.data_dir, "text", key, self._write, force=force)

    def load(self, split: str) -> TokenSplit:
        return token_store.open_split(self.prepare() / split)


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

    def _rows(self, split):
        return folder_rows(self.root, split)

    def _key(self) -> dict:
        folders = [self.root / split / name for split in ("train", "test") for name in LABELS]
        stamps = [[f"{f.parent.name}/{f.name}", len(_review_files(f)), f.stat().st_mtime_ns] for f in folders]
        return {"root": str(self.root.resolve()), "folders": stamps}

    def describe(self) -> str:
        return f"IMDB reviews from {self.root}"


class TfdsImdb(_ImdbSource):
    kind = "tfds"

    def available(self) -> bool:
        return tfds_source.installed()

    def missing_help(self) -> str:
        return f"IMDB through tfds needs tensorflow-datasets: {release.TFDS_HINT}; or {self._elsewhere()}"

    def _elsewhere(self) -> str:
        """The other way to get the reviews, for tfds's errors."""
        return f"put the Stanford aclImdb/ folder ({release.IMDB_URL}) under {self.data_dir}"

    def _key(self) -> dict:
        return {"tfds": "imdb_reviews", "tfds_dir": tfds_source.tfds_dir(self.data_dir)}

    def _rows(self, split):
        count = 0
        for i, ex in enumerate(tfds_source.examples("imdb_reviews", split, self.data_dir, self._elsewhere())):
            text = ex["text"]
            data = text if isinstance(text, bytes) else str(text).encode("utf-8")
            label = int(ex["label"])
            if label not in (0, 1):
                raise ValueError(f"tfds imdb_reviews[{split}] example {i}: label {label} is not 0/1")
            count += 1
            yield (np.frombuffer(data, dtype=np.uint8),), label
        if not count:
            raise ValueError(f"tfds imdb_reviews[{split}] is empty")

    def describe(self) -> str:
        return "IMDB reviews from tfds imdb_reviews"


def make_source(spec, kind: str, *, data_dir: Path, max_len: int, **_unused) -> DataSource:
    o = spec.options
    cls = {"folder": FolderImdb, "tfds": TfdsImdb}.get(kind)
    if cls is None:
        raise ValueError(f"text has no {kind!r} source")
    return cls(data_dir, max_len, o["val_fraction"], o["split_seed"])
