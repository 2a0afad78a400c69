"""Keyed, atomic, resumable on-disk caches (generated data sets, decoded official images).

A cache entry is a folder named after a hash of the parameters that produced it. It is built in a
staging folder next to it and moved into place with one `os.replace` once complete, so a reader
sees either no entry or a complete one — never a half-written one. The staging folder survives an
interruption and the builder may resume from what it finds there. A lock file keeps two processes
(e.g. one per node) from building the same entry at once.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Iterator

COMPLETE = "COMPLETE"
META = "meta.json"


def param_hash(params: dict, length: int = 12) -> str:
    """Stable short hash of a JSON-serialisable parameter dict."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


CONTENT_HASH = "content_hash.json"


def content_hash(files: list[Path], root: Path | None = None) -> str:
    """sha256 (16 hex digits) over the names (relative to `root`, else base names), sizes and bytes of
    `files`."""
    digest = hashlib.sha256()
    for path in sorted(Path(f) for f in files):
        name = str(path.relative_to(root)) if root is not None else path.name
        digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def entry_hash(entry: Path) -> str:
    """`content_hash` of a complete cache entry's data files, computed once and kept in the entry
    (an entry never changes once complete; a read-only cache gets it computed each time)."""
    entry = Path(entry)
    memo = entry / CONTENT_HASH
    try:
        return json.loads(memo.read_text(encoding="utf-8"))["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    value = content_hash(entry_files(entry), entry)
    try:
        atomic_write_bytes(memo, json.dumps({"sha256": value}).encode())
    except OSError:
        pass
    return value


def entry_files(entry: Path) -> list[Path]:
    """The data files of a cache entry (its bookkeeping files excluded)."""
    skip = {COMPLETE, CONTENT_HASH}
    return sorted(p for p in Path(entry).rglob("*") if p.is_file() and p.name not in skip)


def is_complete(path: Path) -> bool:
    return (Path(path) / COMPLETE).is_file()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_meta(path: Path) -> dict:
    return json.loads((Path(path) / META).read_text(encoding="utf-8"))


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no inter-process lock, still atomic
        yield
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def build_once(final: Path, build: Callable[[Path], None], meta: dict, *, force: bool = False) -> Path:
    """Return the complete cache folder `final`, building it with `build(staging_dir)` if needed.

    `build` writes its files into `staging_dir`; it may find the files of an interrupted earlier
    attempt there and resume. `meta` is stored as meta.json. With `force`, an existing entry is
    rebuilt (the old one stays readable until the new one replaces it)."""
    final = Path(final)
    if is_complete(final) and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{final.name}.lock"):
        if is_complete(final) and not force:
            return final          # another process finished it while we waited
        staging = final.parent / f".{final.name}.partial"
        if force and staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(exist_ok=True)
        build(staging)
        atomic_write_bytes(staging / META, (json.dumps(meta, indent=2, sort_keys=True, default=str)
                                            + "\n").encode("utf-8"))
        atomic_write_bytes(staging / COMPLETE, b"ok\n")
        if final.exists():
            # Only complete entries (forced rebuild) or foreign leftovers can be here.
            old = final.parent / f".{final.name}.old.{os.getpid()}"
            os.replace(final, old)
            os.replace(staging, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, final)
    return final


def complete_entries(parent: Path, prefix: str) -> list[Path]:
    """Complete cache folders in `parent` whose name starts with `prefix`."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.name.startswith(prefix) and is_complete(p))
