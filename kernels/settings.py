"""What the kernels run with in this process, for ``lra info`` and benchmark metadata."""
from __future__ import annotations

import torch

from . import ops
from . import triton_attention as kern
from .dropout import one_pass_backward_always
from .hopper_dispatch import hopper_forward_enabled
from .inductor import inductor_static_launch


def kernel_settings() -> dict:
    """The settings in force: Philox rounds of the attention dropout, the dropout backward that runs
    now ("fused": one pass, atomic dQ; "split": two passes, deterministic, under
    ``torch.use_deterministic_algorithms(True)``; see :mod:`kernels.dropout`), the form torch.compile
    sees the ops in (:data:`kernels.ops.OP_FORM`), whether Inductor launches them statically
    (:func:`kernels.enable_inductor_static_launch`) and whether eager forwards may run the Hopper
    ping-pong kernel (:func:`kernels.use_hopper_forward`) and whether calls without dropout take the
    one-pass backward too (:func:`kernels.use_one_pass_backward`)."""
    return {"dropout_philox_rounds": kern.PHILOX_ROUNDS.value,
            "dropout_backward": "split" if torch.are_deterministic_algorithms_enabled() else "fused",
            "compile_op": ops.OP_FORM, "inductor_static_launch": inductor_static_launch(),
            "hopper_forward": hopper_forward_enabled(), "one_pass_backward": one_pass_backward_always()}
