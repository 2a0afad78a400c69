"""Progress of a data build (a generator or a cache fill): what, where, how big, then a bar with ETA.

Every generator and cache of `tasks` reports through `BuildProgress`, so they all look alike:

    generating Pathfinder-32 hard: 200,000 images (~205 MB) into data/generated/pathfinder32/...
    [rich bar: done/total, rate, elapsed, remaining]                  (only when stderr is a terminal)
    generating Pathfinder-32 hard: done, 200,000 images in 3m12s (1,042 images/s)

Without a terminal (logs, CI) only the first and the last line are written. Everything goes to
stderr, so a command's own output on stdout stays clean.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as disk tools show them)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns


def human_seconds(seconds: float) -> str:
    """75 -> '1m15s', 3725 -> '1h02m05s', 4.2 -> '4.2s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class BuildProgress:
    """Context manager around one build of `total` items (`unit`, e.g. "images") into `where`.

    `nbytes`: the expected size on disk (shown as "~205 MB"). `completed`: items already there (a
    resumed build). `show`: draw the rich bar (default: when `stream` is a terminal); the start and
    end lines are written either way. Call `advance(n)` as items are made."""

    def __init__(self, title: str, total: int, unit: str, where: Path | str, *, nbytes: float | None = None,
                 completed: int = 0, show: bool | None = None, stream: TextIO | None = None):
        self.title = title
        self.total = int(total)
        self.unit = unit
        self.where = where
        self.nbytes = nbytes
        self.completed = int(completed)
        self.stream = stream if stream is not None else sys.stderr
        self.show = _is_terminal(self.stream) if show is None else bool(show)
        self._start_completed = self.completed
        self._t0 = 0.0
        self._bar = None
        self._task = None

    def start_line(self) -> str:
        size = f" (~{human_bytes(self.nbytes)})" if self.nbytes else ""
        done = f", {self.completed:,} already there" if self.completed else ""
        return f"{self.title}: {self.total:,} {self.unit}{size} into {self.where}{done}"

    def end_line(self, seconds: float, failed: bool) -> str:
        made = self.completed - self._start_completed
        if failed:
            return (f"{self.title}: stopped at {self.completed:,}/{self.total:,} {self.unit} after "
                    f"{human_seconds(seconds)}")
        rate = f" ({made / seconds:,.0f} {self.unit}/s)" if seconds > 0 and made else ""
        return f"{self.title}: done, {made:,} {self.unit} in {human_seconds(seconds)}{rate}"

    def __enter__(self) -> "BuildProgress":
        print(self.start_line(), file=self.stream, flush=True)
        self._t0 = time.perf_counter()
        if self.show:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TaskProgressColumn(), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(),
                                 console=Console(file=self.stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.title, total=self.total, completed=self.completed, rate="")
        return self

    def advance(self, n: int = 1) -> None:
        self.update(self.completed + int(n))

    def update(self, completed: int) -> None:
        self.completed = int(completed)
        if self._bar is not None:
            elapsed = time.perf_counter() - self._t0
            made = self.completed - self._start_completed
            rate = f"{made / elapsed:,.0f} {self.unit}/s" if elapsed > 0 and made else ""
            self._bar.update(self._task, completed=self.completed, rate=rate)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        print(self.end_line(time.perf_counter() - self._t0, failed=exc_type is not None),
              file=self.stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
