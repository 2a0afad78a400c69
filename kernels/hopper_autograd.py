"""Autograd of the Hopper Gluon kernels: :func:`hopper_flash_attention`, forward
(:func:`kernels.hopper_attention.hopper_forward`) and backward
(:func:`kernels.hopper_attention_bwd.hopper_backward`) as one differentiable call.

Dense, no dropout, sm_90 with a Triton release the kernels support
(:func:`kernels.hopper_support.supported`); anything else raises ``ValueError`` with the reason.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .hopper_support import supported


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy when TMA cannot read it (:func:`kernels.hopper_support.supported`'s
    stride and alignment rules): an incoming gradient may be any view."""
    import triton

    ok, _ = supported(triton.__version__, None, t.dtype, t.shape[-1], strides=(t.stride(),),
                      data_ptrs=(t.data_ptr(),), names=("grad_out",))
    return t if ok else t.contiguous()


class HopperFlashFunction(torch.autograd.Function):
    """(out, row statistics) of q, k, v (B, H, N, d) through the Hopper kernels."""

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, causal, softmax_scale, warp_specialize, overlap, pingpong,
                backward_warp_specialize, backward_one_pass):
        from .hopper_attention import hopper_forward

        out, row_stats = hopper_forward(q, k, v, key_padding_mask, causal, softmax_scale,
                                        warp_specialize=warp_specialize, overlap=overlap, pingpong=pingpong)
        ctx.save_for_backward(q, k, v, out, row_stats, key_padding_mask)
        ctx.args = (causal, softmax_scale, backward_warp_specialize, backward_one_pass)
        ctx.mark_non_differentiable(row_stats)
        return out, row_stats

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, _grad_row_stats):
        from .hopper_attention_bwd import hopper_backward

        q, k, v, out, row_stats, key_padding_mask = ctx.saved_tensors
        causal, softmax_scale, backward_warp_specialize, backward_one_pass = ctx.args
        dq, dk, dv = hopper_backward(_tma_ready(grad_out), q, k, v, out, row_stats, key_padding_mask, causal,
                                     softmax_scale, warp_specialize=backward_warp_specialize,
                                     one_pass=backward_one_pass)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def hopper_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                           key_padding_mask: torch.Tensor | None = None, causal: bool = False,
                           softmax_scale: float | None = None, warp_specialize: bool = True,
                           overlap: bool = True, pingpong: bool = False,
                           backward_warp_specialize: bool = False,
                           backward_one_pass: bool = False) -> torch.Tensor:
    """softmax(q k^T * scale) v with gradients to q, k, v, on the Hopper kernels. Arguments as
    :func:`kernels.flash_attention` (no dropout) plus the forward's schedule
    (:func:`kernels.hopper_attention.hopper_forward`) and the backward's
    (``backward_warp_specialize``: the dK/dV kernel with a TMA producer partition,
    :func:`kernels.hopper_attention_bwd.hopper_backward`'s ``warp_specialize``; ``backward_one_pass``:
    dQ in the dK/dV kernel, its ``one_pass``)."""
    out, _ = HopperFlashFunction.apply(q, k, v, key_padding_mask, bool(causal), softmax_scale,
                                       bool(warp_specialize), bool(overlap), bool(pingpong),
                                       bool(backward_warp_specialize), bool(backward_one_pass))
    return out
