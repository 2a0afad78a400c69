"""SIGTERM ends a run resumably however often it comes.

Inside a fit, Lightning's handler notes the first SIGTERM and stops at the next step boundary
(last.ckpt, record `interrupted`); its teardown then puts back the handler it found. Were that the
default action, a second SIGTERM would kill the run while it writes its record, which would keep
saying `running`. Second ones come: a sweep killed by SIGKILL exits thread by thread, and the
kernel sends its child the parent-death signal (`lra.sweep`) again each time it hands the child to
another of the sweep's threads.

`ending_on_sigterm` installs the handler that Lightning finds and calls after its own: inside a fit
it leaves the stop to Lightning; outside one (the record writing around it, the test) the first SIGTERM raises
KeyboardInterrupt, which the run records as interrupted; every later SIGTERM is ignored until the
block ends. `sigterm_received` says whether one came: under DDP, where Lightning's own stop is
switched off, `lra.callbacks.SigtermStopsAllRanks` stops every rank at one step from it.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class _TermHandler:
    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum, frame) -> None:
        first, self.received = not self.received, True
        # installed as the process's handler: outside a fit (Lightning's composite calls us inside one)
        if first and signal.getsignal(signal.SIGTERM) is self:
            raise KeyboardInterrupt("SIGTERM")


_active: list[_TermHandler] = []   # the handlers of the `ending_on_sigterm` blocks open now, innermost last


def sigterm_received() -> bool:
    """Whether a SIGTERM came within the innermost `ending_on_sigterm` block open now."""
    return bool(_active) and _active[-1].received


@contextlib.contextmanager
def ending_on_sigterm() -> Iterator[None]:
    """Within the block a SIGTERM interrupts (once) rather than kills; off the main thread a no-op
    (Python delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _TermHandler()
    previous = signal.signal(signal.SIGTERM, handler)
    _active.append(handler)
    try:
        yield
    finally:
        _active.remove(handler)
        signal.signal(signal.SIGTERM, previous)
