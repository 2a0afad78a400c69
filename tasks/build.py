"""`build_datamodule`: task name + options -> an LraDataModule with its data source resolved."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from . import release
from .base import DataSource, LraDataModule
from .registry import SOURCES, TASKS, TaskSpec, check_augment


def get_spec(task: str) -> TaskSpec:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    return TASKS[task]


def resolve_max_len(spec: TaskSpec, seq_len: int | None) -> int:
    """Tokens per sequence: `seq_len` for text-like tasks, H*W (and nothing else) for pixel tasks."""
    if seq_len is None:
        return spec.max_len
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
    if spec.is_pixel and seq_len != spec.max_len:
        h, w = spec.image_shape
        others = [name for name, s in TASKS.items() if s.is_pixel and s.max_len == seq_len]
        hint = f"; {', '.join(others)} has {seq_len} pixels" if others else ""
        raise ValueError(f"{spec.name} images have {h}x{w} = {spec.max_len} pixels, one token each, so "
                         f"seq_len must be {spec.max_len} (got {seq_len}){hint}")
    return seq_len


def make_source(spec: TaskSpec, kind: str, **ctx) -> DataSource:
    module = importlib.import_module(spec.module)
    return module.make_source(spec, kind, **ctx)


def resolve_source(spec: TaskSpec, source: str, **ctx) -> DataSource:
    """The requested source, or for "auto" the first available one in the task's order."""
    source = {"local": "folder"}.get(source, source)   # "local" is accepted as another name
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if source != "auto":
        if source not in spec.sources:
            raise ValueError(f"{spec.name} has no {source!r} source; it supports {', '.join(spec.sources)}")
        src = make_source(spec, source, **ctx)
        src.require()
        return src
    tried = []
    for kind in spec.sources:
        src = make_source(spec, kind, **ctx)
        if src.available():
            return src
        problem = src.incomplete()
        if problem:   # a broken copy of this source's data: say so, never fall back silently
            raise FileNotFoundError(f"{spec.name}: {problem}")
        tried.append(src.missing_help())
    raise FileNotFoundError(f"no data for {spec.name}. " + " | ".join(tried))


def _source(spec: TaskSpec, data_dir, source: str, **ctx) -> DataSource:
    return resolve_source(spec, source, data_dir=Path(release.resolve_data_dir(data_dir)), **ctx)


def data_identity(task: str, *, data_dir: str | os.PathLike | None = None, source: str = "auto",
                  seq_len: int | None = None, limit_train: int | None = None, limit_eval: int | None = None,
                  difficulty: str | int | None = None) -> dict:
    """`DataSource.identity` of the source a run with these settings reads (for `source="auto"`,
    the one found on disk now), without reading or generating any data. Raises what
    `build_datamodule` raises when no source can serve the task."""
    spec = get_spec(task)
    return _source(spec, data_dir, source, max_len=resolve_max_len(spec, seq_len), seq_len=seq_len,
                   limit_train=limit_train, limit_eval=limit_eval, difficulty=difficulty).identity()


def build_datamodule(task: str, *, data_dir: str | os.PathLike | None = None, batch_size: int,
                     seq_len: int | None = None, num_workers: int = 0, seed: int = 0,
                     limit_train: int | None = None, limit_eval: int | None = None, source: str = "auto",
                     difficulty: str | int | None = None, generator_workers: int | None = None,
                     augment: str = "none") -> LraDataModule:
    """An LRA task's DataModule (see docs/interfaces.md).

    data_dir: where data is found / generated (default $LRA_DATA or ./data). seq_len: tokens per
    sequence for text-like tasks (must be H*W for pixel tasks). limit_train / limit_eval: keep only
    the first K examples of train / of val and test (generators then make only that many).
    source: auto | official | generated | tfds | folder. difficulty: Pathfinder contour length
    ('easy' 6, 'intermediate' 9, 'hard' 14 = LRA's default). generator_workers: processes used by
    the generators in prepare_data (default: all cores, at most 16 for ListOps). augment: a
    label-preserving training augmentation the task admits (`TaskSpec.augmentations`: dihedral or
    hflip for Pathfinder, hflip for Image), see tasks.base."""
    spec = get_spec(task)
    for name, value in (("batch_size", batch_size), ("num_workers", num_workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "batch_size" else 0):
            raise ValueError(f"{name} must be an integer >= {1 if name == 'batch_size' else 0}, got {value!r}")
    for name, value in (("limit_train", limit_train), ("limit_eval", limit_eval)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    if difficulty is not None and not spec.name.startswith("path"):
        raise ValueError(f"difficulty applies to the Pathfinder tasks only, not {spec.name}")
    check_augment(spec, augment)
    max_len = resolve_max_len(spec, seq_len)
    src = _source(spec, data_dir, source, max_len=max_len, seq_len=seq_len, limit_train=limit_train,
                  limit_eval=limit_eval, difficulty=difficulty, workers=generator_workers)
    return LraDataModule(spec, src, batch_size=batch_size, max_len=max_len, num_workers=num_workers, seed=seed,
                         limit_train=limit_train, limit_eval=limit_eval, augment=augment)
