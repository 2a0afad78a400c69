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
duration minus its elapsed time; a queued run takes its kind's estimated duration. The queued runs
share the slots that the running ones occupy.

A kind's pace says nothing of kinds of another group: `flash` through the Triton interpreter goes a
hundred times slower than the attentions that run natively, so the mean pace for a kind not yet
seen comes from kinds of its own group only. A run whose group has no pace yet counts as nothing,
and the estimate says it is a lower bound ("ETA > 2m10s"): the README's CPU sweep starts with
`flash`, whose pace would otherwise make the four attentions after it look like a quarter of an hour.
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
    group: Hashable = None


@dataclass(frozen=True)
class Estimate:
    """Seconds until the sweep ends; ``at_least``: some runs have no comparable pace yet and count
    as nothing, so the sweep takes longer."""

    seconds: float
    at_least: bool = False


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


def _mean_paces(paces: dict[Hashable, float], groups: dict[Hashable, Hashable]) -> dict[Hashable, float]:
    """Each group's mean pace over its kinds in `paces` (each kind counting once)."""
    by_group: dict[Hashable, list[float]] = {}
    for kind, pace in paces.items():
        by_group.setdefault(groups[kind], []).append(pace)
    return {group: sum(values) / len(values) for group, values in by_group.items()}


def estimate(finished: list[Run], running: list[Run], queued: list[Run], slots: int) -> Estimate | None:
    """Estimated time until the sweep ends; None while nothing tells (no pace seen yet)."""
    if not (queued or running):
        return Estimate(0.0)
    groups = {run.kind: run.group for run in [*finished, *running, *queued]}
    finished_paces, running_paces = _finished_paces(finished), _running_paces(running)
    paces = {**running_paces, **finished_paces}       # a kind's finished runs before its running ones
    if not paces:
        return None
    # for kinds without a seen pace: the mean of their group's kinds with a finished run, or while
    # none has, with a seen running pace
    group_paces = {**_mean_paces(running_paces, groups), **_mean_paces(finished_paces, groups)}
    unknown = False

    def pace_of(run: Run) -> float | None:
        return paces.get(run.kind) or group_paces.get(run.group)

    left = []
    for run in [*running, *queued]:
        if run.recent_pace:
            left.append(max(0, run.max_steps - (run.step or 0)) / run.recent_pace)
            continue
        pace = pace_of(run)
        if pace is None:
            unknown = True
        elif run.step is not None:                    # running, its own pace not seen yet
            left.append(max(0, run.max_steps - run.step) / pace)
        else:                                         # before its first step, or queued
            left.append(max(0.0, run.max_steps / pace - run.elapsed_s))
    return Estimate(sum(left) / max(1, slots, len(running)), at_least=unknown)


def format_eta(eta: Estimate | float | None) -> str:
    """'ETA 1h05m', 'ETA 3m20s', 'ETA > 3m20s' (a lower bound), 'ETA ?'."""
    if isinstance(eta, Estimate):
        if eta.at_least:
            return "ETA ?" if eta.seconds < 1 else "ETA > " + _duration(eta.seconds)
        eta = eta.seconds
    return "ETA ?" if eta is None else "ETA " + _duration(eta)


def _duration(seconds: float) -> str:
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
