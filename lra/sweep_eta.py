"""Time left in a local sweep, from the pace (training steps per second) of the runs it has seen.

Runs of one kind (task, length and attention: the cells that differ only by seed) go at one pace;
kinds do not: `flash` through the CPU interpreter takes minutes where `softmax` takes seconds. So
each kind's pace comes from its own runs: those that finished (steps trained / seconds taken), or
while none has, the running ones whose pace has been seen. A kind without any such run is given the
mean pace of the kinds with a finished run (each kind counting once), or while no run has finished,
of the kinds with a seen running pace.

A running run's pace is the one seen since its first observed step (``recent_pace``): its process
start, data loading and compilation left out, and for a resumed run the steps of its earlier
segments too. Its steps over its elapsed time are no pace at all: a compiled run that has taken one
step in its first minute would look thousands of times slower than it is, a resumed run showing
step 40,000 at once thousands of times faster. So a running run whose pace has not been seen yet
goes at its kind's pace: its remaining steps once it shows a step, before that its kind's estimated
duration minus its elapsed time; a queued run takes its kind's estimated duration. The queued runs share the slots that the running
ones occupy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable


@dataclass(frozen=True)
class Run:
    """A run as the ETA sees it: its kind, the steps it plans, and for a finished or running run the
    seconds it has taken and the steps it has done (None before its first step); for a running run
    also, when known, its steps per second since its first observed step (``recent_pace``)."""

    kind: Hashable
    max_steps: int
    elapsed_s: float = 0.0
    step: int | None = None
    recent_pace: float | None = None


def _finished_paces(runs: list[Run]) -> dict[Hashable, float]:
    """Steps per second of each kind among finished `runs`: steps trained over seconds taken."""
    steps: dict[Hashable, float] = {}
    seconds: dict[Hashable, float] = {}
    for run in runs:
        if run.step and run.elapsed_s > 0:
            steps[run.kind] = steps.get(run.kind, 0) + run.step
            seconds[run.kind] = seconds.get(run.kind, 0.0) + run.elapsed_s
    return {kind: steps[kind] / seconds[kind] for kind in steps}


def _running_paces(runs: list[Run]) -> dict[Hashable, float]:
    """Mean seen pace of each kind among running `runs`."""
    seen: dict[Hashable, list[float]] = {}
    for run in runs:
        if run.recent_pace:
            seen.setdefault(run.kind, []).append(run.recent_pace)
    return {kind: sum(paces) / len(paces) for kind, paces in seen.items()}


def seconds_left(finished: list[Run], running: list[Run], queued: list[Run], slots: int) -> float | None:
    """Estimated seconds until the sweep ends; None while nothing tells (no pace seen yet)."""
    if not (queued or running):
        return 0.0
    finished_paces, running_paces = _finished_paces(finished), _running_paces(running)
    paces = {**running_paces, **finished_paces}       # a kind's finished runs before its running ones
    known = finished_paces or running_paces
    if not known:
        return None
    mean_pace = sum(known.values()) / len(known)      # for kinds without a seen pace

    def duration(run: Run) -> float:
        return run.max_steps / paces.get(run.kind, mean_pace)

    left = []
    for run in running:
        if run.step is None:
            left.append(max(0.0, duration(run) - run.elapsed_s))
        else:
            pace = run.recent_pace or paces.get(run.kind, mean_pace)
            left.append(max(0, run.max_steps - run.step) / pace)
    left += [duration(run) for run in queued]
    return sum(left) / max(1, slots, len(running))


def format_eta(seconds: float | None) -> str:
    """'ETA 1h05m', 'ETA 3m20s', 'ETA ?'."""
    if seconds is None:
        return "ETA ?"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"ETA {hours}h{minutes:02d}m"
    return f"ETA {minutes}m{secs:02d}s" if minutes else f"ETA {secs}s"
