"""Token data sets on disk, memory-mapped: one folder per split, tokenised once into a cache entry.

Layout of a split folder (all `.npy`, opened with `np.load(mmap_mode="r")`):
  * `tokens_<d>.npy`: uint8, the tokens of document column d (0; 0 and 1 for two-document tasks),
    every example's tokens one after the other, each cut to the entry's `max_len`;
  * `offsets_<d>.npy`: int64 (N + 1,), example i of column d is tokens_d[offsets_d[i]:offsets_d[i + 1]];
  * `labels.npy`: int64 (N,).

A cache entry (`build`) holds one such folder per split under `<data_dir>/cache/<name>-tokens-<hash>/`,
the hash covering what was read (files with sizes and times, or a tfds name), `max_len` and `FORMAT`;
it is made with `tasks.cache.build_once`, so its manifest records every array's size and shape and
is checked each time the entry is opened. Rows are written as they are read (`SplitWriter`): neither
tokenising nor training holds a whole split in memory, and a run reads only the pages of the
examples it uses.
"""
from __future__ import annotations

import os
from array import array
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from . import cache
from .base import Ragged, TokenSplit

FORMAT = 1            # layout version; part of every entry's key
TOKEN_DTYPE = np.uint8
TOKENS = "tokens_{}.npy"
OFFSETS = "offsets_{}.npy"
LABELS = "labels.npy"
_BLOCK = 1 << 24      # bytes copied at a time into the final token array

Row = tuple[Sequence[np.ndarray], int]   # (one token array per document column, label)


class SplitWriter:
    """Writes one split row by row into `folder`: tokens go to disk as they come; only the lengths
    and labels (8 bytes each per row) stay in memory until `close`."""

    def __init__(self, folder: Path, documents: int, max_len: int | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_len = max_len
        self._raw = [self.folder / f".tokens_{d}.raw" for d in range(documents)]
        self._handles = [open(path, "wb") for path in self._raw]
        self._lengths = [array("q") for _ in range(documents)]
        self._labels = array("q")

    def add(self, documents: Sequence[np.ndarray], label: int) -> None:
        if len(documents) != len(self._handles):
            raise ValueError(f"expected {len(self._handles)} document(s) per row, got {len(documents)}")
        for handle, lengths, tokens in zip(self._handles, self._lengths, documents):
            tokens = np.asarray(tokens)[: self.max_len]
            handle.write(tokens.astype(TOKEN_DTYPE, copy=False).tobytes())
            lengths.append(len(tokens))
        self._labels.append(int(label))

    def __len__(self) -> int:
        return len(self._labels)

    def close(self) -> int:
        """Finish the split's arrays; returns the number of rows."""
        for d, (raw, handle, lengths) in enumerate(zip(self._raw, self._handles, self._lengths)):
            handle.close()
            offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=offsets[1:])
            _copy_raw(raw, self.folder / TOKENS.format(d), int(offsets[-1]))
            raw.unlink()
            _save(self.folder / OFFSETS.format(d), offsets)
        _save(self.folder / LABELS, np.frombuffer(self._labels, dtype=np.int64))
        return len(self._labels)

    def __enter__(self) -> "SplitWriter":
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self.close()
        else:
            for handle in self._handles:
                handle.close()


def _save(path: Path, values: np.ndarray) -> None:
    tmp = path.with_name(f".{path.stem}.tmp.npy")
    np.save(tmp, values)
    os.replace(tmp, path)


def _copy_raw(raw: Path, path: Path, count: int) -> None:
    """The bare tokens in `raw` as the `.npy` array `path`, copied block by block."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=TOKEN_DTYPE, shape=(count,))
    at = 0
    with open(raw, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            values = np.frombuffer(block, dtype=TOKEN_DTYPE)
            out[at:at + len(values)] = values
            at += len(values)
    if at != count:
        raise RuntimeError(f"internal error: {raw} holds {at} tokens, {count} expected")
    out.flush()
    del out


def write_split(folder: Path, rows: Iterable[Row], documents: int, max_len: int | None = None) -> int:
    """Write `rows` as the split folder `folder`; returns the number of rows."""
    with SplitWriter(folder, documents, max_len) as writer:
        for tokens, label in rows:
            writer.add(tokens, label)
    return len(writer)


def open_split(folder: Path) -> TokenSplit:
    """The split in `folder`, every array memory-mapped (nothing is read until used)."""
    folder = Path(folder)
    documents = []
    while (folder / TOKENS.format(len(documents))).is_file():
        d = len(documents)
        documents.append(Ragged(np.load(folder / TOKENS.format(d), mmap_mode="r"),
                                np.load(folder / OFFSETS.format(d), mmap_mode="r")))
    if not documents:
        raise FileNotFoundError(f"no {TOKENS.format(0)} in {folder}")
    return TokenSplit(tuple(documents), np.load(folder / LABELS, mmap_mode="r"), folder=folder)


def split_rows(split: TokenSplit, indices: Iterable[int]) -> Iterable[Row]:
    """Rows `indices` of `split`, in that order (e.g. to write a subset of a memory-mapped split)."""
    for i in indices:
        yield tuple(seq[int(i)] for seq in split.sequences), int(split.labels[int(i)])


def stamps(files: Iterable[Path]) -> list[list]:
    """[path, size, modification time (ns)] of each file: what a cache key of read files holds."""
    out = []
    for path in sorted(Path(f) for f in files):
        info = path.stat()
        out.append([str(path.resolve()), info.st_size, info.st_mtime_ns])
    return out


def entry_folder(data_dir: Path, name: str, key: dict) -> Path:
    return Path(data_dir) / "cache" / f"{name}-tokens-{cache.param_hash({**key, 'format': FORMAT})}"


def build(data_dir: Path, name: str, key: dict, write: Callable[[Path], None], *, force: bool = False) -> Path:
    """The complete token cache entry of `key` (`entry_folder`), made once by `write(staging)`,
    which writes one split folder per split (`write_split`)."""
    target = entry_folder(data_dir, name, key)
    return cache.build_once(target, write, meta={**key, "format": FORMAT}, force=force,
                            rebuild=f"remove {target}; the next run tokenises the data again")


def build_files(data_dir: Path, name: str, files: dict[str, Path], rows: Callable[[Path], Iterable[Row]], *,
                documents: int, max_len: int, force: bool = False) -> Path:
    """`build` for data sets of one file per split (`files`: split -> path), each read by `rows(path)`;
    the key holds the files' paths, sizes and times and `max_len`."""
    def write(staging: Path) -> None:
        for split, path in files.items():
            write_split(staging / split, rows(path), documents=documents, max_len=max_len)

    key = {"task": name, "files": stamps(files.values()), "max_len": max_len}
    return build(data_dir, name, key, write, force=force)
