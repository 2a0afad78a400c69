"""Where data lives: the data directory, the official LRA release layout, and how to get data.

The LRA release (`lra_release.gz`, about 7.7 GB) unpacks to a nested `lra_release/lra_release/...`
tree; users also move folders around. We therefore look for the expected sub-folders (e.g.
`listops-1000`, `tsv_data`, `pathfinder32`) anywhere up to a few levels below the data directory.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

LRA_RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TFDS_HINT = "pip install 'lra[tfds]'  (tensorflow-datasets; reads the data through tfds)"

SEARCH_DEPTH = 4  # data_dir/lra_release/lra_release/<name> is depth 3; one spare level


def default_data_dir() -> Path:
    """$LRA_DATA, else ./data."""
    return Path(os.environ.get("LRA_DATA") or "data")


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    return Path(data_dir).expanduser() if data_dir is not None else default_data_dir()


def find_folder(data_dir: Path, name: str, must_contain: Iterable[str] = (),
                depth: int = SEARCH_DEPTH) -> Path | None:
    """First folder called `name` (breadth-first, at most `depth` levels below `data_dir`,
    `data_dir` itself included) that contains every relative path in `must_contain`."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        return None
    needed = tuple(must_contain)
    level = [data_dir]
    for _ in range(depth + 1):
        nxt = []
        for folder in level:
            if folder.name == name and all((folder / rel).exists() for rel in needed):
                return folder
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            # Never descend into our own caches.
            nxt.extend(c for c in children if c.name not in ("generated", "cache"))
        level = nxt
    return None


def incomplete_folder(data_dir: Path, name: str, needed: Iterable[str], what: str, fix: str) -> str | None:
    """When a folder called `name` is there but lacks some of `needed` (an interrupted unpack, a
    deleted file), the message naming it and what is missing; None when there is no such folder.
    Callers use it only when no complete folder was found, so that source="auto" does not silently
    fall back to another source (a generator, tfds) next to a broken copy of the data."""
    folder = find_folder(data_dir, name)
    if folder is None:
        return None
    missing = [rel for rel in needed if not (folder / rel).exists()]
    if not missing:
        return None
    return (f"{what} in {folder} is incomplete: missing {', '.join(missing)} (an interrupted unpack?). "
            f"{fix}")


def release_help(data_dir: Path, expected: str) -> str:
    return (f"expected {expected} under {data_dir} (nested lra_release/lra_release/... folders are found "
            f"too). Get the official LRA release: download {LRA_RELEASE_URL} (about 7.7 GB) and unpack it "
            f"there: mkdir -p {data_dir} && tar xzf lra_release.gz -C {data_dir}")
