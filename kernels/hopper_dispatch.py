"""Which kernel runs the eager attention forward: the Hopper ping-pong forward
(:func:`kernels.hopper_attention.launch_forward`, ``pingpong=True, overlap=True``) where
:func:`kernels.hopper_support.takes_hopper_forward` says so, the portable one
(:func:`kernels.launch_args.forward`) otherwise.

Both write the output in :func:`kernels.launch_args.new_output`'s layout and store the same row
statistics, so the backward is the portable one either way (the Hopper backward is slower). Only
the eager forward (:class:`kernels.autograd.FlashFunction`, :class:`kernels.autograd.PackedFlashFunction`)
dispatches; under torch.compile the ops launch the portable kernel (:mod:`kernels.ops`).
:func:`use_hopper_forward` switches the dispatch off or on for the process.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton

from . import launch_args
from .hopper_support import cuda_capability, takes_hopper_forward

Tensor = torch.Tensor

_TRITON_VERSION = triton.__version__
_enabled = True


def use_hopper_forward(enabled: bool) -> bool:
    """Let eager dense forwards run the Hopper ping-pong kernel where it applies (``True``, the
    default) or keep every forward on the portable kernel (``False``), process-wide, from the next
    call on. Returns the previous setting (to restore it). :func:`kernels.kernel_settings` reports
    it as ``hopper_forward``."""
    global _enabled
    previous, _enabled = _enabled, bool(enabled)
    return previous


def hopper_forward_enabled() -> bool:
    """The setting of :func:`use_hopper_forward`."""
    return _enabled


def forward(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
            fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor], causal: bool, dropout_p: float,
            softmax_scale: float, tiles: list[int]) -> tuple[Tensor, Tensor]:
    """The eager forward: (out, row statistics) as :func:`kernels.launch_args.forward` returns them,
    from the Hopper ping-pong kernel or the portable one. The output is allocated first
    (:func:`kernels.launch_args.new_output`), so the decision sees its strides too and the portable
    kernel writes into it when the Hopper one does not run. The arguments are the public call's,
    checked (:func:`kernels.validation.check_attention_inputs`) and ``softmax_scale`` resolved, so the
    Hopper kernel launches through :func:`kernels.hopper_attention.launch_forward`, without
    :func:`kernels.hopper_attention.hopper_forward`'s checks of the same facts."""
    out = launch_args.new_output(q)
    if takes_hopper_forward(_TRITON_VERSION, cuda_capability(q.get_device()) if q.is_cuda else None, q.dtype,
                            q.shape[3], k.shape[2], dropout_p, fwd_indices is not None, (q, k, v, out),
                            enabled=_enabled):
        from .hopper_attention import launch_forward

        return launch_forward(q, k, v, out, key_padding_mask, causal, softmax_scale, overlap=True, pingpong=True)
    return launch_args.forward(launch_args.eager, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, causal,
                               dropout_p, softmax_scale, tiles, out=out)
