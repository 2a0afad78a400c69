"""LRA tasks as Lightning DataModules: ListOps, Text (IMDB bytes), Retrieval (AAN), Image (CIFAR-10
gray), Pathfinder-32/64, Path-X (128) and Path-256, from the official release, tfds, local folders
or the built-in generators. See tasks/README.md and docs/interfaces.md.

    from tasks import TASKS, build_datamodule
    dm = build_datamodule("listops", data_dir="data", batch_size=32)

`build_datamodule` (and with it Lightning) is imported lazily, so generator worker processes that
import `tasks.pathfinder_gen` stay light.
"""
from __future__ import annotations

from .registry import SOURCES, TASKS, TaskSpec

__all__ = ["TASKS", "SOURCES", "TaskSpec", "build_datamodule", "LraDataModule"]


def __getattr__(name: str):
    if name == "build_datamodule":
        from .build import build_datamodule
        return build_datamodule
    if name == "LraDataModule":
        from .base import LraDataModule
        return LraDataModule
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")
