"""How Inductor launches our kernels under torch.compile (the triton_op form, :mod:`kernels.ops`)."""
from __future__ import annotations

import os
from typing import Optional

STATIC_LAUNCH_ENV = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"
_SETTING = "static_launch_user_defined_triton_kernels"


def enable_inductor_static_launch() -> bool:
    """Let Inductor launch user-defined Triton kernels, ours included, with its static C launcher.

    Under the triton_op form Inductor launches our kernels from its generated code: its own kernels
    through its static C launcher, user kernels by default through Triton's Python launcher, which
    costs host time on every launch of a host-bound compiled step. This switches the static launch
    on for them; a kernel it cannot serve falls back to Triton's launcher by itself.

    What it sets, process-wide: ``torch._inductor.config.static_launch_user_defined_triton_kernels =
    True`` and the environment variable ``$TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1``
    (the choice is made where a kernel is compiled, mostly in Inductor's compile worker processes,
    which read that variable when they start). Call it before the first ``torch.compile``. A value of
    the variable set by the user is kept (``0`` keeps the static launch off). Returns whether the
    static launch is on afterwards; False where this torch has no such setting."""
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config, _SETTING):
        return False
    if STATIC_LAUNCH_ENV not in os.environ:
        os.environ[STATIC_LAUNCH_ENV] = "1"
        setattr(inductor_config, _SETTING, True)  # this process read the variable when torch was imported
    return bool(getattr(inductor_config, _SETTING))


def inductor_static_launch() -> Optional[bool]:
    """Whether Inductor launches user Triton kernels statically in this process (None: this torch has
    no such setting)."""
    import torch._inductor.config as inductor_config

    return getattr(inductor_config, _SETTING, None)
