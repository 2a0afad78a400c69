"""Time left in a local sweep, from the runs that finished and the step progress of those running.

A run's duration is estimated as the mean of the finished runs' durations; before any has
finished, from the running runs (elapsed / fraction of max_steps done). A running run has left
its own extrapolation (elapsed x remaining / done) when it has taken steps, else the estimated
duration minus its elapsed time. The queued runs share the slots that the running ones occupy.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunningRun:
    elapsed_s: float
    fraction: float | None     # of max_steps done; None before the first step


def _duration_estimate(finished_s: list[float], running: list[RunningRun]) -> float | None:
    if finished_s:
        return sum(finished_s) / len(finished_s)
    guesses = [r.elapsed_s / r.fraction for r in running if r.fraction]
    return sum(guesses) / len(guesses) if guesses else None


def seconds_left(finished_s: list[float], running: list[RunningRun], queued: int, slots: int) -> float | None:
    """Estimated seconds until the sweep ends; None while nothing tells (no run finished, none has
    taken a step)."""
    duration = _duration_estimate(finished_s, running)
    if duration is None:
        return None
    left = []
    for run in running:
        if run.fraction:
            left.append(run.elapsed_s * (1.0 - run.fraction) / run.fraction)
        else:
            left.append(max(0.0, duration - run.elapsed_s))
    work = sum(left) + queued * duration
    return work / max(1, slots, len(running)) if (queued or running) else 0.0


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
