"""Keyed, atomic, resumable on-disk caches (generated data sets, decoded official images).

A cache entry is a folder named after a hash of the parameters that produced it. It is built in a
staging folder next to it and moved into place with one `os.replace` once complete, so a reader
sees either no entry or a complete one — never a half-written one. The staging folder survives an
interruption and the builder may resume from what it finds there. A lock file keeps two processes
(e.g. one per node) from building the same entry at once.

A complete entry holds a manifest (`manifest.json`): the size of each of its files, the shape of
each `.npy` array and the content hash, recorded when it was written. `build_once` checks them
whenever it hands out an existing entry, so a truncated or altered file is a `DamagedCache` error
naming the file and how to rebuild it, before anything reads the data. (Entries written without a
manifest are not checked.)
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
MANIFEST = "manifest.json"


class DamagedCache(ValueError):
    """A complete cache entry whose files differ from what its manifest recorded."""


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
    skip = {COMPLETE, CONTENT_HASH, MANIFEST}
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


def _npy_shape(path: Path) -> list[int] | None:
    """The shape in a `.npy` file's header (None: not a readable header)."""
    import numpy as np

    try:
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            return list(read(handle)[0])
    except (OSError, ValueError):
        return None


def _describe_files(entry: Path) -> dict:
    files = {}
    for path in entry_files(entry):
        info = {"bytes": path.stat().st_size}
        if path.suffix == ".npy" and (shape := _npy_shape(path)) is not None:
            info["shape"] = shape
        files[path.relative_to(entry).as_posix()] = info
    return files


def write_manifest(entry: Path) -> None:
    """Record the sizes, array shapes and content hash of a finished entry's files."""
    entry = Path(entry)
    manifest = {"files": _describe_files(entry), "content_hash": entry_hash(entry)}
    atomic_write_bytes(entry / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def default_rebuild(entry: Path) -> str:
    return f"remove {entry}; the next run builds it again"


def check_entry(entry: Path, rebuild: str | None = None) -> None:
    """Raise `DamagedCache` when a file of the complete entry `entry` is missing or differs in size or
    array shape from its manifest, or its kept content hash differs; `rebuild` says how to make it again."""
    entry = Path(entry)
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as err:
        problem = f"its manifest {entry / MANIFEST} is unreadable ({err})"
    else:
        problem = None
        for name, want in sorted(manifest.get("files", {}).items()):
            path = entry / name
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                problem = f"{path} is missing"
                break
            if size != want.get("bytes"):
                problem = f"{path} has {size} bytes, {want.get('bytes')} when it was written (truncated or altered)"
                break
            if "shape" in want and _npy_shape(path) != want["shape"]:
                problem = f"{path} holds an array of shape {_npy_shape(path)}, {want['shape']} when it was written"
                break
        kept = None
        if problem is None and (entry / CONTENT_HASH).is_file():
            try:
                kept = json.loads((entry / CONTENT_HASH).read_text(encoding="utf-8")).get("sha256")
            except (OSError, ValueError):
                kept = None
            if kept is not None and manifest.get("content_hash") not in (None, kept):
                problem = (f"{entry / CONTENT_HASH} says {kept}, its manifest {manifest['content_hash']}")
    if problem is not None:
        raise DamagedCache(f"damaged data cache {entry}: {problem}. Rebuild it: {rebuild or default_rebuild(entry)}")


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


def build_once(final: Path, build: Callable[[Path], None], meta: dict, *, force: bool = False,
               rebuild: str | None = None) -> Path:
    """Return the complete cache folder `final`, building it with `build(staging_dir)` if needed.

    `build` writes its files into `staging_dir`; it may find the files of an interrupted earlier
    attempt there and resume. `meta` is stored as meta.json. With `force`, an existing entry is
    rebuilt (the old one stays readable until the new one replaces it). An existing entry is checked
    against its manifest first (`check_entry`; `rebuild`: the command that makes it again)."""
    final = Path(final)
    if is_complete(final) and not force:
        check_entry(final, rebuild)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{final.name}.lock"):
        if is_complete(final) and not force:
            check_entry(final, rebuild)
            return final          # another process finished it while we waited
        staging = final.parent / f".{final.name}.partial"
        if force and staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(exist_ok=True)
        build(staging)
        atomic_write_bytes(staging / META, (json.dumps(meta, indent=2, sort_keys=True, default=str)
                                            + "\n").encode("utf-8"))
        (staging / CONTENT_HASH).unlink(missing_ok=True)  # a hash an interrupted attempt may have left
        write_manifest(staging)
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
