"""One trainer per run folder: an exclusive `fcntl.flock` on `<run>/run.lock`.

The lock belongs to the open file, so the operating system releases it when the holding process
ends in any way (a crash or SIGKILL included): a lock file left behind is never a stale lock. The
holder writes its PID and host into the file, so that a second trainer can say who holds it.
"""
from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

LOCK_NAME = "run.lock"


class RunLocked(ValueError):
    """Another process holds the run folder's lock (`holder`: its `pid <PID> on <host>`)."""

    def __init__(self, run_dir: Path, holder: str):
        super().__init__(f"{run_dir} is in use by another trainer ({holder}); skipping it")
        self.run_dir, self.holder = Path(run_dir), holder


def _describe(text: str) -> str:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if "pid" not in fields:
        return "a process that has not written its PID yet"
    return f"pid {fields['pid']} on {fields.get('host', '?')}"


class RunLock:
    """Hold `run_dir`'s lock from `acquire()` (or `with`) until `release()` or the end of the process."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None
        self._created: Path | None = None  # the outermost folder `acquire` made, if it made any

    def acquire(self) -> "RunLock":
        """Take the lock or raise `RunLocked` naming its holder; never waits."""
        missing = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._created = missing[-1] if missing else None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            for attempt in range(5):  # `holder()` probes take the lock shared for an instant
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 4:
                        raise
                    time.sleep(0.05)
        except BlockingIOError:
            holder = _describe(os.pread(fd, 4096, 0).decode("utf-8", errors="replace"))
            os.close(fd)
            raise RunLocked(self.run_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()}\nhost={socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the file releases the flock
            self._fd = None

    def discard(self) -> None:
        """Release the lock and, when `acquire` made the run folder and it holds nothing but the lock
        file, remove the lock file and the folders `acquire` made (those still empty)."""
        try:
            if self._fd is not None and self._created is not None and \
                    [p.name for p in self.run_dir.iterdir()] == [LOCK_NAME]:
                self.path.unlink()  # while still holding the lock: no other trainer took this file
                folder = self.run_dir
                while True:
                    folder.rmdir()
                    if folder == self._created:
                        break
                    folder = folder.parent
        except OSError:  # another process wrote there meanwhile: its folders stay
            pass
        finally:
            self.release()

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holder(run_dir: str | Path) -> str | None:
    """Who holds `run_dir`'s lock (`pid <PID> on <host>`), or None when nobody does. Creates nothing."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(os.pread(fd, 4096, 0).decode("utf-8", errors="replace"))
    finally:
        os.close(fd)
    return None
