"""Where a number came from: versions, device, git revision, date and command line."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path


def git_revision(path: str | Path | None = None) -> str:
    """Short git revision of the checkout holding `path` (default: this package), '+dirty' if modified.

    Machines that receive a copy of the tree without `.git` (e.g. a remote GPU machine the sources are
    copied to) pass the revision in the environment variable LRA_GIT_REV instead.
    """
    if os.environ.get("LRA_GIT_REV"):
        return os.environ["LRA_GIT_REV"]
    cwd = Path(path) if path else Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name, module in (("torch", "torch"), ("triton", "triton"), ("lightning", "pytorch_lightning")):
        try:
            out[name] = __import__(module).__version__
        except Exception as err:  # noqa: BLE001 - report why a library is unusable, never crash
            out[name] = f"unavailable ({type(err).__name__})"
    return out


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu ({platform.processor() or platform.machine()})"


# environment settings that change how fast our kernels run (kernels/ itself reads none): torch's
# static launch of user Triton kernels under torch.compile (kernels.enable_inductor_static_launch)
KERNEL_ENV = ("TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS",)


def kernel_env() -> dict:
    """The KERNEL_ENV variables that are set, by name."""
    import os

    return {name: os.environ[name] for name in KERNEL_ENV if os.environ.get(name)}


def collect() -> dict:
    return {
        "command": " ".join(sys.argv),
        "device": device_name(),
        "versions": versions(),
        "git_rev": git_revision(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "kernel_env": kernel_env(),
    }
