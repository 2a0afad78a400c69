"""Pixel data sets on disk: `images.npy` (N, H, W) uint8, memory-mapped, + `labels.npy` (N,) int64.

`fill_images` writes the image array in parallel over CPU cores, chunk by chunk, reporting through
`tasks.build_progress`. Finished chunks are recorded in `done.npy`, so an interrupted fill resumes
where it stopped (used inside a cache staging folder, see `tasks.cache`).
"""
from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

IMAGES = "images.npy"
LABELS = "labels.npy"
DONE = "done.npy"


def open_images(folder: Path, mode: str = "r") -> np.ndarray:
    return np.load(Path(folder) / IMAGES, mmap_mode=mode)


def load_labels(folder: Path) -> np.ndarray:
    return np.load(Path(folder) / LABELS)


def save_labels(folder: Path, labels: np.ndarray) -> None:
    path = Path(folder) / LABELS
    tmp = path.with_name(f".{path.name}.tmp.npy")
    np.save(tmp, np.asarray(labels, dtype=np.int64))
    os.replace(tmp, path)


@dataclass(frozen=True)
class Job:
    """`module.function(start, stop, out, **kwargs)` fills out[0:stop-start] with images start..stop
    and returns per-image int labels (or None). Must be importable by worker processes."""

    function: str          # "package.module:function"
    kwargs: dict


def _resolve(function: str):
    module, name = function.split(":")
    return getattr(importlib.import_module(module), name)


def _run_chunk(job: Job, path: str, start: int, stop: int):
    images = np.load(path, mmap_mode="r+")
    t0 = time.perf_counter()
    labels = _resolve(job.function)(start, stop, images[start:stop], **job.kwargs)
    images.flush()
    del images
    return start, stop, None if labels is None else np.asarray(labels, dtype=np.int64), time.perf_counter() - t0


def process_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes for CPU-bound numpy/PIL jobs. "fork" where the platform has it: no
    re-import of the caller's __main__ (spawn would need an `if __name__ == "__main__"` guard in
    every user script) and the jobs never touch the threads (e.g. torch's) that fork cannot copy."""
    import warnings

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
        return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


def fill_images(folder: Path, n: int, shape: Sequence[int], job: Job, *, workers: int | None = None,
                chunk: int | None = None, description: str = "images", progress: bool | None = None,
                report=None) -> dict:
    """Create (or resume) `folder/images.npy` with `n` images of `shape` filled by `job`.

    Progress: `report` (a `tasks.build_progress.BuildProgress` of a larger build, advanced by the
    images made here), else a `BuildProgress` of its own titled `description` (`progress`: its bar).

    Returns {"labels": array or None, "seconds": wall time, "cpu_seconds": time summed over chunks,
    "images": images made in this call}. Labels returned by the job are collected in order."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / IMAGES
    shape = tuple(int(s) for s in shape)
    workers = default_workers() if workers is None else max(1, int(workers))
    if chunk is None:
        chunk = int(np.clip(n // (workers * 8) if n else 1, 8, 1024))
    starts = list(range(0, n, chunk))
    if n == 0:
        np.save(path, np.zeros((0, *shape), dtype=np.uint8))
        return {"labels": None, "seconds": 0.0, "cpu_seconds": 0.0, "images": 0}
    images = None
    if path.exists():
        try:
            images = np.load(path, mmap_mode="r+")
        except (ValueError, OSError):
            images = None
        if images is not None and (images.shape != (n, *shape) or images.dtype != np.uint8):
            images = None
    if images is None:
        # A fresh (zero) image file: bookkeeping left by an earlier attempt describes the old file and
        # must go first, or an interruption before the first chunk is recorded would leave chunks
        # marked done over zero images.
        for name in (DONE, "partial_labels.npy"):
            (folder / name).unlink(missing_ok=True)
        images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, *shape))
        done = np.zeros(len(starts), dtype=bool)
    else:
        try:
            done = np.load(folder / DONE)
            if done.shape != (len(starts),):
                done = np.zeros(len(starts), dtype=bool)
        except (OSError, ValueError):
            done = np.zeros(len(starts), dtype=bool)
    del images
    labels_path = folder / "partial_labels.npy"
    try:
        labels = np.load(labels_path) if done.any() else None
        if labels is not None and labels.shape != (n,):
            labels, done = None, np.zeros(len(starts), dtype=bool)
    except (OSError, ValueError):
        labels, done = None, np.zeros(len(starts), dtype=bool)

    todo = [i for i, d in enumerate(done) if not d]
    made = sum(min(starts[i] + chunk, n) - starts[i] for i in todo)
    t0 = time.perf_counter()
    cpu = 0.0

    def record(i, stop, chunk_labels, seconds):
        nonlocal labels, cpu
        cpu += seconds
        if chunk_labels is not None:
            if labels is None:
                labels = np.full(n, -1, dtype=np.int64)
            labels[starts[i]:stop] = chunk_labels
            np.save(labels_path, labels)
        done[i] = True
        tmp = folder / ".done.tmp.npy"
        np.save(tmp, done)
        os.replace(tmp, folder / DONE)

    if report is None:
        from .build_progress import BuildProgress
        reporting = BuildProgress(description, n, "images", folder, nbytes=n * int(np.prod(shape)),
                                  completed=n - made, show=progress)
    else:
        reporting = contextlib.nullcontext(report)
    with reporting as bar:
        advance = bar.advance
        if workers == 1 or len(todo) <= 1:
            for i in todo:
                stop = min(starts[i] + chunk, n)
                _, _, chunk_labels, seconds = _run_chunk(job, str(path), starts[i], stop)
                record(i, stop, chunk_labels, seconds)
                advance(stop - starts[i])
        else:
            with process_pool(min(workers, len(todo))) as pool:
                pending = {pool.submit(_run_chunk, job, str(path), starts[i], min(starts[i] + chunk, n)): i
                           for i in todo}
                try:
                    while pending:
                        finished_futures, _ = wait(pending, return_when=FIRST_COMPLETED)
                        for future in finished_futures:
                            i = pending.pop(future)
                            _, stop, chunk_labels, seconds = future.result()
                            record(i, stop, chunk_labels, seconds)
                            advance(stop - starts[i])
                except BaseException:
                    # A failed chunk (e.g. a corrupt image) or an interruption: report it now, not
                    # after every queued chunk has run (leaving the pool waits for them).
                    for future in pending:
                        future.cancel()
                    raise
    seconds = time.perf_counter() - t0
    if labels is not None and (labels < 0).any():
        raise RuntimeError(f"internal error: labels missing for some images in {folder}")
    return {"labels": labels, "seconds": seconds, "cpu_seconds": cpu, "images": made}


def is_filled(folder: Path, n: int, shape: Sequence[int]) -> bool:
    """Was `folder` completed by fill_images + save_labels + finish (e.g. one split of a cache whose
    build was interrupted later)? Then a resumed build can keep it as it is."""
    folder = Path(folder)
    if (folder / DONE).exists() or not (folder / LABELS).is_file():
        return False
    try:
        images = np.load(folder / IMAGES, mmap_mode="r")
        labels = np.load(folder / LABELS, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return (images.shape == (n, *(int(s) for s in shape)) and images.dtype == np.uint8
            and labels.shape == (n,))


def finish(folder: Path) -> None:
    """Remove the resume bookkeeping once the folder is complete."""
    for name in (DONE, "partial_labels.npy"):
        (Path(folder) / name).unlink(missing_ok=True)
