"""AAN document matching (LRA "Retrieval"): do two papers cite each other? Bytes of both texts.

Official layout (LRA release): `tsv_data/new_aan_pairs.{train,eval,test}.tsv`, no header, five
tab-separated columns: label, id1, id2, text1, text2 (label written as 0/1 or 0.0/1.0). A field
wrapped in double quotes is unquoted CSV-style ("" -> "), as TensorFlow's CSV reader that LRA used
does. Each text is UTF-8 encoded and cut to `max_len` bytes (LRA: 4,000; our default 4,096).
The three files are tokenised once into a memory-mapped token cache (`tasks.token_store`), keyed by
their paths, sizes and times and by `max_len`; runs map it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from . import release, token_store
from .base import DataSource, TokenSplit, check_utf8

FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}


def _unquote(field: str) -> str:
    if len(field) >= 2 and field[0] == '"' and field[-1] == '"':
        return field[1:-1].replace('""', '"')
    return field


def rows(path: Path) -> Iterator[tuple[tuple[np.ndarray, np.ndarray], int]]:
    """The ((bytes of text1, bytes of text2), label) rows of one AAN pairs file, read line by line;
    ValueError names the file and line of a corrupt row."""
    path = Path(path)
    count = 0
    with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            check_utf8(path, lineno, line)
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 5:
                raise ValueError(f"{path}:{lineno}: expected 5 tab-separated fields (label, id1, id2, "
                                 f"text1, text2), got {len(fields)}")
            try:
                value = float(_unquote(fields[0]))
            except ValueError:
                value = -1.0
            if value not in (0.0, 1.0):
                raise ValueError(f"{path}:{lineno}: label must be 0 or 1, got {fields[0]!r}")
            texts = tuple(np.frombuffer(_unquote(text).encode("utf-8"), dtype=np.uint8) for text in fields[3:])
            count += 1
            yield texts, int(value)
    if not count:
        raise ValueError(f"{path}: no examples")


class OfficialAan(DataSource):
    kind = "official"

    def __init__(self, data_dir: Path, max_len: int):
        self.data_dir = Path(data_dir)
        self.max_len = max_len
        self.folder = release.find_folder(self.data_dir, "tsv_data", FILES.values())

    def available(self) -> bool:
        return self.folder is not None

    def missing_help(self) -> str:
        return "AAN retrieval data not found: " + release.release_help(
            self.data_dir, "tsv_data/new_aan_pairs.{train,eval,test}.tsv")

    def incomplete(self) -> str | None:
        if self.folder is not None:
            return None
        return release.incomplete_folder(self.data_dir, "tsv_data", FILES.values(), "the AAN release folder",
                                         f"Unpack it again from {release.LRA_RELEASE_URL}.")

    def prepare(self, force: bool = False) -> Path:
        """The token cache of the three files, tokenised once."""
        self.require()
        files = {split: self.folder / name for split, name in FILES.items()}
        return token_store.build_files(self.data_dir, "retrieval", files, rows, documents=2, max_len=self.max_len,
                                       force=force)

    def load(self, split: str) -> TokenSplit:
        return token_store.open_split(self.prepare() / split)

    def describe(self) -> str:
        return f"official AAN pairs in {self.folder}"


def make_source(spec, kind: str, *, data_dir: Path, max_len: int, **_unused) -> DataSource:
    if kind != "official":
        raise ValueError(f"retrieval has no {kind!r} source")
    return OfficialAan(data_dir, max_len)
